"""Proposals that produced no experiment: failed (the model or the service refused), rejected on
rebase, or abandoned when the loop stopped. Each is one line of proposal_failures.jsonl, kept apart
from the experiment ledger; its LLM spend counts towards the run's cost cap like any experiment's."""

from __future__ import annotations

import time
from contextlib import suppress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from agent.llm.types import Usage
from agent.recording.ledger import append_line

FILE = "proposal_failures.jsonl"


class FailedProposal(BaseModel):
    experiment_id: str                  # the experiment the proposal was for
    kind: Literal["failed", "rejected", "abandoned"]
    reason: str
    in_a_row: int = 0                   # consecutive failures so far (0 for rejected or abandoned ones)
    usage: Usage = Field(default_factory=Usage)
    time: str = ""


def record_failure(workspace_dir: Path, failure: FailedProposal) -> None:
    failure.time = failure.time or time.strftime("%Y-%m-%dT%H:%M:%S%z")
    append_line(workspace_dir / FILE, failure.model_dump_json() + "\n")


def read_failures(workspace_dir: Path) -> list[FailedProposal]:
    path = workspace_dir / FILE
    if not path.exists():
        return []
    failures = []
    for line in path.read_text().splitlines():
        with suppress(ValidationError):  # a torn last line
            failures.append(FailedProposal.model_validate_json(line))
    return failures


def failures_cost(workspace_dir: Path) -> float:
    return sum(f.usage.cost_usd for f in read_failures(workspace_dir))
