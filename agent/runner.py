"""Runners execute one commit of a workspace and report what happened.

LocalRunner: the commit's files are written into a fresh run directory outside the workspace
(trainer/training_run.py), `python train.py` runs there as a stranger where the machine allows
(trainer/sandbox.py: an unprivileged uid in its own pid, mount, network and IPC namespaces that
sees neither the workspace nor the project), with an environment built from an allowlist (no API
keys), its output capped into logs/<id>.log, and a hard timeout that kills everything it started.
The run sees the track's training split only and gets val through the seal (trainer/seal.py).
After the run the frozen files of the run directory are hashed against the workspace's root
commit.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.logview import read_log
from agent.triage import Verdict, classify, parse_model_config
from agent.workspace import TRACKED, Workspace
from trainer.prepare import cache_root
from trainer.sandbox import isolation
from trainer.training_run import train_commit


@dataclass
class RunResult:
    returncode: int | None
    timed_out: bool
    log_path: Path
    verdict: Verdict
    seconds: float
    head: str
    tail: str
    frozen_changed: list[str] = field(default_factory=list)
    model_config: dict = field(default_factory=dict)
    checkpoint: Path | None = None   # checkpoints/<id>.pt: the weights the run sealed, if it did
    checkpoint_sha256: str | None = None  # their hash at the seal
    seal_seconds: float | None = None    # from the run's start to its seal, timed by the harness
    trained_tokens: int | None = None    # training tokens make_dataloader handed out, as reported at the seal

    @property
    def summary(self) -> dict[str, str]:
        return self.verdict.summary


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


def compile_cache(cache: Path) -> Path:
    """Where torch.compile's caches live across runs (TORCHINDUCTOR_CACHE_DIR if set)."""
    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or cache / "compile")


def read_head_tail(path: Path) -> tuple[str, str]:
    view = read_log(path)
    return view.head, view.tail


class LocalRunner:
    name = "local"

    def __init__(self, python: str = sys.executable):
        self.python = python
        self.isolation = isolation().note

    def evaluate(self, workspace: Workspace, commit: str, checkpoint: Path, name: str, splits: tuple[str, ...],
                 probe: bool = False, timeout: float = 1800.0) -> dict:
        from agent.evaluator import evaluate_checkpoint
        return evaluate_checkpoint(workspace, commit, checkpoint, name, splits, probe, timeout, self.python)

    def run(self, workspace: Workspace, commit: str, timeout: float, experiment_id: str, seed: int = 42) -> RunResult:
        log_path = workspace.dir / "logs" / f"{experiment_id}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        files = {name: workspace.file_at(name, commit).encode() for name in TRACKED}
        outcome = train_commit(files, workspace.runs_dir / experiment_id, log_path,
                               workspace.dir / "checkpoints" / f"{experiment_id}.pt", workspace.frozen_hashes(),
                               timeout, seed, self.python, compile_cache(cache_root()), hidden=[workspace.dir.parent])
        log = read_log(log_path)
        head, tail = log.head, log.tail
        return RunResult(returncode=outcome.returncode, timed_out=outcome.timed_out, log_path=log_path,
                         verdict=classify(outcome.returncode, outcome.timed_out, log.text, outcome.frozen_changed,
                                          outcome.seal_refused),
                         seconds=outcome.seconds, head=head, tail=tail, frozen_changed=outcome.frozen_changed,
                         model_config=parse_model_config(head), checkpoint=outcome.checkpoint,
                         checkpoint_sha256=outcome.checkpoint_sha256, seal_seconds=outcome.seal_seconds,
                         trained_tokens=outcome.trained_tokens)


def keep_checkpoint(saved: Path, workspace: Workspace, experiment_id: str) -> Path | None:
    """Moves a run's saved weights to the workspace's checkpoints/, where the loop keeps the best's."""
    if not saved.is_file():
        return None
    target = workspace.dir / "checkpoints" / f"{experiment_id}.pt"
    target.parent.mkdir(exist_ok=True)
    shutil.move(saved, target)  # the spool may be on another file system
    return target
