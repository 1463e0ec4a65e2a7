"""What the night has learned, read from the ledger: each experiment's hypothesis and expectation, the
lesson a later proposal drew from its result, and the history filtered the way list_experiments asks.

A lesson is written by the proposal after the result is known, so it lives in that later record
(`lesson`, `lesson_for`); lessons_by_id puts it back beside the experiment it is about.
"""

from __future__ import annotations

from pydantic import BaseModel

from agent.ledger import NOISE

DECIDED = ("keep", "discard", "crash")
SIMPLIFY = "simplify"  # evidence["kept_as"] of a keep won by removing code for an equal result


class Reasoning(BaseModel):
    """One experiment's reasoning as the ledger holds it, bounded for display."""
    id: str
    hypothesis: str = ""
    expected: str = ""
    lesson: str = ""   # what a later proposal said the result means


def clip(text: str, limit: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def lessons_by_id(records: list[dict]) -> dict[str, str]:
    """experiment id -> the lesson a later proposal drew from its result (the latest one given)."""
    lessons = {}
    for r in records:
        if r.get("lesson_for") and r.get("lesson"):
            lessons[str(r["lesson_for"])] = str(r["lesson"])
    return lessons


def reasoning(record: dict, lessons: dict[str, str], limit: int = 10_000) -> Reasoning:
    return Reasoning(id=record["id"], hypothesis=clip(record.get("hypothesis", ""), limit),
                     expected=clip(record.get("expected", ""), limit),
                     lesson=clip(lessons.get(record["id"], ""), limit))


def is_experiment(record: dict) -> bool:
    return record["status"] != NOISE and record.get("proposer") != "baseline"


def kept_as(record: dict) -> str:
    """'simplify' for a keep won by removing code, 'keep' for a keep won by its gain, else the status."""
    if record["status"] == "keep" and (record.get("evidence") or {}).get("kept_as") == SIMPLIFY:
        return SIMPLIFY
    return record["status"]


def lesson_due(records: list[dict], running_id: str | None = None) -> dict | None:
    """The newest decided experiment whose result no proposal has drawn a lesson from yet, or None.
    Only the newest is asked for: an older one without a lesson (an offline proposer's) stays without."""
    lessons = lessons_by_id(records)
    decided = [r for r in records if is_experiment(r) and r["status"] in DECIDED and r["id"] != running_id]
    if not decided or decided[-1]["id"] in lessons:
        return None
    return decided[-1]


def filter_records(records: list[dict], status: str | None = None, text: str | None = None,
                   from_id: str | None = None, to_id: str | None = None) -> list[dict]:
    """The records that match every filter given: status (keep, simplify, discard, crash, interrupted, noise),
    text (case-insensitive, in the description, hypothesis, expectation, lesson or reason), an id range."""
    lessons = lessons_by_id(records)
    wanted = []
    for r in records:
        if status and status not in (r["status"], kept_as(r)):
            continue
        number = _number(r["id"])
        if from_id and number < _number(from_id):
            continue
        if to_id and number > _number(to_id):
            continue
        if text:
            haystack = " ".join(str(r.get(k, "")) for k in ("description", "hypothesis", "expected", "reason"))
            if text.lower() not in (haystack + " " + lessons.get(r["id"], "")).lower():
                continue
        wanted.append(r)
    return wanted


def _number(experiment_id: str) -> int:
    digits = str(experiment_id).split("-")[0]
    return int(digits) if digits.isdigit() else -1
