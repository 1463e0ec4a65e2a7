"""Two experiments training at once on this machine (the local runner, --parallel 2, real CPU training on
the test track); kill -9 of the agent with both in flight, then a resume that records each once."""

import json
import signal
import threading
import time

from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.running.runner import LocalRunner
from tests.agent.test_loop import start_cli_run
from tests.helpers.processes import processes_under
from tests.helpers.scripted import ScriptedEdits


class Timed:
    """The local runner, with when each of its runs started and ended (time.monotonic())."""

    def __init__(self, runner):
        self.runner, self.name, self.isolation, self.slots = runner, runner.name, runner.isolation, runner.slots
        self.spans: dict[str, tuple[float, float]] = {}
        self._guard = threading.Lock()

    def run(self, workspace, job):
        started = time.monotonic()
        result = self.runner.run(workspace, job)
        with self._guard:
            self.spans[job.run.name] = (started, time.monotonic())
        return result

    def evaluate(self, *args, **kwargs):
        return self.runner.evaluate(*args, **kwargs)

    def cancel_all(self):
        self.runner.cancel_all()


def training_now(workspace) -> list[str]:
    """The experiments in flight whose run has printed a step line."""
    ids = [json.loads(p.read_text())["id"] for p in (workspace.dir / "inflight").glob("*.json")]
    logs = {i: workspace.dir / "logs" / f"{i}.log" for i in ids}
    return [i for i, log in logs.items() if log.exists() and "step 0000" in log.read_text(errors="replace")]


def test_two_train_at_once_and_a_kill_9_with_both_in_flight_is_settled_once(workspace, test_track):
    loop = start_cli_run(workspace, test_track, "--parallel", "2", "--max-experiments", "5", "--noise-seeds", "0")
    deadline = time.monotonic() + 600
    while len(training_now(workspace)) < 2:
        assert loop.poll() is None, loop.stdout.read()
        assert time.monotonic() < deadline, "two experiments never trained at the same time"
        time.sleep(0.2)
    both = sorted(training_now(workspace))
    assert both == ["0001", "0002"] and processes_under(workspace.runs_dir)
    loop.send_signal(signal.SIGKILL)
    loop.wait(timeout=10)

    messages = []
    runner = Timed(LocalRunner(slots=2))
    proposer = ScriptedEdits(("FINAL_LR_FRAC 0.0 -> 0.05", "FINAL_LR_FRAC = 0.0", "FINAL_LR_FRAC = 0.05"),
                             ("WARMDOWN_RATIO 0.5 -> 0.4", "WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.4"))
    run_loop(workspace, proposer, runner, LoopSettings(max_experiments=2, noise_seeds=0), say=messages.append)
    assert processes_under(workspace.runs_dir) == []
    records = Ledger(workspace.dir).records
    assert [(r.id, r.status) for r in records[:3]] == [("0000", "keep"), ("0001", "interrupted"),
                                                       ("0002", "interrupted")]
    assert sorted(r.id for r in records[3:]) == ["0003", "0004"] and len(records) == 5
    assert sum("was interrupted" in m for m in messages) == 2
    (a_start, a_end), (b_start, b_end) = runner.spans["0003"], runner.spans["0004"]
    assert a_start < b_end and b_start < a_end  # the two runs of the resumed loop overlapped in time
    assert {run.where for r in records[3:] for run in r.runs} <= {"local slot 1", "local slot 2"}
    best = Ledger(workspace.dir).best()
    assert workspace.head() == best.commit and workspace.is_clean()
    assert not list((workspace.dir / "inflight").glob("*.json"))
    rows = (workspace.dir / "results.tsv").read_text().splitlines()[1:]
    assert [row.split("\t")[3] for row in rows[:3]] == ["keep", "crash", "crash"] and len(rows) == 5
