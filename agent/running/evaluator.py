"""Running trainer/evaluate.py on a commit's saved weights on this machine, through the run path's
evaluate_commit (trainer/training_run.py): the commit's files in a fresh directory outside the
workspace as cwd, a process of its own (allowlisted environment, hard timeout; it never imports
train.py and sandboxes the model server that does), its log in logs/, its result parsed from the
last EVALUATION line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agent.workspace import Workspace
from trainer.evaluate import RESULT_PREFIX
from trainer.training_run import TRACKED, evaluate_commit


class EvaluationFailed(Exception):
    """The evaluator could not score the weights; the message has the end of its log."""


def evaluate_checkpoint(workspace: Workspace, commit: str, checkpoint: Path, name: str, splits: tuple[str, ...],
                        probe: bool = False, timeout: float = 1800.0, python: str = sys.executable) -> dict:
    files = {path: workspace.file_at(path, commit).encode() for path in TRACKED}
    log_path = workspace.dir / "logs" / f"{name}.log"
    outcome = evaluate_commit(files, checkpoint, splits, probe=probe, timeout=timeout,
                              run_dir=workspace.runs_dir / name, log_path=log_path, python=python)
    return parse_evaluation(log_path, outcome.returncode, outcome.timed_out, checkpoint)


def parse_evaluation(log_path: Path, returncode: int | None, timed_out: bool, checkpoint: Path) -> dict:
    lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
    result = next((line[len(RESULT_PREFIX):] for line in reversed(lines) if line.startswith(RESULT_PREFIX)), None)
    if returncode != 0 or result is None:
        tail = "\n".join(lines[-15:])
        raise EvaluationFailed(f"the evaluator exited {returncode} on {checkpoint.name} "
                               f"({'timed out' if timed_out else 'see below'}); the end of {log_path}:\n{tail}")
    return json.loads(result)
