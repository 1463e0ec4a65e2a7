"""What the night has learned, read from the ledger: each experiment's hypothesis and expectation, the
lesson a later proposal drew from its result, and the history filtered the way list_experiments asks.

A lesson is written by the proposal after the result is known, so it lives in that later record
(`lesson`, `lesson_for`); lessons_by_id puts it back beside the experiment it is about.
"""

from __future__ import annotations

from collections.abc import Collection

from pydantic import BaseModel

from agent.recording.record import ExperimentRecord, ExperimentStatus

DECIDED = (ExperimentStatus.KEEP, ExperimentStatus.DISCARD, ExperimentStatus.CRASH, ExperimentStatus.SUPERSEDED)


class Reasoning(BaseModel):
    """One experiment's reasoning as the ledger holds it, bounded for display."""
    id: str
    hypothesis: str = ""
    expected: str = ""
    lesson: str = ""   # what a later proposal said the result means


def clip(text: str, limit: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def lessons_by_id(records: list[ExperimentRecord]) -> dict[str, str]:
    """experiment id -> the lesson a later proposal drew from its result (the latest one given)."""
    return {r.lesson_for: r.lesson for r in records if r.lesson_for and r.lesson}


def reasoning(record: ExperimentRecord, lessons: dict[str, str], limit: int = 10_000) -> Reasoning:
    return Reasoning(id=record.id, hypothesis=clip(record.hypothesis, limit), expected=clip(record.expected, limit),
                     lesson=clip(lessons.get(record.id, ""), limit))


def proposed(record: ExperimentRecord) -> bool:
    """An experiment a proposer proposed: not the baseline, not a noise floor."""
    return record.is_experiment and record.proposer != "baseline"


def lesson_due(records: list[ExperimentRecord], running_ids: Collection[str] = ()) -> ExperimentRecord | None:
    """The newest decided experiment whose result no proposal has drawn a lesson from yet, or None.
    Only the newest is asked for: an older one without a lesson (an offline proposer's) stays without."""
    lessons = lessons_by_id(records)
    decided = [r for r in records if proposed(r) and r.status in DECIDED and r.id not in running_ids]
    return decided[-1] if decided and decided[-1].id not in lessons else None


def filter_records(records: list[ExperimentRecord], status: str | None = None, text: str | None = None,
                   from_id: str | None = None, to_id: str | None = None) -> list[ExperimentRecord]:
    """The records that match every filter given: status (keep, simplify, discard, crash, interrupted, noise),
    text (case-insensitive, in the description, hypothesis, expectation, lesson or reason), an id range."""
    lessons = lessons_by_id(records)
    return [r for r in records if (not status or status in (r.status.value, r.kept_as))
            and (not from_id or _number(r.id) >= _number(from_id)) and (not to_id or _number(r.id) <= _number(to_id))
            and (not text or text.lower() in " ".join((r.description, r.hypothesis, r.expected, r.reason,
                                                       lessons.get(r.id, ""))).lower())]


def _number(experiment_id: str) -> int:
    digits = str(experiment_id).split("-")[0]
    return int(digits) if digits.isdigit() else -1
