"""SpoolRunner: the agent's side of the spool. It writes a job, waits for a trainer worker's
result, and tells a dead worker (infra) from a long run by the workers' heartbeats.

One experiment runs at a time per loop; several workers (one per GPU) serve several loops,
or stand by: a job whose worker dies is retried once by the loop's infra rule, on whichever
worker claims it next.
"""

from __future__ import annotations

import secrets
import shutil
import time
from pathlib import Path

from agent.evaluator import EvaluationFailed, parse_evaluation
from agent.logview import read_log
from agent.runner import RunResult, keep_checkpoint, read_head_tail
from agent.triage import Triage, Verdict, classify, parse_model_config
from agent.workspace import Workspace
from trainer import spool as spoolfs

REPORT_GRACE = 60.0  # seconds past the job's timeout before a silent worker counts as gone


class SpoolRunner:
    name = "spool"
    isolation = "runs are isolated as each spool worker says when it starts (and records in each result)"

    def __init__(self, spool: Path, poll: float = 0.3, dead_after: float = spoolfs.DEAD_AFTER):
        self.spool, self.poll, self.dead_after = spoolfs.layout(spool), poll, dead_after

    def run(self, workspace: Workspace, commit: str, timeout: float, experiment_id: str, seed: int = 42) -> RunResult:
        start = time.perf_counter()
        job_id, result, problem, log_path = self._through_spool(workspace, commit, timeout, experiment_id,
                                                                dict(seed=seed))
        if problem is not None:
            with open(log_path, "a") as log:
                log.write(f"\n[spool] {problem}\n")
            head, tail = read_head_tail(log_path)
            return RunResult(returncode=None, timed_out=False, log_path=log_path,
                             verdict=Verdict(Triage.INFRA, problem, {}), seconds=time.perf_counter() - start,
                             head=head, tail=tail)
        log = read_log(log_path)
        head, tail = log.head, log.tail
        return RunResult(returncode=result["returncode"], timed_out=result["timed_out"], log_path=log_path,
                         verdict=classify(result["returncode"], result["timed_out"], log.text, result["frozen_changed"],
                                          result.get("seal_refused")),
                         seconds=result["seconds"], head=head, tail=tail, frozen_changed=result["frozen_changed"],
                         model_config=parse_model_config(head),
                         checkpoint=keep_checkpoint(self.spool / "checkpoints" / f"{job_id}.pt", workspace,
                                                    experiment_id) if result.get("checkpoint_sha256") else None,
                         checkpoint_sha256=result.get("checkpoint_sha256"), seal_seconds=result.get("seal_seconds"),
                         trained_tokens=result.get("trained_tokens"))

    def evaluate(self, workspace: Workspace, commit: str, checkpoint: Path, name: str, splits: tuple[str, ...],
                 probe: bool = False, timeout: float = 1800.0) -> dict:
        """trainer/evaluate.py on a GPU worker (the checkpoint is read through the shared workspaces)."""
        _, result, problem, log_path = self._through_spool(
            workspace, commit, timeout, name, dict(kind="evaluate", checkpoint=str(checkpoint), splits=",".join(splits),
                                                   probe=probe))
        if problem is not None:
            raise EvaluationFailed(f"the evaluation job for {checkpoint.name} did not finish: {problem}")
        return parse_evaluation(log_path, result["returncode"], result["timed_out"], checkpoint)

    def _through_spool(self, workspace: Workspace, commit: str, timeout: float, name: str,
                       extra: dict) -> tuple[str, dict, str | None, Path]:
        """Submits a job, waits for it, copies its log to logs/<name>.log: (job id, result, problem, log)."""
        job_id = f"{workspace.tag}-{name}-{secrets.token_hex(3)}"
        spoolfs.submit(self.spool, dict(id=job_id, workspace=str(workspace.dir), commit=commit, timeout=timeout,
                                        frozen=workspace.frozen_hashes(), created=time.time(), **extra))
        log_path = workspace.dir / "logs" / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            result, problem = self._wait(job_id, timeout)
        except KeyboardInterrupt:
            self._cancel(job_id)
            raise
        spool_log = self.spool / "logs" / f"{job_id}.log"
        if spool_log.exists():
            shutil.copyfile(spool_log, log_path)
        else:
            log_path.write_text("")
        if problem is None and result.get("infra"):
            problem = result["infra"]
        return job_id, result, problem, log_path

    def _wait(self, job_id: str, timeout: float) -> tuple[dict, str | None]:
        """(result, None), or ({}, why the job can no longer finish)."""
        submitted = time.time()
        while True:
            result = spoolfs.read_json(self.spool / "results" / f"{job_id}.json")
            if result is not None:
                return result, None
            now = time.time()
            claimed = spoolfs.read_json(self.spool / "claimed" / f"{job_id}.json")
            alive = {w["worker"]: w for w in spoolfs.alive_workers(self.spool, now, self.dead_after)}
            if claimed is not None and claimed.get("worker"):
                if claimed["worker"] not in alive:
                    return {}, f"trainer worker {claimed['worker']} stopped answering during the run"
                if now - submitted > timeout + REPORT_GRACE:
                    return {}, f"trainer worker {claimed['worker']} did not report within the timeout"
            elif not alive and now - submitted > self.dead_after:
                if self._withdraw(job_id):
                    return {}, f"no trainer worker is alive on spool {self.spool}: start one (python -m trainer.worker)"
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
