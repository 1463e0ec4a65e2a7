"""`run` trains on the registered runner its options imply: --spool, --ray-address, else the local one."""

import signal

from typer.testing import CliRunner

from agent import cli
from agent.judging.keep_rule import stored_keep_rule
from agent.recording.ledger import read_records
from agent.running.registry import RUNNERS, RunnerChoice, RunnerOptions, implied_runner
from agent.running.runner import LocalRunner


class RecordingRunner(LocalRunner):
    """The local runner, noting the experiment of every run it is given."""
    name = "recording"

    def __init__(self, slots: int | None = None):
        super().__init__(slots=slots)
        self.ran: list[str] = []

    def run(self, workspace, job):
        self.ran.append(job.run.experiment)
        return super().run(workspace, job)


def test_the_registered_runner_runs_the_night(workspace, monkeypatch):
    made: list[RecordingRunner] = []

    def make(options: RunnerOptions) -> RecordingRunner:
        made.append(RecordingRunner(slots=options.parallel))
        return made[-1]

    monkeypatch.setitem(RUNNERS, "local", RunnerChoice(make, "notes what it runs"))
    sigterm = signal.getsignal(signal.SIGTERM)  # `run` makes SIGTERM stop the loop as Ctrl-C does
    try:
        result = CliRunner(env={"COLUMNS": "200"}).invoke(cli.app, [
            "run", "--tag", workspace.tag, "--workspaces", str(workspace.dir.parent),
            "--max-experiments", "2", "--noise-seeds", "0", "--keep-sigmas", "3"])
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert result.exit_code == 0, result.output
    assert len(made) == 1 and made[0].ran[0] == "0000" and "0001" in made[0].ran
    assert [record.id for record in read_records(workspace.dir)] == ["0000", "0001"]
    assert stored_keep_rule(workspace).keep_sigmas == 3  # the night's rule, for the report


def test_the_runner_is_implied_by_the_option_it_needs(tmp_path):
    assert implied_runner(RunnerOptions()) == "local"
    assert implied_runner(RunnerOptions(parallel=2)) == "local"
    assert implied_runner(RunnerOptions(spool=tmp_path)) == "spool"
    assert implied_runner(RunnerOptions(ray_address="h:6379")) == "ray"
    shown = CliRunner(env={"COLUMNS": "400"}).invoke(cli.app, ["run", "--help"]).output
    assert "--spool" in shown and "--ray-address" in shown and "--runner" not in shown
