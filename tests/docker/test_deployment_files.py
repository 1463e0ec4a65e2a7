"""The deployment's files, read without an engine: what a user relies on before anything runs."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


class ComposeLoader(yaml.SafeLoader):
    """YAML with Compose's merge tags (!reset, !override), read as their plain values."""


for _tag in ("!reset", "!override"):
    ComposeLoader.add_constructor(_tag, lambda loader, node: loader.construct_sequence(node)
                                  if isinstance(node, yaml.SequenceNode) else loader.construct_mapping(node))


def load_compose(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=ComposeLoader)


COMPOSE = load_compose(ROOT / "docker/compose.yaml")
FETCH_KERNELS = ROOT / "docker/fetch_kernels.py"


def requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].lower().replace("_", "-")


def test_the_env_file_is_where_the_readme_and_the_example_say():
    assert COMPOSE["services"]["agent"]["env_file"] == [".env"]  # relative to docker/, the project directory
    readme = (ROOT / "README.md").read_text()
    assert "cp .env.example docker/.env" in readme
    assert "docker/.env" in (ROOT / ".env.example").read_text()
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert "docker/.env" in ignored and ".env" in ignored  # keys never enter an image


def test_images_are_built_here_and_never_pulled():
    for name in ("prepare", "agent", "trainer"):
        service = COMPOSE["services"][name]
        assert service["pull_policy"] == "never" and "build" in service, name


def test_a_permanent_failure_stops_after_a_few_restarts():
    for name in ("agent", "trainer"):
        policy = COMPOSE["services"][name]["restart"]
        kind, _, retries = policy.partition(":")
        assert kind == "on-failure" and 0 < int(retries) <= 5, policy


def test_the_trainer_has_least_privilege_for_bubblewrap():
    trainer = COMPOSE["services"]["trainer"]
    assert trainer["cap_drop"] == ["ALL"]
    assert set(trainer["cap_add"]) == {"SYS_ADMIN", "NET_ADMIN", "SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE",
                                       "FOWNER"}
    assert "privileged" not in trainer and "no-new-privileges:true" in trainer["security_opt"]
    profile = yaml.safe_load((ROOT / "docker/trainer-seccomp.json").read_text())
    denied = {name for rule in profile["syscalls"] for name in rule["names"] if rule["action"] == "SCMP_ACT_ERRNO"}
    assert "pivot_root" not in denied and "mount" not in denied
    assert {"init_module", "finit_module", "kexec_load", "bpf", "ptrace", "open_by_handle_at", "keyctl"} <= denied


def test_the_no_gpu_override_drops_the_device_reservation():
    trainer = load_compose(ROOT / "docker/compose.cpu.yaml")["services"]["trainer"]
    assert trainer["deploy"] == {} and "--gpus" not in trainer["command"]
    assert re.search(r"^\s+deploy: !reset", (ROOT / "docker/compose.cpu.yaml").read_text(), re.MULTILINE)


def test_the_test_overlay_never_gives_compose_a_network_to_create():
    overlay = load_compose(ROOT / "tests/docker/compose.test.yaml")
    for name in COMPOSE["services"]:
        mode = overlay["services"].get(name, {}).get("network_mode") or COMPOSE["services"][name].get("network_mode")
        assert mode in ("host", "none"), name
        assert overlay["services"].get(name, {}).get("build", {}).get("network", "host") == "host"
    assert "networks" not in COMPOSE and "networks" not in overlay


def test_images_install_the_project_with_every_dependency_pinned():
    pinned = {requirement_name(line): line.split("==")[1] for line in (ROOT / "docker/constraints.txt").read_text()
              .splitlines() if "==" in line and not line.startswith("#")}
    wanted = [r for r in requires("autoresearch") if "extra ==" not in r or "train" in r]
    unpinned = [spec for spec in wanted if requirement_name(spec) not in pinned and requirement_name(spec) != "torch"]
    assert unpinned == [], f"add to docker/constraints.txt: {unpinned}"
    for name in ("agent", "trainer"):
        dockerfile = (ROOT / f"docker/{name}.Dockerfile").read_text()
        assert "-c docker/constraints.txt" in dockerfile and "COPY pyproject.toml" in dockerfile
        assert "ARG BASE=" in dockerfile


def fake_kernel_cache(hub: Path, repos: list[str]) -> None:
    """A hub cache laid out as the kernels library leaves it (refs/v1 -> a snapshot with build/)."""
    for repo in repos:
        folder = hub / f"kernels--{repo.replace('/', '--')}"
        (folder / "refs").mkdir(parents=True)
        (folder / "refs" / "v1").write_text("0" * 40)
        (folder / "snapshots" / ("0" * 40) / "build" / "torch-cuda").mkdir(parents=True)


@pytest.mark.parametrize("present", [True, False])
def test_the_kernel_check_resolves_version_1_offline(tmp_path, present):
    repos = ["varunneal/flash-attention-3", "kernels-community/flash-attn3"]
    fake_kernel_cache(tmp_path / "hub", repos if present else repos[:1])
    checked = subprocess.run([sys.executable, str(FETCH_KERNELS), "cache"], capture_output=True, text=True,
                             env={"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin"},
                             timeout=120)
    if present:
        assert checked.returncode == 0, checked.stderr
        assert checked.stdout.count("v1: ") == 2
    else:
        assert checked.returncode != 0
        assert "kernels-community/flash-attn3 v1 is not in the hub cache" in checked.stderr
        assert "docker/kernels-cache/" in checked.stderr
