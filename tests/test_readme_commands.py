"""Every command the README and docs/ give a user parses as it is written: the front door cannot rot.

Commands are the lines of fenced bash blocks. An `autoresearch` command is parsed by the real command line
(options, types, callbacks) and `run`'s options by its settings model, without running anything; a `make`
target must exist (`make -n`); a `docker compose` command must name a service of the compose file, and the
arguments it gives the agent's container are an `autoresearch` command; a script must exist.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import typer
import yaml

from agent import cli
from agent.settings import RunSettings

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.S | re.M)
# typer parses with a click of its own (typer._click) where it vendors one: its errors are that click's
UsageErrors = tuple({importlib.import_module(f"{package}.exceptions").UsageError
                     for package in ("typer._click", "click") if importlib.util.find_spec(package)})
COMPOSE_RUN_FLAGS = {"--rm", "--no-deps", "-d", "--detach", "-T"}


def commands(page: Path) -> list[str]:
    found = []
    for block in FENCE.findall(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line and not line.startswith("#"):
                found.append(line)
    return found


def words(command: str) -> list[str]:
    parts = shlex.split(command, comments=True)
    while parts and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", parts[0]):  # VAR=value before the command
        parts.pop(0)
    return parts


ALL = [(page.relative_to(ROOT).as_posix(), command) for page in PAGES for command in commands(page)]


def parse_autoresearch(arguments: list[str]) -> None:
    """Parses as `autoresearch ARGUMENTS` would, runs nothing; click.UsageError or a settings error if it fails."""
    group = typer.main.get_command(cli.app)
    assert arguments, "no command given"
    name, rest = arguments[0], list(arguments[1:])
    with group.context_class(group, info_name="autoresearch") as context:
        command = group.get_command(context, name)
        if command is None:
            raise UsageErrors[0](f"No such command {name!r}")
        with command.make_context(name, rest, parent=context) as sub:
            if name == "run":
                RunSettings.model_validate(dict(sub.params))


def check(command: str) -> None:
    parts = words(command)
    program = parts[0]
    if program in ("autoresearch", ".venv/bin/autoresearch"):
        parse_autoresearch(parts[1:])
    elif program == "make":
        dry = subprocess.run(["make", "-n", *parts[1:]], cwd=ROOT, capture_output=True, text=True)
        assert "No rule to make target" not in dry.stderr, dry.stderr
    elif parts[:2] == ["docker", "compose"]:
        check_compose(parts[2:])
    elif program in ("bash", "sh") and len(parts) > 1:
        assert (ROOT / parts[1]).is_file(), f"{parts[1]} does not exist"
    elif program == "sky":  # the task file it launches is the project's
        for task in (part for part in parts if part.endswith((".yaml", ".yml"))):
            assert (ROOT / task).is_file(), f"{task} does not exist"


class ComposeLoader(yaml.SafeLoader):
    """Compose's own tags (!reset, !override) read as plain values."""


ComposeLoader.add_multi_constructor("!", lambda loader, tag, node: None)


def check_compose(parts: list[str]) -> None:
    files = []
    while parts and parts[0] == "-f":
        files.append(ROOT / parts[1])
        parts = parts[2:]
    assert files and all(f.is_file() for f in files), f"compose files {files}"
    services = set().union(*(yaml.load(f.read_text(), ComposeLoader).get("services") or {} for f in files))
    action, rest = parts[0], parts[1:]
    if action == "run":
        while rest and (rest[0] in COMPOSE_RUN_FLAGS or rest[0] in ("-v", "-e", "--user")):
            rest = rest[2:] if rest[0] in ("-v", "-e", "--user") else rest[1:]
        assert rest[0] in services, f"no service {rest[0]}"
        if rest[0] == "agent":  # its entrypoint is `autoresearch`
            parse_autoresearch(rest[1:])
    elif action in ("cp",):
        source = next(part for part in rest if ":" in part)
        assert source.partition(":")[0] in services
    elif action in ("exec", "logs", "stop", "restart"):
        named = [part for part in rest if not part.startswith("-")]
        assert not named or named[0] in services, f"no service {named[0]}"
    else:
        assert action in ("up", "down", "build", "ps", "pull", "config"), f"unknown compose action {action}"


def test_the_pages_give_commands():
    pages = {page for page, _ in ALL}
    assert "README.md" in pages
    readme = [command for page, command in ALL if page == "README.md"]
    assert any(words(c)[:2] == ["make", "run"] for c in readme) and any(words(c)[:2] == ["make", "test"]
                                                                         for c in readme)
    assert sum(words(c)[0].endswith("autoresearch") for c in readme) >= 5


@pytest.mark.parametrize("page, command", ALL, ids=[f"{page}: {command[:70]}" for page, command in ALL])
def test_a_command_of_the_pages_parses(page, command):
    try:
        check(command)
    except UsageErrors as err:
        pytest.fail(f"{page}: `{command}` does not parse: {err.format_message()}")


@pytest.mark.parametrize("broken, why", [
    ("autoresearch run --tag nightly --runner ray", "No such option"),
    ("autoresearch run --parallel 0", "greater than or equal to 1"),
    ("autoresearch status --tagg nightly", "No such option"),
    ("autoresearch statuss", "No such command"),
    ("docker compose -f docker/compose.yaml run --rm --no-deps agent status --tga x", "No such option"),
    ("docker compose -f docker/compose.yaml run --rm nobody status", "no service nobody"),
    ("sky launch -c night deploy/skypilot.yml --secret OPENAI_API_KEY", "deploy/skypilot.yml does not exist"),
])
def test_a_broken_command_would_be_caught(broken, why):
    with pytest.raises((*UsageErrors, AssertionError, ValueError)) as caught:
        check(broken)
    assert why in str(caught.value) or why in getattr(caught.value, "format_message", lambda: "")()
