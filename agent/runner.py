"""Runners execute one commit of a workspace and report what happened.

LocalRunner: the commit's files are exported into a fresh run directory (never the
workspace itself), `python train.py` runs there in its own session with an environment
built from an allowlist (no API keys), its output streams to logs/<id>.log, and a hard
timeout kills the whole process group, plus any process that escaped the group but still
carries the run's token in its environment. The run sees the track's training split only and
gets val through the seal (trainer/seal.py); where the machine allows, it runs in its own
network and mount namespaces with the data read-only and the sealed splits hidden. After the
run the frozen files of the run directory are hashed against the workspace's root commit.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.logview import read_log
from agent.triage import Verdict, classify, parse_model_config
from agent.workspace import FROZEN, Workspace
from trainer.prepare import cache_root, track_dir
from trainer.sandbox import isolation_available, run_untrusted
from trainer.seal import Seal, data_paths, hidden_paths, training_view

CHECKPOINT = "checkpoint.pt"  # prepare.evaluate_bpb saves the scored weights here, in the run directory


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

    def run(self, workspace: Workspace, commit: str, timeout: float, experiment_id: str,
            seed: int = 42) -> RunResult: ...

    def evaluate(self, workspace: Workspace, commit: str, checkpoint: Path, name: str, splits: tuple[str, ...],
                 probe: bool = False, timeout: float = 1800.0) -> dict:
        """trainer/evaluate.py on saved weights, where the runs run (the GPU for the spool)."""
        ...


def compile_cache_env(cache: Path) -> dict[str, str]:
    """torch.compile's caches (inductor FX graphs, autograd, triton) kept across runs, so that a
    train.py whose graphs did not change skips most of its compile."""
    root = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or cache / "compile")
    return {"TORCHINDUCTOR_CACHE_DIR": str(root), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
            "TORCHINDUCTOR_AUTOGRAD_CACHE": "1", "TRITON_CACHE_DIR": str(root / "triton")}


def read_head_tail(path: Path) -> tuple[str, str]:
    view = read_log(path)
    return view.head, view.tail


class LocalRunner:
    name = "local"

    def __init__(self, python: str = sys.executable, isolate: bool | None = None):
        self.python = python
        self.isolate = isolation_available() if isolate is None else isolate

    def evaluate(self, workspace: Workspace, commit: str, checkpoint: Path, name: str, splits: tuple[str, ...],
                 probe: bool = False, timeout: float = 1800.0) -> dict:
        from agent.evaluator import evaluate_checkpoint
        return evaluate_checkpoint(workspace, commit, checkpoint, name, splits, probe, timeout, self.python)

    def run(self, workspace: Workspace, commit: str, timeout: float, experiment_id: str, seed: int = 42) -> RunResult:
        run_dir = workspace.dir / "runs" / experiment_id
        shutil.rmtree(run_dir, ignore_errors=True)
        workspace.export(commit, run_dir)
        log_path = workspace.dir / "logs" / f"{experiment_id}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        cache = cache_root()
        track = track_dir(workspace.track["track"], cache)
        seal = Seal(run_dir, track, CHECKPOINT, workspace.dir / "checkpoints" / f"{experiment_id}.pt")
        env = {"AUTORESEARCH_SEED": str(seed), "AUTORESEARCH_CACHE": str(training_view(track, run_dir)),
               "AUTORESEARCH_CHECKPOINT": CHECKPOINT, **seal.env(), **compile_cache_env(cache)}
        try:
            outcome = run_untrusted([self.python, "train.py"], run_dir, log_path, timeout, env,
                                    read_only=data_paths(cache), isolate=self.isolate, hidden=hidden_paths(cache),
                                    pass_fds=(seal.child_fd,), on_start=lambda _: seal.started())
        finally:
            sealed = seal.finish()
        expected = workspace.frozen_hashes()
        changed = [path for path in FROZEN if _sha256(run_dir / path) != expected[path]]
        text = read_log(log_path).text
        head, tail = read_head_tail(log_path)
        shutil.rmtree(run_dir, ignore_errors=True)
        return RunResult(returncode=outcome.returncode, timed_out=outcome.timed_out, log_path=log_path,
                         verdict=classify(outcome.returncode, outcome.timed_out, text, changed, sealed.problem),
                         seconds=outcome.seconds, head=head, tail=tail, frozen_changed=changed,
                         model_config=parse_model_config(head), checkpoint=sealed.checkpoint,
                         checkpoint_sha256=sealed.sha256, seal_seconds=sealed.seconds,
                         trained_tokens=sealed.trained_tokens)


def keep_checkpoint(saved: Path, workspace: Workspace, experiment_id: str) -> Path | None:
    """Moves a run's saved weights to the workspace's checkpoints/, where the loop keeps the best's."""
    if not saved.is_file():
        return None
    target = workspace.dir / "checkpoints" / f"{experiment_id}.pt"
    target.parent.mkdir(exist_ok=True)
    shutil.move(saved, target)  # the spool may be on another file system
    return target


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
