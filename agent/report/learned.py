"""The report's "what we learned" section: each experiment's hypothesis, expectation and lesson, the
lessons of the keeps first, and the research notes as the night left them."""

from __future__ import annotations

from html import escape

from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.recording.research_memory import lessons_by_id, proposed, reasoning


def reasoning_cell(record: ExperimentRecord, lessons: dict[str, str]) -> str:
    """The experiments table's cell: hypothesis, expected effect and lesson of one experiment."""
    why = reasoning(record, lessons, 600)
    parts = [(label, text) for label, text in (("hypothesis", why.hypothesis), ("expected", why.expected),
                                               ("lesson", why.lesson)) if text]
    return "".join(f"<div class='small'><b>{label}</b>: {escape(text)}</div>" for label, text in parts) or "-"


def learned_section(records: list[ExperimentRecord], notes: str) -> str:
    lessons = lessons_by_id(records)
    taught = [r for r in records if proposed(r) and r.id in lessons]
    keeps = [r for r in taught if r.status == ExperimentStatus.KEEP]
    rest = [r for r in taught if r.status != ExperimentStatus.KEEP]

    def rows(chosen: list[ExperimentRecord]) -> str:
        return "".join(f"<tr><td><a href='#t-{escape(r.id)}'>{escape(r.id)}</a></td>"
                       f"<td class='{escape(r.status)}'>{escape(r.kept_as)}</td><td>{escape(r.description)}"
                       f"</td><td>{reasoning_cell(r, lessons)}</td></tr>" for r in chosen)

    header = "<tr><th>id</th><th>status</th><th>change</th><th>hypothesis, expected, lesson</th></tr>"
    parts = []
    if keeps:
        parts.append(f"<h3>From the keeps</h3><table>{header}{rows(keeps)}</table>")
    if rest:
        parts.append(f"<details><summary>From the other {len(rest)} experiment(s)</summary><table>{header}"
                     f"{rows(rest)}</table></details>")
    if not parts:
        parts.append("<p>No lessons were recorded (an offline proposer, or the night is young).</p>")
    parts.append(f"<h3>Research notes</h3><pre class='notes'>{escape(notes)}</pre>" if notes.strip()
                 else "<h3>Research notes</h3><p>notes.md is empty.</p>")
    return "".join(parts)
