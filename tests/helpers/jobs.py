"""A training job as a test asks a runner for one: the run named by an experiment id."""

from pathlib import Path

from trainer.runs.jobs import EvaluationJob, Job
from trainer.runs.run_id import RunId


def job(commit: str, name: str = "0000", timeout: float = 600.0, seed: int = 42) -> Job:
    return Job(run=RunId.train(name), commit=commit, seed=seed, timeout=timeout)


def evaluation_job(commit: str, checkpoint: Path, name: str, splits: tuple[str, ...] = ("val",),
                   probe: bool = False) -> EvaluationJob:
    """The evaluator on checkpoint, its log at logs/<name>.log."""
    return EvaluationJob(run=RunId.train(name), commit=commit, checkpoint=checkpoint, splits=splits, probe=probe)
