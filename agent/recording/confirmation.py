"""confirmation.json, typed: the held-out confirmation of a tag (agent/judging/confirm.py writes it; the report,
the CLI and the MLflow mirror read it). Keys a newer version wrote are kept, as in the experiment record."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from trainer.files.atomic import read_json, write_json_atomic

FILE = "confirmation.json"


class ConfirmedCommit(BaseModel):
    """The baseline or the best: its val score in the search and its saved weights' scores now."""
    model_config = ConfigDict(extra="allow")

    id: str
    commit: str
    description: str
    search_val: float     # the mean of its runs' val_bpb that the decisions read
    runs: int
    val: float            # its weights' val score, from the trusted evaluator now
    holdout: float


class Confirmation(BaseModel):
    model_config = ConfigDict(extra="allow")

    time: str
    sigma: float | None   # the noise floor's when it was written
    baseline: ConfirmedCommit
    best: ConfirmedCommit
    search_gain: float    # baseline - best, on the searched val split
    holdout_gain: float   # baseline - best, on the holdout split
    chain: list[ConfirmedCommit] = []   # every keep of the night in order, the baseline first (empty: older files)
    warnings: list[str] = []            # a keep that got worse on holdout, a val gain the holdout does not keep

    @property
    def retention(self) -> float | None:
        """The share of the searched gain the holdout split keeps; None without a gain to keep."""
        return self.holdout_gain / self.search_gain if self.search_gain > 0 else None

    def write(self, workspace_dir: Path) -> None:
        write_json_atomic(workspace_dir / FILE, self.model_dump(exclude_unset=True))  # an older file as it was


def read_confirmation(workspace_dir: Path) -> Confirmation | None:
    found = read_json(workspace_dir / FILE)
    try:
        return None if found is None else Confirmation.model_validate(found)
    except ValidationError:
        return None
