"""What a runner is asked to do: train a commit (Job) or score weights a run sealed (EvaluationJob). Where the
run's files go comes from its RunId (Workspace.paths), the same for every runner."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from trainer.runs.run_id import RunId


class Job(BaseModel):
    """One training run: train.py of `commit` with `seed` (AUTORESEARCH_SEED), killed after `timeout` seconds."""
    model_config = ConfigDict(frozen=True)

    run: RunId
    commit: str
    seed: int = 42
    timeout: float


class EvaluationJob(BaseModel):
    """trainer/evaluator/evaluate.py on the weights at `checkpoint` (sealed by a run of `commit`), on `splits`."""
    model_config = ConfigDict(frozen=True)

    run: RunId
    commit: str
    checkpoint: Path
    splits: tuple[str, ...] = ("val",)
    probe: bool = False
    timeout: float = 1800.0
    batch_rows: int | None = None  # rows a batch sends the model: None is the evaluator's own for its device
