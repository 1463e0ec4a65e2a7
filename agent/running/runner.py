"""Runners execute one commit of a workspace and report what happened.

LocalRunner runs it on this machine through the run path every runner shares
(trainer/training_run.py): the commit's files in a fresh run directory outside the workspace,
`python train.py` as a stranger where the machine allows (trainer/sandbox.py), an allowlisted
environment (no API keys), its output capped into logs/<id>.log, a hard timeout, val only through
the seal (trainer/seal.py), and the frozen files hashed against the workspace's root commit
afterwards. RunResult (trainer/run_result.py) is what every runner returns.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Protocol

from agent.workspace import Workspace
from trainer.prepare import cache_root
from trainer.run_result import RunResult
from trainer.sandbox import isolation
from trainer.training_run import TRACKED, compile_cache_dir, run_commit

__all__ = ["LocalRunner", "RunResult", "Runner"]


class Runner(Protocol):
    """Runner.run(workspace, commit, timeout, experiment_id, seed) -> RunResult (LocalRunner, SpoolRunner).
    The seed reaches train.py as AUTORESEARCH_SEED; experiment_id names the log (logs/<id>.log)."""

    name: str
    isolation: str  # a sentence on how runs are isolated, said when a loop starts

    def run(self, workspace: Workspace, commit: str, timeout: float, experiment_id: str,
            seed: int = 42) -> RunResult: ...

    def evaluate(self, workspace: Workspace, commit: str, checkpoint: Path, name: str, splits: tuple[str, ...],
                 probe: bool = False, timeout: float = 1800.0) -> dict:
        """trainer/evaluate.py on saved weights, where the runs run (the GPU for the spool)."""
        ...


class LocalRunner:
    name = "local"

    def __init__(self, python: str = sys.executable):
        self.python = python
        self.isolation = isolation().note

    def evaluate(self, workspace: Workspace, commit: str, checkpoint: Path, name: str, splits: tuple[str, ...],
                 probe: bool = False, timeout: float = 1800.0) -> dict:
        from agent.judging.evaluator import evaluate_checkpoint
        return evaluate_checkpoint(workspace, commit, checkpoint, name, splits, probe, timeout, self.python)

    def run(self, workspace: Workspace, commit: str, timeout: float, experiment_id: str, seed: int = 42) -> RunResult:
        files = {name: workspace.file_at(name, commit).encode() for name in TRACKED}
        return run_commit(files, seed=seed, timeout=timeout, frozen_sha256=workspace.frozen_hashes(),
                          run_dir=workspace.runs_dir / experiment_id,
                          log_path=workspace.dir / "logs" / f"{experiment_id}.log",
                          checkpoint_destination=workspace.dir / "checkpoints" / f"{experiment_id}.pt",
                          compile_cache=compile_cache_dir(cache_root() / "compile"), hidden=[workspace.dir.parent],
                          python=self.python)

