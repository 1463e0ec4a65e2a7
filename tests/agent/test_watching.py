"""Watching a loop: live progress lines, `status` from another process's files, and MLflow tracking.

One real loop on the test track (baseline, noise floor, one experiment) runs with the progress observer
printing plain lines and with its ledger mirrored to a real `mlflow server` on 127.0.0.1 (sqlite store,
local artifacts), which is down when the loop starts and comes up while it runs: the loop must not stop
for it, and the mirror must catch up. The runs are read back with MlflowClient. Two runs in flight at
once (two threads through one observed runner) each get their line, and `status` and the report of a
workspace caught mid-night show every experiment in flight and what ran each run.
"""

import dataclasses
import io
import os
import re
import signal
import threading
import time

import pytest
from rich.console import Console

from agent.judging.confirm import confirm
from agent.judging.noise import USUAL_SIGMA, inflated_floor
from agent.loop import LoopSettings, run_loop
from agent.observe import ObservedProposer, ObservedRunner, ProgressObserver, run_phase
from agent.proposers.base import Proposal, Proposer
from agent.proposers.edits import Edit
from agent.recording.ledger import Ledger, read_records
from agent.recording.record import ExperimentRecord, ExperimentStatus, now
from agent.report.build import write_report
from agent.report.status_view import status_view
from agent.running.run_progress import (
    PROGRESS_FILE,
    Phase,
    last_step_line,
    parse_step_line,
    read_phases,
    write_phases,
)
from agent.running.runner import LocalRunner
from agent.workspace import Workspace
from tests.agent.conftest import PROGRAM
from tests.helpers.jobs import job
from tests.helpers.mlflow_server import free_port, start_mlflow_server, wait_healthy
from tests.helpers.synthetic_runner import SyntheticRunner
from trainer.files.atomic import read_json, write_json_atomic
from trainer.runs.run_id import RunId, RunKind
from trainer.tracks.hardware import this_machine

mlflow = pytest.importorskip("mlflow")


class OneChange(Proposer):
    """Proposes one change of the learning-rate schedule, then nothing more is asked of it."""

    name = "scripted"

    def propose(self, context, transcript):
        transcript.event("tool_call", id="1", name="read_file", arguments={"path": "train.py"})
        return Proposal("warmdown over the last 30%", [Edit("WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.3")])


@pytest.fixture(scope="module")
def watched(test_track, tmp_path_factory):
    """The loop's workspace, what its observer printed, what the MLflow mirror said, and the server's URI."""
    from agent.tracking.mlflow_sync import MlflowSync

    root = tmp_path_factory.mktemp("watched")
    workspace = Workspace.create("watched", test_track.spec, PROGRAM, root=root / "workspaces")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    said: list[str] = []
    tracking = MlflowSync(uri, workspace, say=said.append)
    assert tracking.sync() is False  # nothing listens yet: a warning, and the records stay pending
    server_dir = root / "mlflow"
    server_dir.mkdir()
    server = start_mlflow_server(server_dir, port)  # comes up while the loop trains
    printed = io.StringIO()
    console = Console(file=printed, force_terminal=False, width=200)
    try:
        tracking.start(every_seconds=1.0)
        with ProgressObserver(workspace.dir, console, interval=0.2) as observer:
            runner = ObservedRunner(LocalRunner(), observer)
            run_loop(workspace, ObservedProposer(OneChange(), observer, "scripted"), runner,
                     LoopSettings(max_experiments=2, noise_seeds=2, overlap=False, grace_seconds=600), say=said.append)
            confirm(workspace, runner)
        wait_healthy(uri, server)
        caught_up = tracking.stop()
        yield workspace, printed.getvalue(), said, uri, caught_up
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_plain_progress_names_each_phase_with_its_seed(watched):
    workspace, printed, _, _, _ = watched
    records = read_records(workspace.dir)
    noise = next(r for r in records if r.status == ExperimentStatus.NOISE)
    assert "0000 training seed 42" in printed
    for number, run in enumerate(noise.runs, 1):
        assert f"0000 noise floor run {number} with seed {run.seed}" in printed
    assert "0001 proposing with scripted" in printed
    assert f"0001 training seed {records[-1].runs[0].seed}" in printed
    assert "0000 confirming on the holdout with the trusted evaluator" in printed
    assert "\x1b[" not in printed  # not a terminal: lines, no redraws
    assert not (workspace.dir / PROGRESS_FILE).exists()  # removed when the loop ends


def test_the_mirror_caught_up_after_the_server_came_up(watched):
    from mlflow.tracking import MlflowClient

    workspace, _, said, uri, caught_up = watched
    assert caught_up
    assert sum("not reachable" in line for line in said) == 1  # said once for the outage, not on every retry
    assert any("reachable again" in line for line in said)
    records = read_records(workspace.dir)

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("autoresearch")
    parents = client.search_runs([experiment.experiment_id], "tags.`autoresearch.tag` = 'watched'")
    assert len(parents) == 1
    parent = parents[0].info.run_id
    children = {run.info.run_name: run for run in client.search_runs(
        [experiment.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}'")}
    assert set(children) == {r.id for r in records}  # each record once, the noise floor included

    baseline, experiment_run = children["0000"], children["0001"]
    assert baseline.data.metrics["val_bpb"] == pytest.approx(records[0].val_bpb)
    assert baseline.data.params["WARMDOWN_RATIO"] == "0.5" and experiment_run.data.params["WARMDOWN_RATIO"] == "0.3"
    assert experiment_run.data.params["description"] == "warmdown over the last 30%"
    assert experiment_run.data.tags["status"] == records[-1].status.value
    assert experiment_run.data.tags["decision"].startswith(records[-1].reason[:50])
    assert experiment_run.data.tags["hardware"] == this_machine().describe()  # the machine that trained it
    for metric in ("tokens_per_second", "training_seconds", "peak_vram_mb"):
        assert experiment_run.data.metrics[metric] > 0
    noise = next(r for r in records if r.status == ExperimentStatus.NOISE)
    assert children[noise.id].data.metrics["sigma"] == pytest.approx(noise.sigma)
    artifacts = {a.path for a in client.list_artifacts(experiment_run.info.run_id)}
    assert {"diff.patch", "0001.log", "0001.jsonl"} <= artifacts
    diff = client.download_artifacts(experiment_run.info.run_id, "diff.patch")
    assert "+WARMDOWN_RATIO = 0.3" in open(diff).read()
    confirmation = read_json(workspace.dir / "confirmation.json")
    assert client.get_run(parent).data.metrics["holdout_gain"] == pytest.approx(confirmation["holdout_gain"])


def test_a_step_line_is_parsed_bounded_and_shown_live(tmp_path):
    line = "step 00037 ( 68.4%) | loss 4.5405 | lr x0.69 | 982 ms | 4,172 tok/s | mfu 12.5% | epoch 1 | left 12 s"
    step = parse_step_line(line)
    assert (step.step, step.percent, step.loss, step.tokens_per_second, step.mfu_percent, step.left_seconds) == \
        (37, 68.4, 4.5405, 4172.0, 12.5, 12.0)
    assert parse_step_line(line + " " * 400) is None  # too long to be a step line
    hostile = parse_step_line("step 1 (999%) | loss [bold]x | 1e99999 ms")
    assert (hostile.percent, hostile.loss) == (100.0, None)  # clamped; no number, no field
    assert parse_step_line("step 1 (99999999%)") is None
    assert parse_step_line("loss 4.5 | step 3 (5%)") is None

    log = tmp_path / "logs" / "0003.log"
    log.parent.mkdir()
    log.write_text("x" * 100_000 + "\n" + line + "\n" + "\x1b[31m" * 10 + "\n")
    assert last_step_line(log) == step  # found at the end of a long log, past the noise after it

    printed = io.StringIO()
    console = Console(file=printed, force_terminal=True, width=200)
    with ProgressObserver(tmp_path, console, interval=0.05) as observer:
        observer.running(RunId.train("0003").then(RunKind.RERUN, 1), 47, log)
        [written] = read_phases(tmp_path)
        assert written == Phase(experiment_id="0003", phase="re-running", detail="with seed 47", log="logs/0003.log",
                                since=written.since)
        time.sleep(0.3)
    shown = printed.getvalue()
    assert "0003 re-running with seed 47: step 37 (68% of the budget), loss 4.5405, 4,172 tok/s" in shown
    assert "ETA 12 s" in shown and "\x1b[31m" not in shown


def test_a_run_id_says_what_the_run_is_and_renders_the_names_logs_had():
    first = RunId.train("0007")
    rebased = first.then(RunKind.REBASE, 1)
    cases = [(first, 51, "0007", "training", "seed 51"),
             (first.then(RunKind.RETRY), 51, "0007.retry", "training", "seed 51, again after a machine failure"),
             (first.then(RunKind.FIX, 1), 51, "0007.fix1", "training", "fix 1, seed 51"),
             (first.then(RunKind.RERUN, 2), 52, "0007.rerun2", "re-running", "with seed 52"),
             (rebased, 51, "0007.rebase1", "training", "on the new best (re-base 1), seed 51"),
             (rebased.then(RunKind.FIX, 2).then(RunKind.RETRY), 51, "0007.rebase1.fix2.retry", "training",
              "on the new best (re-base 1), fix 2, seed 51, again after a machine failure"),
             (RunId.noise("0003", 2), 44, "0003-noise2", "noise floor", "run 2 with seed 44"),
             (first.then(RunKind.CANARY), 51, "0007.canary", "checking the machine",
              "the best commit, after two failures outside the experiment")]
    for run, seed, name, phase, detail in cases:
        assert (run.name, run_phase(run, seed)) == (name, (phase, detail))
    evaluations = [first.then(RunKind.RERUN, 1).then(RunKind.VERIFY), RunId.confirm("0003"),
                   RunId.noise("0003", 2).then(RunKind.VERIFY), RunId.verify_best("0007", "0004")]
    assert [(run.name, run.line) for run in evaluations] == [
        ("verify-0007.rerun1", "0007"), ("confirm-0003", "0003"), ("verify-0003-noise2", "0003-noise2"),
        ("verify-0007-best-0004", "0007")]


def test_status_shows_the_phase_written_by_a_loop_elsewhere(workspace):
    (workspace.dir / "logs").mkdir()
    (workspace.dir / "logs" / "0004.log").write_text(
        "step 00010 ( 40.0%) | loss 5.0000 | lr x1.00 | 900 ms | 3,000 tok/s | mfu n/a | epoch 1 | left 30 s\n")
    # the form a loop that ran one experiment at a time wrote: one phase, not a list
    write_json_atomic(workspace.dir / PROGRESS_FILE, dict(
        experiment_id="0004", phase="training", detail="seed 50", log="logs/0004.log", since=time.time() - 20,
        next_proposal="0005 proposing with optuna"))
    printed = io.StringIO()
    Console(file=printed, width=300).print(status_view(workspace))
    assert "now: 0004 training seed 50: step 10 (40% of the budget), loss 5.0000, 3,000 tok/s" in printed.getvalue()
    (workspace.dir / PROGRESS_FILE).write_text('{"phases": [{"experiment_id": 4}]}')
    assert read_phases(workspace.dir) == []  # not a progress file: nothing shown, nothing raised


def test_a_noise_floor_far_above_the_track_usual_is_flagged():
    usual = USUAL_SIGMA["gpu"]  # a track budgeted in time, which a busy machine can move
    warning = inflated_floor(17 * usual, "gpu")
    assert f"is 17x this track's usual {usual:g} (" in warning and "is the machine busy?" in warning
    assert inflated_floor(1.5 * usual, "gpu") is None and inflated_floor(None, "gpu") is None

    from agent.report.page import noise_and_holdout
    floor = ExperimentRecord(id="0000-noise", status="noise", of="0000", values=[2.1, 2.5, 2.3], sigma=17 * usual)
    assert "is the machine busy?" in noise_and_holdout([floor], None, "gpu")
    assert "is the machine busy?" not in noise_and_holdout([floor.model_copy(update={"sigma": usual})], None, "gpu")


class TwoSlots:
    """A runner with two slots whose runs wait until both have started and the test lets them go; each then
    runs as the synthetic runner does and says which slot ran it."""

    name, isolation, slots = "two slots", "synthetic runs: nothing is executed", 2

    def __init__(self):
        self.inner = SyntheticRunner({})
        self.both_started = threading.Barrier(3)  # the two runs and the test
        self.go = threading.Event()
        self.cancelled = 0
        self._slots = iter((1, 2))
        self._lock = threading.Lock()

    def run(self, workspace, job):
        with self._lock:
            slot = next(self._slots)
        self.both_started.wait(timeout=10)
        assert self.go.wait(timeout=10)
        with self._lock:  # one GitPython repository is not read from two threads at once
            result = self.inner.run(workspace, job)
        return dataclasses.replace(result, where=f"local slot {slot}, GPU {slot - 1}")

    def cancel_all(self):
        self.cancelled += 1


def two_runs_in_flight(workspace, console) -> tuple[str, str, list[Phase], list[Phase], list[Phase]]:
    """Trains 0001 and 0002 at once through one observed runner (two threads); returns what was printed while
    both ran and in all, and progress.json's phases while both ran, after both ran, and once 0001 was recorded."""
    runner = TwoSlots()
    ledger = Ledger(workspace.dir)
    commit = workspace.head()
    for experiment_id in ("0001", "0002"):
        ledger.save_draft(ExperimentRecord(id=experiment_id, status="pending", commit=commit, parent=commit,
                                           started=now()))
    with ProgressObserver(workspace.dir, console, interval=0.05) as observer:
        observed = ObservedRunner(runner, observer)
        assert observed.slots == 2 and ObservedRunner(SyntheticRunner({}), observer).slots == 1
        threads = [threading.Thread(target=observed.run, args=(workspace, job(commit, experiment_id, 60.0, seed)))
                   for experiment_id, seed in (("0001", 11), ("0002", 12))]
        for thread in threads:
            thread.start()
        runner.both_started.wait(timeout=10)
        time.sleep(0.3)  # a few refreshes with both in flight
        while_both = console.file.getvalue()
        training = read_phases(workspace.dir)
        runner.go.set()
        for thread in threads:
            thread.join(timeout=10)
        ran = read_phases(workspace.dir)
        ledger.finish("0001")  # 0001 is recorded: its decision was said, its line goes
        deadline = time.monotonic() + 5
        while len(read_phases(workspace.dir)) != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        after_one = read_phases(workspace.dir)
        observed.cancel_all()
        assert runner.cancelled == 1
    return while_both, console.file.getvalue(), training, ran, after_one


@pytest.mark.parametrize("terminal", [False, True], ids=["log", "terminal"])
def test_two_runs_in_flight_each_have_their_line(workspace, terminal):
    console = Console(file=io.StringIO(), force_terminal=terminal, width=200)
    while_both, printed, training, ran, after_one = two_runs_in_flight(workspace, console)
    assert [(p.experiment_id, p.phase, p.detail) for p in training] == [
        ("0001", "training", "seed 11"), ("0002", "training", "seed 12")]
    places = {p.experiment_id: p.where for p in ran}
    assert [p.phase for p in ran] == ["deciding", "deciding"]
    assert sorted(places.values()) == ["local slot 1, GPU 0", "local slot 2, GPU 1"]
    assert [p.experiment_id for p in after_one] == ["0002"]
    for seed, experiment_id in ((11, "0001"), (12, "0002")):
        assert f"{experiment_id} training seed {seed}: starting" in while_both
        assert f"{experiment_id} deciding (0 s), ran on {places[experiment_id]}" in printed
    if terminal:  # one redrawn block holding both lines, the first above the second
        assert "\x1b[" in printed
        assert re.search(r"0001 training seed 11: starting \(\d+ s\)\n0002 training seed 12", while_both)
        assert printed.rstrip().endswith("\x1b[2K")  # the live lines are gone when the observer ends
    else:
        assert "\x1b[" not in printed
        lines = printed.splitlines()
        for said in ("0001 training seed 11", "0002 training seed 12"):
            about = [line for line in lines if line.startswith(said)]
            # said once, not redrawn: its start once, then a line only for a new step its log shows, if any
            assert sum(line.startswith(f"{said}: starting") for line in about) == 1
            assert len(about) == len(set(about)) and all(": step " in line for line in about[1:]), about
    assert not (workspace.dir / PROGRESS_FILE).exists()


@pytest.fixture
def midnight(workspace):
    """A workspace caught mid-night: a baseline and one experiment recorded (each run saying what ran it, the
    experiment's first run on a parent the best moved on from), two experiments in flight, one of them training,
    and a proposal being made for the next."""
    commit = workspace.head()
    records = [
        ExperimentRecord(id="0000", status="keep", commit=commit, val_bpb=2.5, description="baseline",
                         proposer="baseline", started=now(), finished=now(),
                         runs=[dict(seed=42, val_bpb=2.5, where="local slot 1, GPU 0")]),
        ExperimentRecord(id="0001", status="discard", commit=commit, val_bpb=2.6, description="wider MLP",
                         proposer="optuna", started=now(), finished=now(),
                         runs=[dict(seed=7, val_bpb=2.55, where="ray node 10.0.0.2 (a1b2c3d4)"),
                               dict(seed=9, val_bpb=2.65, where="ray node 10.0.0.3 (e5f6a7b8)")],
                         rebased_from=[dict(parent="0" * 40, commit="1" * 40, status="keep",
                                            runs=[dict(seed=5, val_bpb=2.4, where="local slot 3, GPU 2")])]),
    ]
    (workspace.dir / "experiments.jsonl").write_text("".join(r.to_json() + "\n" for r in records))
    ledger = Ledger(workspace.dir)
    for experiment_id, description in (("0002", "deeper by one layer"), ("0003", "warmdown 0.3")):
        ledger.save_draft(ExperimentRecord(id=experiment_id, status="pending", commit=commit, parent=commit,
                                      description=description, started=now()))
    (workspace.dir / "logs").mkdir(exist_ok=True)
    (workspace.dir / "logs" / "0002.log").write_text(
        "step 00012 ( 40.0%) | loss 5.1000 | lr x1.00 | 900 ms | 3,000 tok/s | mfu n/a | epoch 1 | left 30 s\n")
    write_phases(workspace.dir, [
        Phase(experiment_id="0002", phase="training", detail="seed 50", log="logs/0002.log", since=time.time()),
        Phase(experiment_id="0003", phase="verifying", detail="with the trusted evaluator", since=time.time()),
        Phase(experiment_id="0004", phase="proposing", detail="with optuna", since=time.time())])
    return workspace


def test_status_shows_every_run_in_flight_and_what_ran_each(midnight):
    printed = io.StringIO()
    Console(file=printed, width=300).print(status_view(midnight))
    lines = [line.strip() for line in printed.getvalue().splitlines()]
    running = [i for i, line in enumerate(lines) if line.startswith("running:")]
    assert [lines[i].split(" (")[0] for i in running] == ["running: 0002 deeper by one layer",
                                                         "running: 0003 warmdown 0.3"]
    assert lines[running[0] + 1].startswith("now: 0002 training seed 50: step 12 (40% of the budget)")
    assert lines[running[1] + 1].startswith("now: 0003 verifying with the trusted evaluator")
    assert any(line.startswith("now: 0004 proposing with optuna") for line in lines[running[1] + 2:])
    assert lines[running[0] - 1].startswith("conversations open: 1 ")
    table = printed.getvalue()
    assert "local slot 1, GPU 0" in table
    assert "local slot 3, GPU 2; ray node 10.0.0.2 (a1b2c3d4); ray node 10.0.0.3" in table  # every run of 0001


def test_the_report_written_mid_night_shows_the_runs_in_flight_and_where_each_ran(midnight):
    html = write_report(midnight).read_text()
    assert "In flight when this report was written (2)" in html
    section = html.split("In flight when this report was written")[1].split("<h2>")[0]
    assert "0002" in section and "deeper by one layer" in section and "step 12 (40% of the budget)" in section
    assert "0003" in section and "verifying with the trusted evaluator" in section
    assert "and 1 conversation(s) open" in html and "<td>0004</td><td>-</td><td>(being proposed)</td>" in section
    assert "0004 proposing with optuna" in section
    experiments = html.split("<h2>Every experiment</h2>")[1].split("<h2>")[0]
    assert "<th>ran on</th>" in experiments
    assert "<td>local slot 1, GPU 0</td>" in experiments
    assert "<td>local slot 3, GPU 2; ray node 10.0.0.2 (a1b2c3d4); ray node 10.0.0.3 (e5f6a7b8)</td>" in experiments
