"""Runners execute one commit of a workspace and report what happened.

LocalRunner runs it on this machine through the run path every runner shares
(trainer/runs/training_run.py): the commit's files in a fresh run directory outside the workspace,
`python train.py` as a stranger where the machine allows (trainer/sandbox/untrusted.py), an allowlisted
environment (no API keys), its output capped into logs/<id>.log, a hard timeout, val only through
the seal (trainer/sandbox/seal.py), and the frozen files hashed against the workspace's root commit
afterwards. RunResult (trainer/runs/run_result.py) is what every runner returns.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from typing import Protocol

from agent.workspace import Workspace
from trainer.evaluator.evaluation import Evaluation
from trainer.runs.jobs import EvaluationJob, Job
from trainer.runs.run_result import RunResult
from trainer.runs.training_run import TRACKED, RunRequest, run_commit
from trainer.sandbox.limits import RunLimits
from trainer.sandbox.untrusted import isolation, kill_group

__all__ = ["LocalRunner", "RunResult", "Runner"]


class Runner(Protocol):
    """Runner.run(workspace, job) -> RunResult: train.py of job.commit with job.seed (AUTORESEARCH_SEED), its log
    and sealed weights where workspace.paths(job.run) says (pruning and live progress find them there).

    run is called from several threads at once: it blocks while all `slots` are busy and says in
    result.where what ran it. cancel_all stops every run in flight (the loop is stopping)."""

    name: str
    isolation: str  # a sentence on how runs are isolated, said when a loop starts
    slots: int      # runs it can hold at once; the loop keeps this many experiments in flight by default

    def run(self, workspace: Workspace, job: Job) -> RunResult: ...

    def cancel_all(self) -> None: ...

    def evaluate(self, workspace: Workspace, job: EvaluationJob) -> Evaluation:
        """trainer/evaluator/evaluate.py on saved weights, where the runs run (the GPU for the spool); its log where
        workspace.paths(job.run) says. EvaluationFailed when it cannot score them."""
        ...


def visible_gpus() -> list[int]:
    """The CUDA GPUs this machine shows (CUDA_VISIBLE_DEVICES if set, else nvidia-smi); none without CUDA."""
    if (listed := os.environ.get("CUDA_VISIBLE_DEVICES")) is not None:
        return [int(part) for part in listed.split(",") if part.strip().isdigit()]
    try:
        shown = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(line) for line in shown.stdout.split() if line.isdigit()] if shown.returncode == 0 else []


class LocalRunner:
    """Runs on this machine, `slots` at a time: one slot per GPU (each run sees only its own through
    CUDA_VISIBLE_DEVICES), or `slots` CPU runs where there is no GPU. A trusted evaluation takes a slot too."""

    name = "local"

    def __init__(self, python: str = sys.executable, slots: int | None = None, gpus: list[int] | None = None):
        self.python = python
        self.isolation = isolation().note
        self.gpus = visible_gpus() if gpus is None else gpus
        self.slots = slots or max(1, len(self.gpus))
        if self.gpus and self.slots > len(self.gpus):
            raise ValueError(f"{self.slots} slots but {len(self.gpus)} GPU(s) ({self.gpus}): one run per GPU; "
                             f"use --parallel {len(self.gpus)} or fewer")
        self._free: queue.Queue[int] = queue.Queue()
        for slot in range(self.slots):
            self._free.put(slot)
        self._running: dict[int, object] = {}  # slot -> the process of its run
        self._guard = threading.Lock()

    def evaluate(self, workspace: Workspace, job: EvaluationJob) -> Evaluation:
        """On a slot of its own, as a run: a budgeted run never shares its GPU (memory, speed) with an evaluation,
        which waits while every slot trains."""
        from agent.running.evaluator import evaluate_checkpoint
        slot = self._free.get()
        try:
            gpu = self.gpus[slot] if self.gpus else None
            return evaluate_checkpoint(workspace, job, self.python,
                                       extra_env=None if gpu is None else {"CUDA_VISIBLE_DEVICES": str(gpu)})
        finally:
            self._free.put(slot)

    def run(self, workspace: Workspace, job: Job) -> RunResult:
        files = {name: workspace.file_at(name, job.commit).encode() for name in TRACKED}
        paths = workspace.paths(job.run)
        frozen = workspace.frozen_hashes()
        slot = self._free.get()  # waits while every slot is busy
        try:
            gpu = self.gpus[slot] if self.gpus else None

            def started(process) -> None:
                with self._guard:
                    self._running[slot] = process

            result = run_commit(RunRequest(
                files=files, seed=job.seed, timeout=job.timeout, frozen_sha256=frozen, run_dir=paths.run_dir,
                log_path=paths.log, checkpoint_destination=paths.checkpoint, hidden=(workspace.dir.parent,),
                extra_env={} if gpu is None else {"CUDA_VISIBLE_DEVICES": str(gpu)}, python=self.python,
                limits=RunLimits.for_machine(self.slots)), on_start=started)
        finally:
            with self._guard:
                self._running.pop(slot, None)
            self._free.put(slot)
        result.where = f"local slot {slot + 1}" + ("" if gpu is None else f", GPU {gpu}")
        return result

    def cancel_all(self) -> None:
        """Kills the process group of every run in flight; each of those runs returns as it ends."""
        with self._guard:
            processes = list(self._running.values())
        for process in processes:
            kill_group(process.pid)
