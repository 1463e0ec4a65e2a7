"""One training run of a commit, the same for the agent's LocalRunner and the spool's worker.

The commit's files are written into a fresh private directory outside any workspace, with a data
view holding the track's training split only; train.py runs there as a stranger where the
machine allows (trainer/sandbox.py), gets val through the seal (trainer/seal.py), and afterwards
its frozen files are hashed against what they must be, without following whatever the run left
in their place. The directory is removed; the sealed weights stay where the seal moved them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainer.prepare import cache_root, track_dir
from trainer.sandbox import View, private_directory, regular_file_sha256, run_untrusted, runs_root, writable_by_stranger
from trainer.seal import OPENED_DIR, Seal, data_paths, hidden_paths, training_view

FROZEN = ("prepare.py", "track.json")
CHECKPOINT = "checkpoint.pt"  # prepare.evaluate_bpb saves the weights here, in the run directory, before the seal


@dataclass
class TrainingOutcome:
    returncode: int | None
    timed_out: bool
    seconds: float
    isolated: bool
    frozen_changed: list[str] = field(default_factory=list)
    checkpoint: Path | None = None         # where the seal moved the weights, if the run sealed
    checkpoint_sha256: str | None = None
    seal_refused: str | None = None
    seal_seconds: float | None = None      # from the run's start to its seal, timed here
    trained_tokens: int | None = None      # training tokens make_dataloader handed out, as reported at the seal


def compile_cache_env(directory: Path) -> dict[str, str]:
    """torch.compile's caches (inductor FX graphs, autograd, triton) kept across runs, so that a train.py whose
    graphs did not change skips most of its compile."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(directory), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
            "TORCHINDUCTOR_AUTOGRAD_CACHE": "1", "TRITON_CACHE_DIR": str(directory / "triton")}


def train_commit(files: dict[str, bytes], run_dir: Path, log_path: Path, checkpoint_destination: Path,
                 frozen_sha256: dict[str, str], timeout: float, seed: int, python: str, compile_cache: Path,
                 hidden: list[Path], extra_env: dict[str, str] | None = None,
                 on_start: Callable | None = None) -> TrainingOutcome:
    """Runs `python train.py` on files (name -> content) in run_dir; hidden is what the run must not see
    beyond the defaults (the workspace, the spool)."""
    private_directory(run_dir)
    for name, content in files.items():
        (run_dir / name).write_bytes(content)
    (run_dir / OPENED_DIR).mkdir()  # the seal's, made before the run can put something in its place
    cache = cache_root()
    spec = json.loads(files["track.json"])
    track = track_dir(spec["track"], cache)
    seal = Seal(run_dir, track, CHECKPOINT, checkpoint_destination)
    env = {"AUTORESEARCH_SEED": str(seed), "AUTORESEARCH_CACHE": str(training_view(track, run_dir)),
           "AUTORESEARCH_CHECKPOINT": CHECKPOINT, **seal.env(), **compile_cache_env(compile_cache),
           **cpu_clock_env(spec["constants"]), **(extra_env or {})}
    view = View(writable=[writable_by_stranger(compile_cache)], read_only=data_paths(cache),
                hidden=[runs_root(), run_dir.parent, *hidden, *hidden_paths(cache)])

    def started(process) -> None:
        seal.started(process.pid)
        if on_start is not None:
            on_start(process)

    try:
        outcome = run_untrusted([python, "train.py"], run_dir, log_path, timeout, env, view=view,
                                pass_fds=(seal.child_fd,), on_start=started)
    finally:
        sealed = seal.finish()
    changed = [name for name in FROZEN if regular_file_sha256(run_dir / name) != frozen_sha256[name]]
    shutil.rmtree(run_dir, ignore_errors=True)
    return TrainingOutcome(outcome.returncode, outcome.timed_out, outcome.seconds, outcome.isolated, changed,
                           sealed.checkpoint, sealed.sha256, sealed.problem, sealed.seconds, sealed.trained_tokens)


def cpu_clock_env(constants: dict) -> dict[str, str]:
    """On a CPU-clock track torch computes on one thread: threads meet at barriers, and a thread waiting there
    for a sibling that other work on the machine took the core from is charged the wait (spinning) or wakes
    late (sleeping), which makes the CPU seconds of a step depend on the load. One thread per run also means
    the same budget buys the same work on a machine of any core count. A train.py may set more threads; its
    budget is charged for all of them."""
    return {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"} if constants.get("budget_clock") == "cpu" else {}
