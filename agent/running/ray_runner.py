"""RayRunner: runs on a Ray cluster, one task with one GPU per run, through the one run path on the node
that takes it (trainer/remote/ray_task.py).

The commit's files travel with the task; nothing else of the agent does: no runtime_env, no environment
variables, so API keys stay in this process. The run's RunResult, log (capped) and sealed weights come
back; here the log becomes logs/<id>.log and the weights checkpoints/<id>.pt, as for every runner. A node
that dies mid-run, or a task Ray cannot finish, is an infra failure (tasks are never retried by Ray: the
loop's infra rule runs it once more, on whichever node Ray places it, the dead one being gone). run() is
called from several threads at once; Ray queues what the cluster's GPUs cannot take yet.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import socket
import threading
import time
from contextlib import suppress
from pathlib import Path

from agent.running.evaluator import EvaluationFailed, evaluation_of
from agent.running.runner import RunResult
from agent.untrusted import bounded
from agent.workspace import Workspace
from trainer.evaluator.evaluation import Evaluation
from trainer.remote.ray_task import LOG_LIMIT, NodeEvaluation, NodeRun, evaluate_on_node, run_on_node
from trainer.runs.jobs import EvaluationJob, Job
from trainer.runs.training_run import TRACKED

REPORT_GRACE = 120.0     # seconds past twice the timeout before a task that has not reported is given up
NO_GPU_PATIENCE = 120.0  # seconds a task may wait on a cluster with no GPU left before it is given up


class RayUnavailable(Exception):
    """Ray is not installed or its cluster cannot be reached; the message says what to do."""


class RayFailure(Exception):
    """Ray could not finish a task (a node died, the task was cancelled, ...)."""


def answering(address: str, timeout: float = 10.0) -> None:
    """Raises OSError unless something accepts a connection at a HOST:PORT address (other forms are Ray's)."""
    host, _, port = address.rpartition(":")
    if host and port.isdigit() and "://" not in address:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()


class RayRunner:
    name = "ray"
    isolation = ("runs are isolated on each Ray node as that node's sandbox allows (bubblewrap where installed "
                 "there); each run's result records whether it was")

    def __init__(self, address: str, poll: float = 1.0):
        try:
            import ray
        except ImportError as err:
            raise RayUnavailable("--runner ray needs the ray package: pip install 'autoresearch[ray]' (the same "
                                 "version as on the cluster's nodes)") from err
        self.ray, self.address, self.poll = ray, address, poll
        if not self.ray.is_initialized():
            try:
                answering(address)  # ray.init would wait minutes on an address where nothing listens
                self.ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            except Exception as err:  # OSError, ConnectionError, ValueError, RuntimeError: "not there" in all forms
                raise RayUnavailable(f"cannot connect to the Ray cluster at {address!r}: {type(err).__name__}: "
                                     f"{bounded(str(err), 500)}. Start it with `ray start --head` on a GPU machine "
                                     "and pass its HOST:6379") from err
        remote = self.ray.remote(num_gpus=1, max_retries=0)
        self._run_task, self._evaluate_task = remote(run_on_node), remote(evaluate_on_node)
        self._lock = threading.Lock()  # guards the in-flight set
        self._in_flight: set = set()
        self._stopping = threading.Event()

    @property
    def slots(self) -> int:
        """The cluster's GPUs now (at least 1): runs it can hold at once."""
        return max(1, int(self.ray.cluster_resources().get("GPU", 0)))

    def run(self, workspace: Workspace, job: Job) -> RunResult:
        start, paths = time.perf_counter(), workspace.paths(job.run)
        log_path = paths.log
        if self._stopping.is_set():
            return RunResult.infra("not submitted: the loop is stopping and its Ray runs were cancelled", log_path,
                                   said_by="ray")
        files, frozen = self._files(workspace, job.commit)
        task = self._run_task.remote(files, seed=job.seed, timeout=job.timeout, frozen_sha256=frozen,
                                     run_id=self._run_id(workspace, job.run.name))
        try:
            message, log, weights = self._wait(task, job.timeout)
        except RayFailure as err:
            return dataclasses.replace(RunResult.infra(str(err), log_path, time.perf_counter() - start,
                                                       said_by="ray"), where=f"ray cluster {self.address}")
        node_run = NodeRun.model_validate_json(message)
        self._write_log(log_path, log, node_run.log_cut)
        checkpoint = None
        if weights is not None:
            checkpoint = paths.checkpoint
            checkpoint.parent.mkdir(exist_ok=True)
            checkpoint.write_bytes(weights)
        return dataclasses.replace(node_run.result, log_path=log_path, checkpoint=checkpoint,
                                   where=node_run.place.where)

    def evaluate(self, workspace: Workspace, job: EvaluationJob) -> Evaluation:
        """trainer/evaluator/evaluate.py on a node with a GPU, the weights sent with the task."""
        files, _ = self._files(workspace, job.commit)
        task = self._evaluate_task.remote(files, job.checkpoint.read_bytes(), job,
                                          run_id=self._run_id(workspace, job.run.name))
        try:
            message, log = self._wait(task, job.timeout)
        except RayFailure as err:
            raise EvaluationFailed(f"the evaluation of {job.checkpoint.name} on the Ray cluster did not finish: "
                                   f"{err}") from err
        log_path = workspace.paths(job.run).log
        self._write_log(log_path, log, 0)
        return evaluation_of(NodeEvaluation.model_validate_json(message), log_path, job.checkpoint)

    def cancel_all(self) -> None:
        """Cancels every task in flight (their runs are killed on their nodes); no run is submitted after."""
        self._stopping.set()
        with self._lock:
            tasks = list(self._in_flight)
        for task in tasks:
            with suppress(Exception):  # finished or lost meanwhile: nothing left to stop
                self.ray.cancel(task, force=True)

    @staticmethod
    def _files(workspace: Workspace, commit: str) -> tuple[dict[str, bytes], dict[str, str]]:
        return {name: workspace.file_at(name, commit).encode() for name in TRACKED}, workspace.frozen_hashes()

    @staticmethod
    def _run_id(workspace: Workspace, name: str) -> str:
        return f"{workspace.tag}-{name}-{secrets.token_hex(4)}"

    @staticmethod
    def _write_log(log_path: Path, log: bytes, cut: int) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_bytes(log[:LOG_LIMIT] + (f"\n[ray] {cut} more bytes of this log were left on the node\n"
                                                .encode() if cut else b""))

    def _wait(self, task, timeout: float):
        """The task's value, or RayFailure saying why it will not come."""
        ray = self.ray
        with self._lock:
            self._in_flight.add(task)
        deadline, no_gpu_since = time.monotonic() + 2 * timeout + REPORT_GRACE, None
        try:
            while True:
                ready, _ = ray.wait([task], timeout=self.poll)
                if ready:
                    try:
                        return ray.get(task)
                    except ray.exceptions.RayError as err:
                        raise RayFailure(f"{type(err).__name__}: {bounded(str(err), 2000)}") from err
                now = time.monotonic()
                no_gpu_since = (no_gpu_since or now) if not ray.cluster_resources().get("GPU") else None
                if now > deadline or (no_gpu_since is not None and now - no_gpu_since > NO_GPU_PATIENCE):
                    ray.cancel(task, force=True)
                    raise RayFailure(f"the task did not report within {2 * timeout + REPORT_GRACE:.0f} s"
                                     if now > deadline else "no node with a GPU is left in the Ray cluster")
        finally:
            with self._lock:
                self._in_flight.discard(task)
