"""RayRunner on a real Ray cluster of this machine, on the loopback address only: a head without GPUs and two
nodes with one logical GPU each, started once for the module without API keys in their environment, while
the agent's process (the driver) holds some. Real training on the test track."""

import contextlib
import hashlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read by ray at import: every address it picks is 127.0.0.1

import pytest  # noqa: E402
import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from agent.loop import run_loop  # noqa: E402
from agent.recording.ledger import Ledger  # noqa: E402
from agent.recording.transcript import Transcript  # noqa: E402
from agent.running.ray_runner import RayRunner  # noqa: E402
from agent.settings import LoopSettings  # noqa: E402
from agent.steps.sharing import Shared  # noqa: E402
from agent.steps.training import Training  # noqa: E402
from tests.helpers import jobs  # noqa: E402
from tests.helpers.processes import processes_under  # noqa: E402
from tests.helpers.scripted import ScriptedEdits  # noqa: E402
from trainer.remote import ray_task  # noqa: E402
from trainer.remote.ray_task import OWNER, process_gone, sweep_abandoned  # noqa: E402
from trainer.runs.run_id import RunId  # noqa: E402
from trainer.runs.triage import Triage  # noqa: E402
from trainer.sandbox.untrusted import runs_root  # noqa: E402

KEYS = {"ANTHROPIC_API_KEY": "sk-ant-driver-only-0001", "OPENAI_API_KEY": "sk-driver-only-0002"}
NODE = dict(num_cpus=1, num_gpus=1, object_store_memory=200 << 20, node_ip_address="127.0.0.1")


class RayCluster:
    def __init__(self):
        self.cluster = Cluster(initialize_head=True, head_node_args=dict(
            num_cpus=1, num_gpus=0, object_store_memory=200 << 20, include_dashboard=False,
            node_ip_address="127.0.0.1"))
        self.nodes = [self.cluster.add_node(**NODE) for _ in range(2)]
        self.cluster.wait_for_nodes()


@pytest.fixture(scope="module")
def cluster(test_track):
    saved = {name: os.environ.pop(name) for name in KEYS if name in os.environ}
    started = time.monotonic()
    made = RayCluster()  # its processes are started from an environment without the keys
    os.environ.update(KEYS)
    made.runner = RayRunner(made.cluster.address)
    made.start_seconds = time.monotonic() - started
    yield made
    ray.shutdown()
    made.cluster.shutdown()
    for name in KEYS:
        os.environ.pop(name, None)
    os.environ.update(saved)


def timed_variant(workspace, pause: float = 0.0) -> str:
    """A commit of the workspace's train.py that prints its environment's names and when it starts and ends."""
    source = workspace.file_at("train.py")
    head = ("import os as _os, time as _time\n"
            "print('ENVIRONMENT ' + ' '.join(sorted(_os.environ)), flush=True)\n"
            "print(f'STARTED_AT {_time.time()}', flush=True)\n"
            f"_time.sleep({pause})\n")
    tail = "\nprint(f'ENDED_AT {_time.time()}', flush=True)\n"
    return workspace.commit_train(head + source + tail, "prints its environment and its time span")


def stamp(log: str, name: str) -> float:
    return float(re.search(rf"^{name} (\S+)$", log, re.MULTILINE).group(1))


def in_threads(call, arguments: list[tuple]) -> list:
    results = [None] * len(arguments)

    def one(index):
        results[index] = call(*arguments[index])
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(arguments))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return results


def test_two_runs_at_once_on_two_nodes_bring_back_log_and_weights_but_never_a_key(cluster, workspace):
    assert cluster.runner.slots == 2
    commit = timed_variant(workspace)
    first, second = in_threads(cluster.runner.run, [(workspace, jobs.job(commit, "0001", 300.0, 1)),
                                                    (workspace, jobs.job(commit, "0002", 300.0, 2))])
    for result, name in ((first, "0001"), (second, "0002")):
        assert result.verdict.triage == Triage.OK, result.tail
        assert result.log_path == workspace.dir / "logs" / f"{name}.log"
        assert result.checkpoint == workspace.dir / "checkpoints" / f"{name}.pt"
        assert hashlib.sha256(result.checkpoint.read_bytes()).hexdigest() == result.checkpoint_sha256
        assert result.isolated is not None and result.where.startswith("ray node 127.0.0.1 (")
    assert {first.where, second.where} == {f"ray node 127.0.0.1 ({node.node_id[:8]})" for node in cluster.nodes}
    logs = [result.log_path.read_text() for result in (first, second)]
    assert max(stamp(log, "STARTED_AT") for log in logs) < min(stamp(log, "ENDED_AT") for log in logs)

    # The driver holds the keys; neither a task's worker nor train.py sees them, by name or by value.
    assert all(os.environ[name] == value for name, value in KEYS.items())
    seen = ray.get(ray.remote(num_gpus=1)(lambda: dict(os.environ)).remote())
    assert not set(KEYS) & set(seen) and not set(KEYS.values()) & set(seen.values())
    for log in logs:
        names = re.search(r"^ENVIRONMENT (.*)$", log, re.MULTILINE).group(1).split()
        assert "AUTORESEARCH_SEED" in names and not set(KEYS) & set(names)
        assert not any(value in log for value in KEYS.values())
    # Nothing of the runs is left in the nodes' runs root.
    assert not list((runs_root() / "ray-results").iterdir()) and not list((runs_root() / "ray").iterdir())

    # The trusted evaluator scores the weights on a node: the run's own val score, recomputed.
    evaluation = cluster.runner.evaluate(workspace, jobs.evaluation_job(commit, first.checkpoint, "0001-eval"))
    assert evaluation.val == pytest.approx(float(first.summary["val_bpb"]), abs=1e-3)
    assert (workspace.dir / "logs" / "0001-eval.log").is_file()


def started_runs(before: set) -> list:
    """The results directories of runs started since before (their train.py printed STARTED_AT)."""
    logs = set((runs_root() / "ray-results").glob("*/run.log")) - before
    return [log.parent for log in logs if log.exists() and "STARTED_AT" in log.read_text()]


def test_cancel_all_kills_the_runs_in_flight_and_takes_no_more(cluster, workspace):
    runner = RayRunner(cluster.cluster.address)  # the cluster's connection, a runner of its own
    commit = timed_variant(workspace, pause=300.0)
    before = set((runs_root() / "ray-results").glob("*/run.log"))
    results = []
    thread = threading.Thread(target=lambda: results.append(runner.run(workspace, jobs.job(commit, "0005", 600.0))))
    thread.start()
    deadline = time.monotonic() + 60
    while not (started := started_runs(before)):
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.2)
    run_dir = ray_task.run_dir_of(started[0])
    assert processes_under(run_dir)
    runner.cancel_all()
    thread.join(60)
    assert results and results[0].verdict.triage == Triage.INFRA and "TaskCancelled" in results[0].verdict.reason
    deadline = time.monotonic() + 20
    while processes_under(run_dir):
        assert time.monotonic() < deadline, "the cancelled run's processes outlived it"
        time.sleep(0.2)
    late = runner.run(workspace, jobs.job(commit, "0006", 600.0))
    assert late.verdict.triage == Triage.INFRA and "not submitted" in late.verdict.reason
    while ray.available_resources().get("GPU", 0) < 2:  # the cancelled task's GPU is given back
        assert time.monotonic() < deadline + 40, ray.available_resources()
        time.sleep(0.2)


class Watched:
    """A runner with when each of its runs started and ended (time.monotonic()) and where it ran; a run's result
    goes back to the loop only once may_return(its name) holds (or after two minutes)."""

    def __init__(self, runner, may_return: Callable[[str], bool] = lambda _: True):
        self.runner, self.name, self.isolation, self.slots = runner, runner.name, runner.isolation, runner.slots
        self.may_return = may_return
        self.spans: dict[str, tuple[float, float]] = {}
        self.where: dict[str, str] = {}

    def run(self, workspace, job):
        started = time.monotonic()
        result = self.runner.run(workspace, job)
        name = job.run.name
        self.spans[name], self.where[name] = (started, time.monotonic()), result.where
        deadline = time.monotonic() + 120
        while not self.may_return(name) and time.monotonic() < deadline:
            time.sleep(0.2)
        return result

    def evaluate(self, *args, **kwargs):
        return self.runner.evaluate(*args, **kwargs)

    def cancel_all(self):
        self.runner.cancel_all()


def test_two_in_flight_on_the_two_nodes_and_a_keep_meanwhile_rebases_the_other(cluster, workspace):
    # Both changes beat the test track's baseline on their own (measured: MATRIX_LR -0.008, WARMDOWN_RATIO -0.012).
    # 0002's result reaches the loop only once 0001 is recorded, so 0001 is kept while 0002 is in flight.
    decided = lambda: {record.id for record in Ledger(workspace.dir).records}  # noqa: E731
    runner = Watched(cluster.runner, may_return=lambda name: name != "0002" or "0001" in decided())
    assert runner.slots == 2
    proposer = ScriptedEdits(("MATRIX_LR 0.04 -> 0.06", "MATRIX_LR = 0.04", "MATRIX_LR = 0.06"),
                             ("WARMDOWN_RATIO 0.5 -> 0.7", "WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.7"))
    why = run_loop(workspace, proposer, runner, LoopSettings(max_experiments=3, noise_seeds=0), say=lambda _: None)
    assert "ran 3 experiment(s)" in why
    (a_start, a_end), (b_start, b_end) = runner.spans["0001"], runner.spans["0002"]
    assert a_start < b_end and b_start < a_end  # both trained at once
    nodes = {f"ray node 127.0.0.1 ({node.node_id[:8]})" for node in cluster.nodes}
    assert {runner.where["0001"], runner.where["0002"]} == nodes

    records = {record.id: record for record in Ledger(workspace.dir).records}
    assert sorted(records) == ["0000", "0001", "0002"] and len(Ledger(workspace.dir).records) == 3
    base, first, second = records["0000"], records["0001"], records["0002"]
    assert first.status == "keep" and first.parent == base.commit and first.val_bpb < base.val_bpb
    # 0002 beat the baseline it was trained on, but the best had moved: its edit is re-applied on 0001 and it is
    # trained and judged again, against 0001.
    assert second.rebased and second.parent == first.commit and second.proposed_against == base.commit
    assert [(earlier.parent, earlier.status) for earlier in second.rebased_from] == [(base.commit, "keep")]
    assert second.rebased_from[0].runs[0].val_bpb < base.val_bpb
    assert [run.log for run in second.runs] == ["logs/0002.rebase1.log"] and "0002.rebase1" in runner.spans
    trained = workspace.file_at("train.py", second.commit)
    assert "MATRIX_LR = 0.06" in trained and "WARMDOWN_RATIO = 0.7" in trained
    assert {run.where for record in records.values() for run in record.runs} <= nodes
    assert Ledger(workspace.dir).best().commit == workspace.head() and workspace.is_clean()
    assert not list((workspace.dir / "inflight").glob("*.json"))


def test_a_node_dying_mid_run_is_an_infra_failure_retried_once_on_the_other_node(cluster, workspace):
    commit = timed_variant(workspace, pause=4.0)
    training = Training(workspace, cluster.runner, LoopSettings(), Shared(Ledger(workspace.dir), 42))
    transcripts = [Transcript(workspace.dir / "transcripts" / f"{n}.jsonl") for n in ("0003", "0004")]
    before = set((runs_root() / "ray-results").glob("*/run.log"))
    results = []
    runs = threading.Thread(target=lambda: results.extend(in_threads(training.run, [
        (commit, RunId.train("0003"), 3, transcripts[0]), (commit, RunId.train("0004"), 4, transcripts[1])])))
    runs.start()
    deadline = time.monotonic() + 120
    while len(started_runs(before)) < 2:
        assert time.monotonic() < deadline, "the two runs never started"
        time.sleep(0.2)
    dying, surviving = cluster.nodes[1], cluster.nodes[0]
    cluster.cluster.remove_node(dying, allow_graceful=False)
    runs.join(300)

    assert [result.verdict.triage for result in results] == [Triage.OK, Triage.OK], [r.tail for r in results]
    assert {result.where for result in results} == {f"ray node 127.0.0.1 ({surviving.node_id[:8]})"}
    retried = [t for t in transcripts if '"retry"' in t.path.read_text()]
    assert len(retried) == 1  # the run of the dying node, once; the other ran through
    assert re.search(r"NodeDied|WorkerCrashed|ObjectLost|OwnerDied|LocalRayletDied", retried[0].path.read_text())
    assert cluster.runner.slots == 1
    # What the dead node's task left (its run directory, its results) goes with the next task on this machine once
    # its worker process is gone. A node that dies takes its processes with it; removing a node of a local cluster
    # kills its raylet but may leave its worker running, or dead and never reaped: finish it as a dead machine would.
    for owner in owners():
        with contextlib.suppress(ProcessLookupError):
            os.kill(owner, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not all(process_gone(owner) for owner in owners()):
        assert time.monotonic() < deadline, "the dead node's worker process did not exit"
        time.sleep(0.5)
    sweep_abandoned()
    assert not list((runs_root() / "ray-results").iterdir()) and not list((runs_root() / "ray").iterdir())


def owners() -> list[int]:
    found = []
    for marker in (runs_root() / "ray-results").glob(f"*/{OWNER}"):
        try:
            found.append(int(marker.read_text()))
        except (OSError, ValueError):
            pass
    return found
