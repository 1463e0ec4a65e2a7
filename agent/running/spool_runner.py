"""SpoolRunner: the agent's side of the spool. It writes a job, waits for a trainer worker's
result, and tells a dead worker (infra) from a long run by the workers' heartbeats.

A loop keeps as many runs in flight as there are alive workers (one per GPU), each submitted from
its own thread; a job whose worker dies is retried once by the loop's infra rule, on whichever
worker claims it next. The worker runs the commit through the same run path as LocalRunner
(trainer/runs/training_run.py) and sends back its RunResult; here its log and weights move into the
workspace, and the result says which worker ran it.
"""

from __future__ import annotations

import dataclasses
import secrets
import shutil
import threading
import time
from pathlib import Path

from agent.running.evaluator import EvaluationFailed, evaluation_of
from agent.running.runner import RunResult
from agent.workspace import Workspace
from trainer.evaluator.evaluation import Evaluation
from trainer.remote import spool as spoolfs
from trainer.remote.spool import SpoolJob, SpoolMessageError, SpoolResult
from trainer.runs.jobs import EvaluationJob, Job

REPORT_GRACE = 60.0  # seconds past the job's timeout before a silent worker counts as gone


class SpoolRunner:
    name = "spool"
    isolation = "runs are isolated as each spool worker says when it starts (and records in each result)"

    def __init__(self, spool: Path, poll: float = 0.3, dead_after: float = spoolfs.DEAD_AFTER):
        self.spool, self.poll, self.dead_after = spoolfs.layout(spool), poll, dead_after
        self._lock = threading.Lock()  # guards the jobs in flight and the cancelled ones
        self._in_flight: set[str] = set()
        self._cancelled: set[str] = set()
        self._stopping = threading.Event()

    @property
    def slots(self) -> int:
        """The workers alive now (at least 1): runs the spool can hold at once."""
        return max(1, len(spoolfs.alive_workers(self.spool, dead_after=self.dead_after)))

    def run(self, workspace: Workspace, asked: Job) -> RunResult:
        start, paths = time.perf_counter(), workspace.paths(asked.run)
        if self._stopping.is_set():
            return RunResult.infra("not submitted: the loop is stopping and its spool jobs were cancelled",
                                   paths.log, said_by="spool")
        job, log_path = self._envelope(workspace, asked), paths.log
        result = self._through_spool(job, log_path)
        where = f"spool worker {result.worker}" if result.worker else ""
        if job.id in self._cancelled:
            result = result.model_copy(update={"infra": "cancelled: the loop is stopping"})
        if result.infra is not None or result.run is None:
            return dataclasses.replace(RunResult.infra(result.infra or f"job {job.id} came back without a run's "
                                                       "result", log_path, time.perf_counter() - start,
                                                       said_by="spool"), where=where)
        saved = self.spool / "checkpoints" / f"{job.id}.pt"
        return dataclasses.replace(result.run, log_path=log_path, where=where, checkpoint=keep_checkpoint(
            saved, paths.checkpoint) if result.run.checkpoint_sha256 else None)

    def cancel_all(self) -> None:
        """Cancels every job in flight: a waiting one is withdrawn, a running one killed by its worker; no job is
        submitted after."""
        self._stopping.set()
        with self._lock:
            jobs = sorted(self._in_flight)
            self._cancelled.update(jobs)
        for job_id in jobs:
            self._cancel(job_id)

    def evaluate(self, workspace: Workspace, asked: EvaluationJob) -> Evaluation:
        """trainer/evaluator/evaluate.py on a GPU worker (the checkpoint is read through the shared workspaces)."""
        job = self._envelope(workspace, asked)
        log_path = workspace.paths(asked.run).log
        result = self._through_spool(job, log_path)
        if result.infra is not None or result.evaluation is None:
            raise EvaluationFailed(f"the evaluation job for {asked.checkpoint.name} did not finish: "
                                   f"{result.infra or 'it came back without an outcome'}")
        return evaluation_of(result.evaluation, log_path, asked.checkpoint)

    def _envelope(self, workspace: Workspace, job: Job | EvaluationJob) -> SpoolJob:
        return SpoolJob(id=f"{workspace.tag}-{job.run.name}-{secrets.token_hex(3)}", workspace=workspace.dir,
                        frozen=workspace.frozen_hashes(), job=job)

    def _through_spool(self, job: SpoolJob, log_path: Path) -> SpoolResult:
        with self._lock:
            self._in_flight.add(job.id)
        spoolfs.submit(self.spool, job)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            result = self._wait(job)
        except KeyboardInterrupt:
            self._cancel(job.id)
            raise
        finally:
            with self._lock:
                self._in_flight.discard(job.id)
        if (spool_log := self.spool / "logs" / f"{job.id}.log").exists():
            shutil.copyfile(spool_log, log_path)
        else:
            log_path.write_text("")
        return result

    def _wait(self, job: SpoolJob) -> SpoolResult:
        """The worker's result, or an infra result saying why the job can no longer finish."""
        def gone(problem: str) -> SpoolResult:
            return SpoolResult(id=job.id, worker="", infra=problem)

        submitted = time.time()
        while True:
            try:
                result = spoolfs.read_message(self.spool / "results" / f"{job.id}.json", SpoolResult)
                claimed = spoolfs.read_message(self.spool / "claimed" / f"{job.id}.json", SpoolJob)
            except SpoolMessageError as err:
                return gone(str(err))
            if result is not None:
                return result
            if job.id in self._cancelled and claimed is None and not (self.spool / "jobs" / f"{job.id}.json").exists():
                return gone("cancelled before a worker claimed it: the loop is stopping")
            now = time.time()
            alive = {w.worker for w in spoolfs.alive_workers(self.spool, now, self.dead_after)}
            if claimed is not None and claimed.worker:
                if claimed.worker not in alive:
                    return gone(f"trainer worker {claimed.worker} stopped answering during the run")
                if now - submitted > job.job.timeout + REPORT_GRACE:
                    return gone(f"trainer worker {claimed.worker} did not report within the timeout")
            elif not alive and now - submitted > self.dead_after:
                if self._withdraw(job.id):
                    return gone(f"no trainer worker is alive on spool {self.spool}: start one "
                                "(python -m trainer.remote.worker)")
            time.sleep(self.poll)

    def _withdraw(self, job_id: str) -> bool:
        try:
            (self.spool / "jobs" / f"{job_id}.json").unlink()
            return True
        except FileNotFoundError:
            return False  # a worker claimed it just now

    def _cancel(self, job_id: str) -> None:
        if not self._withdraw(job_id):
            spoolfs.write_json_atomic(self.spool / "cancel" / f"{job_id}.json", {"id": job_id, "time": time.time()})


def keep_checkpoint(saved: Path, target: Path) -> Path | None:
    """Moves a run's saved weights to the workspace's checkpoints/, where the loop keeps the best's."""
    if not saved.is_file():
        return None
    target.parent.mkdir(exist_ok=True)
    shutil.move(saved, target)  # the spool may be on another file system
    return target
