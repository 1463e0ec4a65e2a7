"""What a runner is asked to do: train a commit (Job) or score weights a run sealed (EvaluationJob). They are
declared once and travel as they are: a local runner takes them, the spool wraps them in its envelope, a Ray task
is sent them. Where the run's files go comes from its RunId (Workspace.paths), the same for every runner."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainer.runs.run_id import RunId


class Job(BaseModel):
    """One training run: train.py of `commit` with `seed` (AUTORESEARCH_SEED), killed after `timeout` seconds."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["train"] = "train"
    run: RunId
    commit: str
    seed: int = 42
    timeout: float


class EvaluationJob(BaseModel):
    """trainer/evaluator/evaluate.py on the weights at `checkpoint` (sealed by a run of `commit`), on `splits`."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["evaluate"] = "evaluate"
    run: RunId
    commit: str
    checkpoint: Path
    splits: tuple[Literal["val", "holdout"], ...] = ("val",)
    probe: bool = False
    timeout: float = 1800.0
    batch_rows: Annotated[int, Field(ge=2)] | None = None  # rows a batch sends the model: None, its device's own


AnyJob = Annotated[Job | EvaluationJob, Field(discriminator="kind")]
