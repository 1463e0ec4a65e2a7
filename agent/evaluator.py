"""Running trainer/evaluate.py on a commit's saved weights: an exported copy of the commit (in a
fresh directory outside the workspace) as cwd, a process of its own (allowlisted environment,
hard timeout; it never imports train.py and sandboxes the model server that does), its log in
logs/, its result parsed from the last EVALUATION line."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from agent.workspace import Workspace
from trainer.evaluate import RESULT_PREFIX
from trainer.prepare import cache_root
from trainer.sandbox import private_directory, run_untrusted

ROOT = Path(__file__).resolve().parents[1]


class EvaluationFailed(Exception):
    """The evaluator could not score the weights; the message has the end of its log."""


def evaluate_checkpoint(workspace: Workspace, commit: str, checkpoint: Path, name: str, splits: tuple[str, ...],
                        probe: bool = False, timeout: float = 1800.0, python: str = sys.executable) -> dict:
    run_dir = private_directory(workspace.runs_dir / name)
    workspace.export(commit, run_dir)
    log_path = workspace.dir / "logs" / f"{name}.log"
    log_path.parent.mkdir(exist_ok=True)
    cache = cache_root()
    command = [python, "-m", "trainer.evaluate", str(checkpoint), "--splits", ",".join(splits)]
    try:
        outcome = run_untrusted(command + (["--probe"] if probe else []), run_dir, log_path, timeout,
                                {"PYTHONPATH": str(ROOT), "AUTORESEARCH_CACHE": str(cache)})
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return parse_evaluation(log_path, outcome.returncode, outcome.timed_out, checkpoint)


def parse_evaluation(log_path: Path, returncode: int | None, timed_out: bool, checkpoint: Path) -> dict:
    lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
    result = next((line[len(RESULT_PREFIX):] for line in reversed(lines) if line.startswith(RESULT_PREFIX)), None)
    if returncode != 0 or result is None:
        tail = "\n".join(lines[-15:])
        raise EvaluationFailed(f"the evaluator exited {returncode} on {checkpoint.name} "
                               f"({'timed out' if timed_out else 'see below'}); the end of {log_path}:\n{tail}")
    return json.loads(result)
