"""The command line: one way to open a workspace or fail, and `run`'s options as one settings object."""

import json
import signal
import socket
import subprocess
import sys
import time

import pytest
import typer
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from agent import cli
from agent.recording.calibration import calibration_path, read_calibration
from agent.settings import LoopSettings, RunSettings, internal
from tests.helpers.processes import interruptible
from trainer.hardware import this_machine


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


def test_run_offers_every_setting_of_the_loop_and_of_the_run():
    shown = CliRunner().invoke(cli.app, ["run", "--help"], terminal_width=200).output
    offered = [name for name, field in RunSettings.model_fields.items()
               if (field.json_schema_extra or {}) != {"cli": False}]
    assert {"max_experiments", "noise_every_keeps", "proposer", "spool", "cache"} <= set(offered)
    for name in offered:
        option = "--" + (RunSettings.model_fields[name].alias or name).replace("_", "-")
        assert option in shown, option
    assert "--timeout-seconds" not in shown and "--max-fix-attempts" not in shown
    assert issubclass(RunSettings, LoopSettings)  # the loop takes the run's settings as they are


def test_run_refuses_a_bad_proposer_or_runner_before_touching_anything(tmp_path):
    for arguments, problem in ((["--proposer", "gpt"], "unknown proposer 'gpt': use optuna, llm, hybrid or cli"),
                               *[(arguments, "use --runner local, --runner spool --spool DIR, or --runner ray "
                                             "--ray-address HOST:PORT")
                                 for arguments in (["--runner", "spool"], ["--runner", "ray"],
                                                   ["--ray-address", "h:6379"], ["--runner", "slurm"])]):
        result = CliRunner().invoke(cli.app, ["run", "--workspaces", str(tmp_path), *arguments])
        assert result.exit_code == 2 and problem in result.output
    assert list(tmp_path.iterdir()) == []


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
        run = CliRunner().invoke(cli.app, ["run", "--workspaces", str(tmp_path), "--runner", "ray",
                                           "--ray-address", address], terminal_width=300)
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


def test_doctor_says_what_this_machine_is_and_what_each_track_would_get(test_track):
    result = CliRunner().invoke(cli.app, ["doctor"], terminal_width=300)
    assert result.exit_code == 0, result.output
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
