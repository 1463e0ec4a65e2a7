"""The command line: one way to open a workspace or fail, and `run`'s options as one settings object."""

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from agent import cli
from agent.recording.calibration import calibration_path, read_calibration
from agent.settings import LoopSettings, RunSettings, internal
from tests.helpers.processes import interruptible
from trainer.tracks.hardware import this_machine


@pytest.mark.parametrize("command", [["status"], ["steer", "--tag", "nope", "prompts/program.md"], ["transcript"],
                                     ["report"], ["confirm"]])
def test_every_command_on_a_missing_tag_fails_the_same_clear_way(command, tmp_path):
    arguments = command + (["--tag", "nope"] if "--tag" not in command else []) + ["--workspaces", str(tmp_path)]
    result = CliRunner().invoke(cli.app, arguments)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: no workspace for tag 'nope'") and "autoresearch" in result.output


class Demo(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    count: int = Field(3, description="How many.")
    every_keeps: int = Field(5, alias="every", description="After this many keeps.")
    label: str | None = Field(None, description="A name.")
    hidden: float = internal(1.0)


def demo_app(seen):
    app = typer.Typer()

    @app.command()
    @cli.settings_command(Demo, {"label": dict(help="The label to show.")})
    def go(settings: Demo) -> None:
        """Runs the demo."""
        seen.append(settings)
    return app


def test_a_settings_model_becomes_a_command_with_an_option_per_field():
    seen = []
    app = demo_app(seen)
    assert CliRunner().invoke(app, ["--count", "4", "--every", "2"]).exit_code == 0
    assert CliRunner().invoke(app, []).exit_code == 0
    assert seen == [Demo(count=4, every_keeps=2), Demo()] and seen[1].hidden == 1.0
    shown = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    assert "Runs the demo." in shown and "How many." in shown and "The label to show." in shown
    assert "--every" in shown and "--hidden" not in shown


@pytest.mark.parametrize("arguments, problem", [(["--count", "many"], "Invalid value for '--count'"),
                                                (["--hidden", "2"], "No such option: --hidden")])
def test_a_bad_option_is_refused_by_name(arguments, problem):
    seen = []
    result = CliRunner().invoke(demo_app(seen), arguments, terminal_width=200)
    assert result.exit_code == 2 and problem in result.output and seen == []


def test_run_offers_every_setting_of_the_loop_and_of_the_run_in_panels():
    shown = CliRunner().invoke(cli.app, ["run", "--help"], terminal_width=200).output
    offered = [name for name, field in RunSettings.model_fields.items()
               if (field.json_schema_extra or {}).get("cli") is not False]
    assert {"max_experiments", "model", "proposer", "spool", "ray_address", "cache"} <= set(offered)
    assert len(offered) <= 30, offered
    for name in offered:
        field = RunSettings.model_fields[name]
        option = "--" + (field.alias or name).replace("_", "-")
        assert option in shown, option
        assert f"─ {field.json_schema_extra['panel']} " in shown, name
    assert shown.index("─ The night ") < shown.index("─ Deciding past the noise ")
    for internal_only in ("--timeout-seconds", "--max-fix-attempts", "--grace-seconds", "--runner ", "--programs",
                          "--overlap", "--noise-every", "--algorithmic-share", "--thinking-budget"):
        assert internal_only not in shown, internal_only
    assert issubclass(RunSettings, LoopSettings)  # the loop takes the run's settings as they are


def test_model_implies_its_proposer_and_a_contradiction_is_refused():
    assert RunSettings().proposer == "optuna"
    assert RunSettings(model="anthropic:claude-opus-5-5").proposer == "llm"
    assert RunSettings(model="claude-code:sonnet").proposer == "cli" and RunSettings(model="codex").proposer == "cli"
    assert RunSettings(model="openai:gpt-5.5", proposer="hybrid").proposer == "hybrid"
    with pytest.raises(ValueError, match="--proposer optuna takes no --model"):
        RunSettings(model="openai:gpt-5.5", proposer="optuna")
    assert RunSettings(program=["a.md", "b.md"]).programs == [Path("a.md"), Path("b.md")]
    assert RunSettings(program=["a.md"]).programs == []


BAD_RUNS = [
    (["--parallel", "0"], "--parallel '0': input should be greater than or equal to 1"),
    (["--gpu-usd-per-hour", "0"], "--gpu-usd-per-hour '0.0': input should be greater than 0"),
    (["--plateau", "-1"], "--plateau '-1': input should be greater than or equal to 0"),
    (["--keep-sigmas", "-2"], "--keep-sigmas '-2.0': input should be greater than or equal to 0"),
    (["--noise-seeds", "-1"], "--noise-seeds '-1': input should be greater than or equal to 0"),
    (["--max-experiments", "-3"], "--max-experiments '-3': input should be greater than or equal to 0"),
    (["--max-hours", "0"], "--max-hours '0.0': input should be greater than 0"),
    (["--hybrid-share", "1.5"], "--hybrid-share '1.5': input should be less than or equal to 1"),
    (["--proposer", "gpt"], "unknown proposer 'gpt': use optuna, llm, hybrid or cli"),
    (["--proposer", "llm"], "--proposer llm needs --model PROVIDER:MODEL"),
    (["--proposer", "optuna", "--model", "anthropic:claude-opus-5-5"], "--proposer optuna takes no --model"),
    (["--model", "anthropic:claude-opus-5-5"], "ANTHROPIC_API_KEY"),
    (["--model", "claude-code"], "`claude` is not on PATH"),
    (["--model", "anthropic:claude-opus-5-5", "--effort", "loud", "--base-url", "http://127.0.0.1:9"], "loud"),
    (["--track", "cpv"], "unknown track 'cpv': use gpu, cpu, test, gpu-flops, test-flops, test-clock "
                         "(did you mean cpu?)"),
    (["--program", "nowhere.md"], "research program nowhere.md does not exist"),
    (["--spool", "s", "--ray-address", "h:6379"], "give --spool DIR or --ray-address HOST:PORT, not both"),
    (["--runner", "ray"], "No such option: --runner"),
]


@pytest.mark.parametrize("arguments, problem", BAD_RUNS, ids=[" ".join(a) for a, _ in BAD_RUNS])
def test_run_refuses_a_bad_value_in_one_line_before_creating_or_downloading_anything(arguments, problem, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("AUTORESEARCH_CACHE", raising=False)  # `run --cache` sets it: restored after the test
    if "--effort" in arguments:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no coding CLI
    workspaces, cache = tmp_path / "workspaces", tmp_path / "cache"
    result = CliRunner().invoke(cli.app, ["run", "--tag", "new", "--workspaces", str(workspaces), "--cache",
                                          str(cache), *arguments], terminal_width=300)
    assert result.exit_code == 2, result.output
    assert problem in result.output and "Traceback" not in result.output, result.output
    if not problem.startswith("No such option"):
        said = [line for line in result.output.splitlines() if line.strip()]
        assert len(said) == 1 and said[0].startswith("error: "), said  # one line, nothing said before it
    assert not workspaces.exists() and not cache.exists()


def test_status_watch_into_a_pipe_prints_dated_snapshots_not_redraws(workspace):
    command = [sys.executable, "-m", "agent.cli", "status", "--tag", workspace.tag, "--workspaces",
               str(workspace.dir.parent), "--watch", "--interval", "0.3"]
    process = subprocess.Popen(interruptible(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(6)
    finally:
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=30)[0]
    assert output.count("--- ") >= 2, output
    assert "\x1b[" not in output, "a pipe gets no cursor movement or colour codes"


def test_a_ray_cluster_that_is_not_there_is_said_at_once(tmp_path, workspace):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"  # bound, never listening: connections are refused
        run = CliRunner().invoke(cli.app, ["run", "--workspaces", str(tmp_path), "--ray-address",
                                           address], terminal_width=300)
        confirm = CliRunner().invoke(cli.app, ["confirm", "--tag", workspace.tag, "--workspaces",
                                               str(workspace.dir.parent), "--ray-address", address],
                                     terminal_width=300)
    for result in (run, confirm):
        assert result.exit_code == 2, result.output
        assert f"error: cannot connect to the Ray cluster at '{address}'" in result.output
        assert "ray start --head" in result.output


def test_init_picks_this_machine_s_profile_and_says_why_or_takes_a_named_one(test_track, tmp_path):
    workspaces = ["--workspaces", str(tmp_path), "--cache", str(test_track.directory.parent)]
    result = CliRunner().invoke(cli.app, ["init", "--tag", "here", "--track", "test", *workspaces], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "profile cpu (" in result.output and "ATTENTION = 'sdpa'" in result.output and "CPU: SDPA" in result.output
    assert 'ATTENTION = "sdpa"' in (tmp_path / "here" / "train.py").read_text()
    assert json.loads((tmp_path / "here" / "run.json").read_text())["profile"]["name"] == "cpu"

    result = CliRunner().invoke(cli.app, ["init", "--tag", "card", "--track", "test", "--profile", "rtx-4090",
                                          *workspaces], terminal_width=200)
    assert result.exit_code == 0 and "profile rtx-4090" in result.output, result.output
    assert 'ATTENTION = "flex"' in (tmp_path / "card" / "train.py").read_text()

    result = CliRunner().invoke(cli.app, ["init", "--tag", "old", "--track", "test", "--profile", "t4", *workspaces],
                                terminal_width=200)
    assert result.exit_code == 2 and "error: Tesla T4 has compute capability 7.5" in result.output
    assert not (tmp_path / "old").exists()


def test_doctor_says_what_this_machine_is_and_what_each_track_would_get(test_track, monkeypatch, tmp_path):
    installed = tmp_path / "bin"
    installed.mkdir()
    (installed / "codex").write_text("#!/bin/sh\n")
    (installed / "codex").chmod(0o755)
    monkeypatch.setenv("PATH", f"{installed}:/usr/bin:/bin")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never-shown")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = CliRunner().invoke(cli.app, ["doctor"], terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "ANTHROPIC_API_KEY: set" in result.output and "sk-ant-never-shown" not in result.output
    assert "OPENAI_API_KEY: not set: export OPENAI_API_KEY=" in result.output
    assert f"codex: {installed / 'codex'}" in result.output and "claude: not on PATH" in result.output
    assert f"tracks prepared in {test_track.directory.parent}: " in result.output and "test" in result.output
    assert "free disk for the cache" in result.output and "docker: " in result.output
    assert f"device: {this_machine().describe()}" in result.output and "runs: " in result.output
    assert "cpu: profile cpu" in result.output and "gpu: profile h100" in result.output
    assert "no GPU on this machine" in result.output and "rtx-5090" in result.output


def test_calibrate_trains_the_baseline_over_seeds_and_keeps_its_numbers_in_the_cache(test_track):
    refused = CliRunner().invoke(cli.app, ["calibrate", "--track", "gpu"], terminal_width=300)
    assert refused.exit_code == 2 and "there is no GPU on this machine" in refused.output
    result = CliRunner().invoke(cli.app, ["calibrate", "--track", "test", "--seeds", "2"], terminal_width=300)
    assert result.exit_code == 0, result.output
    path = calibration_path(test_track.directory.parent, "test", this_machine())
    try:
        calibration = read_calibration(path)
        assert calibration.seeds == [42, 43] and len(calibration.val_bpb) == 2 and calibration.profile == "cpu"
        assert calibration.data == test_track.spec["fingerprint"] and calibration.hardware == this_machine()
        assert calibration.val_bpb[0] != calibration.val_bpb[1] and calibration.tokens_per_second > 0
        assert f"seed 42: val_bpb {calibration.val_bpb[0]:.6f}" in result.output and str(path) in result.output
    finally:
        path.unlink(missing_ok=True)
