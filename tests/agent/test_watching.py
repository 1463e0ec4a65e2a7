"""Watching a loop: live progress lines, `status` from another process's files, and MLflow tracking.

One real loop on the test track (baseline, noise floor, one experiment) runs with the progress observer
printing plain lines and with its ledger mirrored to a real `mlflow server` on 127.0.0.1 (sqlite store,
local artifacts), which is down when the loop starts and comes up while it runs: the loop must not stop
for it, and the mirror must catch up. The runs are read back with MlflowClient.
"""

import io
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from rich.console import Console

from agent.judging.confirm import confirm
from agent.judging.noise import USUAL_SIGMA, inflated_floor
from agent.loop import LoopSettings, run_loop
from agent.observe import ObservedProposer, ObservedRunner, ProgressObserver
from agent.proposers.base import Proposal
from agent.proposers.edits import Edit
from agent.recording.ledger import read_records
from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.recording.status_view import status_view
from agent.running.run_progress import PROGRESS_FILE, Phase, last_step_line, parse_step_line, read_phase, write_phase
from agent.running.runner import LocalRunner
from agent.workspace import Workspace
from tests.agent.conftest import PROGRAM
from trainer.atomic import read_json

mlflow = pytest.importorskip("mlflow")


class OneChange:
    """Proposes one change of the learning-rate schedule, then nothing more is asked of it."""

    name = "scripted"

    def propose(self, context, transcript):
        transcript.event("tool_call", id="1", name="read_file", arguments={"path": "train.py"})
        return Proposal("warmdown over the last 30%", [Edit("WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.3")])

    def observe(self, experiment_id, proposal_meta, record):
        pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_mlflow_server(directory, port) -> subprocess.Popen:
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    return subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{directory}/mlflow.db",
         "--artifacts-destination", str(directory / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], cwd=directory, env=env, stdout=open(directory / "server.log", "wb"),
        stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(uri: str, server: subprocess.Popen, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, "the mlflow server exited"
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"the mlflow server at {uri} did not become healthy in {seconds} s")


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
    assert (hostile.percent, hostile.loss, hostile.step_ms) == (100.0, None, None)  # clamped; no number, no field
    assert parse_step_line("step 1 (99999999%)") is None
    assert parse_step_line("loss 4.5 | step 3 (5%)") is None

    log = tmp_path / "logs" / "0003.log"
    log.parent.mkdir()
    log.write_text("x" * 100_000 + "\n" + line + "\n" + "\x1b[31m" * 10 + "\n")
    assert last_step_line(log) == step  # found at the end of a long log, past the noise after it

    printed = io.StringIO()
    console = Console(file=printed, force_terminal=True, width=200)
    with ProgressObserver(tmp_path, console, interval=0.05) as observer:
        observer.running("0003.rerun1", 47, log)
        assert read_phase(tmp_path) == Phase(experiment_id="0003", phase="re-running", detail="with seed 47",
                                             log="logs/0003.log", since=read_phase(tmp_path).since)
        time.sleep(0.3)
    shown = printed.getvalue()
    assert "0003 re-running with seed 47: step 37 (68% of the budget), loss 4.5405, 4,172 tok/s" in shown
    assert "ETA 12 s" in shown and "\x1b[31m" not in shown


def test_status_shows_the_phase_written_by_a_loop_elsewhere(workspace):
    (workspace.dir / "logs").mkdir()
    (workspace.dir / "logs" / "0004.log").write_text(
        "step 00010 ( 40.0%) | loss 5.0000 | lr x1.00 | 900 ms | 3,000 tok/s | mfu n/a | epoch 1 | left 30 s\n")
    write_phase(workspace.dir, Phase(experiment_id="0004", phase="training", detail="seed 50",
                                     log="logs/0004.log", since=time.time() - 20))
    printed = io.StringIO()
    Console(file=printed, width=300).print(status_view(workspace))
    assert "now: 0004 training seed 50: step 10 (40% of the budget), loss 5.0000, 3,000 tok/s" in printed.getvalue()


def test_a_noise_floor_far_above_the_track_usual_is_flagged():
    usual = USUAL_SIGMA["cpu"]
    warning = inflated_floor(17 * usual, "cpu")
    assert f"is 17x this track's usual {usual:g}: is the machine busy?" in warning
    assert inflated_floor(1.5 * usual, "cpu") is None and inflated_floor(None, "cpu") is None

    from agent.report.page import noise_and_holdout
    floor = ExperimentRecord(id="0000-noise", status="noise", of="0000", values=[2.1, 2.5, 2.3], sigma=17 * usual)
    assert "is the machine busy?" in noise_and_holdout([floor], None, "cpu")
    assert "is the machine busy?" not in noise_and_holdout([floor.model_copy(update={"sigma": usual})], None, "cpu")
