"""Running trainer/evaluator/evaluate.py on a commit's saved weights on this machine, through the run path's
evaluate_commit (trainer/runs/training_run.py): the commit's files in a fresh directory outside the
workspace as cwd, a process of its own (allowlisted environment, hard timeout; it never imports
train.py and sandboxes the model server that does), its log in logs/, its Evaluation handed back
typed, as every runner's is."""

from __future__ import annotations

import sys
from pathlib import Path

from agent.workspace import Workspace
from trainer.evaluator.evaluation import Evaluation, EvaluationOutcome
from trainer.runs.jobs import EvaluationJob
from trainer.runs.training_run import TRACKED, evaluate_commit


class EvaluationFailed(Exception):
    """The evaluator could not score the weights; the message says why in the harness's words and names its log."""


def evaluate_checkpoint(workspace: Workspace, job: EvaluationJob, python: str = sys.executable,
                        extra_env: dict[str, str] | None = None) -> Evaluation:
    files = {path: workspace.file_at(path, job.commit).encode() for path in TRACKED}
    paths = workspace.paths(job.run)
    outcome = evaluate_commit(files, job, run_dir=paths.run_dir, log_path=paths.log, python=python,
                              extra_env=extra_env)
    return evaluation_of(outcome, paths.log, job.checkpoint)


def evaluation_of(outcome: EvaluationOutcome, log_path: Path, checkpoint: Path) -> Evaluation:
    """The Evaluation the evaluator handed back, wherever it ran (here, a spool worker, a Ray node); EvaluationFailed
    when it handed back none."""
    if outcome.evaluation is not None:
        return outcome.evaluation
    # The log's end can be the model process's own output (it ran the run's train.py): a reason reaches the
    # proposers, so it names the log, where a person reads it, and quotes nothing of it.
    raise EvaluationFailed(f"the evaluator exited {outcome.returncode} on {checkpoint.name} "
                           f"({outcome.problem or 'see its log'}); its log, for a person to read: {log_path.name}")
