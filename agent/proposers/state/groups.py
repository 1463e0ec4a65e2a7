"""The night grouped by what each experiment's diff touched, so that a long night fits a short message.

A diff touches a hyperparameter when it changes an UPPER_CASE assignment at the top of train.py, and
otherwise the top-level def or class its hunk falls in (git names it in the hunk header). The groups
come from the diffs only, never from the descriptions a model wrote.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from agent.recording.record import SIMPLIFY, ExperimentRecord, ExperimentStatus
from agent.recording.research_memory import proposed

HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@ ?(.*)$")
HYPERPARAMETER = re.compile(r"^([A-Z][A-Z0-9_]*)\s*(?::[^=]*)?=(?!=)")
DEFINITION = re.compile(r"^(?:async\s+)?(def|class)\s+([A-Za-z_][A-Za-z0-9_]*)")
CHARS_PER_TOKEN = 3.5  # a fixed, conservative estimate for English mixed with code and numbers


def estimate_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN + 0.999)


def touched_parts(diff: str) -> list[str]:
    """The parts of train.py a unified diff changes, in order; `top level`: imports, lower-case constants."""
    parts: list[str] = []
    enclosing = "top level"
    for line in diff.splitlines():
        if line.startswith(("+++", "---", "diff ", "index ")):
            continue
        if hunk := HUNK.match(line):
            definition = DEFINITION.match(hunk.group(1).strip())
            enclosing = f"{definition.group(1)} {definition.group(2)}" if definition else "top level"
            continue
        body = line[1:]
        if definition := DEFINITION.match(body):  # a def or class line in the hunk (context or changed): its own part
            enclosing = f"{definition.group(1)} {definition.group(2)}"
        elif body[:1] not in ("", " ", "\t", "#", ")", "]", "}"):
            enclosing = "top level"  # back at module level
        if line[:1] not in "+-":
            continue
        setting = HYPERPARAMETER.match(body)
        part = setting.group(1) if setting else enclosing
        if body.strip() and part not in parts:
            parts.append(part)
    return parts


class Group(BaseModel):
    part: str
    ids: list[str] = Field(default_factory=list)
    kept: int = 0
    simplified: int = 0
    crashed: int = 0
    best_delta: float | None = None   # the lowest val_bpb minus the best's at the time (negative: better)
    best_id: str | None = None

    def line(self) -> str:
        tries = len(self.ids)
        text = f"{self.part[:40]}: {tries} tr{'y' if tries == 1 else 'ies'}, {self.kept} kept"
        if self.simplified:
            text += f" ({self.simplified} as simplify)"
        if self.crashed:
            text += f", {self.crashed} crashed"
        if self.best_delta is not None:
            text += f", best {self.best_delta:+.4f} ({self.best_id})"
        shown = self.ids[-4:]
        return text + "; " + ("… " if tries > len(shown) else "") + " ".join(shown)


def delta(record: ExperimentRecord) -> float | None:
    """val_bpb minus the best's mean it was judged against (from the decision's evidence)."""
    gain = record.evidence.gain
    return -gain if gain is not None and record.val_bpb is not None else None


def group_by_part(records: list[ExperimentRecord]) -> list[Group]:
    """One group per part any experiment touched, the most tried first."""
    groups: dict[str, Group] = {}
    for r in records:
        if not proposed(r) or r.status == ExperimentStatus.INTERRUPTED:
            continue
        for part in touched_parts(r.diff) or ["(no diff)"]:
            group = groups.setdefault(part, Group(part=part))
            group.ids.append(r.id)
            group.kept += r.status == ExperimentStatus.KEEP
            group.simplified += r.kept_as == SIMPLIFY
            group.crashed += r.status == ExperimentStatus.CRASH
            if (d := delta(r)) is not None and (group.best_delta is None or d < group.best_delta):
                group.best_delta, group.best_id = d, r.id
    return sorted(groups.values(), key=lambda g: (-len(g.ids), g.part))
