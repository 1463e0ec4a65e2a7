"""Loss curves for the report: each experiment's training loss over its budget beside the curve of the best it was
compared with, drawn as a small inline SVG.

The x axis is the share of the budget a step line says was spent, not the step: a change that buys more, smaller
steps (a shallower model) spans the same width as the best it competes with. A log is the run's own output and
untrusted: only its first MAX_LOG_BYTES are read, only step lines parsed with run_progress's bounded patterns are
kept, and the curve is drawn from those numbers alone; nothing here feeds a decision.
"""

from __future__ import annotations

import math
from pathlib import Path

from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.running.run_progress import parse_step_line

MAX_LOG_BYTES = 4 << 20
MAX_POINTS = 160
WIDTH, HEIGHT, PAD = 260, 86, 4
EARLY_PERCENT = 10.0   # the first steps' loss is left out of the y range, or it flattens everything after it

Curve = list[tuple[float, float]]   # (percent of the budget, training loss)


def loss_curve(log: Path) -> Curve:
    """The (percent, loss) of every step line in the start of log; [] when there is no log or no step line."""
    try:
        with open(log, "rb") as handle:
            text = handle.read(MAX_LOG_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return []
    steps = (parse_step_line(line.strip()) for line in text.splitlines())
    points = [(s.percent, s.loss) for s in steps if s is not None and s.loss is not None and math.isfinite(s.loss)]
    if len(points) > MAX_POINTS:
        stride = len(points) / MAX_POINTS
        points = [points[int(i * stride)] for i in range(MAX_POINTS)] + [points[-1]]
    return points


def record_log(record: ExperimentRecord, workspace_dir: Path) -> Path | None:
    """The log of an experiment's first run, inside the workspace's logs/ (a record cannot point elsewhere)."""
    name = next((run.log for run in record.runs if run.log), None) or record.log
    return workspace_dir / "logs" / Path(name).name if name else None


def curves(records: list[ExperimentRecord], workspace_dir: Path) -> dict[str, Curve]:
    """experiment id -> its loss curve, for the experiments whose log has step lines."""
    return {r.id: points for r in records if r.is_experiment and (log := record_log(r, workspace_dir)) is not None
            and (points := loss_curve(log))}


def compared_with(record: ExperimentRecord, records: list[ExperimentRecord]) -> ExperimentRecord | None:
    """The keep whose commit the experiment was built on: the best it was compared with."""
    return next((r for r in records if r.commit == record.parent and r.status == ExperimentStatus.KEEP
                 and r.id != record.id), None)


def curve_svg(candidate: Curve, best: Curve, colour: str) -> str:
    """The candidate's curve in its status colour over the best's in dashed grey, on one shared scale."""
    both = candidate + best
    settled = [loss for percent, loss in both if percent >= EARLY_PERCENT] or [loss for _, loss in both]
    low, high = min(settled), max(settled)
    span = (high - low) or 1.0

    def polyline(points: Curve, style: str) -> str:
        xy = " ".join(f"{PAD + (WIDTH - 2 * PAD) * p / 100:.1f},"
                      f"{PAD + (HEIGHT - 2 * PAD) * (1 - (min(max(loss, low), high) - low) / span):.1f}"
                      for p, loss in points)
        return f"<polyline fill='none' points='{xy}' {style}/>" if points else ""

    return (f"<svg class='curve' width='{WIDTH}' height='{HEIGHT}' viewBox='0 0 {WIDTH} {HEIGHT}' role='img'>"
            f"<rect width='{WIDTH}' height='{HEIGHT}' fill='#fff' stroke='#e4e7eb'/>"
            + polyline(best, "stroke='#9aa5b1' stroke-width='1.2' stroke-dasharray='4 3'")
            + polyline(candidate, f"stroke='{colour}' stroke-width='1.6'")
            + f"<text x='{WIDTH - PAD}' y='12' text-anchor='end' font-size='9' fill='#616e7c'>{high:.3f}</text>"
            f"<text x='{WIDTH - PAD}' y='{HEIGHT - PAD - 2}' text-anchor='end' font-size='9' fill='#616e7c'>"
            f"{low:.3f}</text></svg>")
