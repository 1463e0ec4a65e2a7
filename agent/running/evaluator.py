"""Running trainer/evaluate.py on a commit's saved weights on this machine, through the run path's
evaluate_commit (trainer/training_run.py): the commit's files in a fresh directory outside the
workspace as cwd, a process of its own (allowlisted environment, hard timeout; it never imports
train.py and sandboxes the model server that does), its log in logs/, its result parsed from the
last EVALUATION line."""

from __future__ import annotations

import sys
from pathlib import Path

from agent.running.jobs import EvaluationJob
from agent.workspace import Workspace
from trainer.evaluation import Evaluation, EvaluationOutcome, evaluation_in
from trainer.training_run import TRACKED, evaluate_commit


class EvaluationFailed(Exception):
    """The evaluator could not score the weights; the message says why in the harness's words and names its log."""


def evaluate_checkpoint(workspace: Workspace, job: EvaluationJob, python: str = sys.executable,
                        extra_env: dict[str, str] | None = None) -> Evaluation:
    files = {path: workspace.file_at(path, job.commit).encode() for path in TRACKED}
    paths = workspace.paths(job.run)
    process = evaluate_commit(files, job.checkpoint, job.splits, probe=job.probe, timeout=job.timeout,
                              run_dir=paths.run_dir, log_path=paths.log, python=python, batch_rows=job.batch_rows,
                              extra_env=extra_env)
    return parse_evaluation(paths.log, EvaluationOutcome.of(process), job.checkpoint)


def parse_evaluation(log_path: Path, outcome: EvaluationOutcome, checkpoint: Path) -> Evaluation:
    """The evaluator's result in its log, wherever it ran (here, a spool worker, a Ray node); EvaluationFailed
    unless it exited cleanly after printing one that parses."""
    lines = log_path.read_text(errors="replace").splitlines() if log_path.exists() else []
    problem = "timed out" if outcome.timed_out else "see its log"
    if outcome.returncode == 0:
        try:
            evaluation = evaluation_in(lines)
        except ValueError:
            problem = "its last EVALUATION line does not parse"
        else:
            if evaluation is not None:
                return evaluation
    # The log's end can be the model process's own output (it ran the run's train.py): a reason reaches the
    # proposers, so it names the log, where a person reads it, and quotes nothing of it.
    raise EvaluationFailed(f"the evaluator exited {outcome.returncode} on {checkpoint.name} ({problem}); its log, "
                           f"for a person to read: {log_path.name}")
