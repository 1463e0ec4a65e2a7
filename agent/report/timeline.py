"""Where the night's time went: the spans of proposing, training and verifying read from the transcripts' stamped
events, drawn as a time line with one lane per training slot, and summed into the share of the wall clock each
phase (and nothing at all) took.

A transcript is the harness's own record of what it did, stamped to the second; a span is cut from the event that
began a phase to the event that ended it (a run's start and its finish, matched by seed, the finish's own seconds
taken where the run waited for a slot first).
"""

from __future__ import annotations

import calendar
import math
import time

from pydantic import BaseModel

PHASES = ("proposing", "training", "verifying")
COLOURS = {"proposing": "#9f7aea", "training": "#3182ce", "verifying": "#1f9d55"}
_ENDS_PROPOSING = ("proposal", "committed", "proposal_error", "proposal_abandoned", "interrupted")


class Span(BaseModel):
    experiment_id: str
    phase: str
    start: float     # seconds since the epoch
    end: float
    lane: str        # the slot that trained it, or the phase's own lane


class TimeWent(BaseModel):
    """Seconds of the wall clock, from the night's first stamped event to its last."""
    wall_s: float
    phases: dict[str, float]     # phase -> seconds during which at least one span of it was open
    idle_s: float                # seconds in which nothing was proposed, trained or verified

    def share(self, seconds: float) -> float:
        return seconds / self.wall_s if self.wall_s > 0 else 0.0


def _stamp(event: dict) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(str(event.get("t")), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def spans(events_by_id: dict[str, list[dict]]) -> list[Span]:
    found: list[Span] = []
    for experiment_id, events in events_by_id.items():
        proposing_since = None
        training: dict[str, float] = {}
        for event in events:
            at, kind = _stamp(event), event.get("type")
            if at is None:
                continue
            if kind == "proposal_started":
                proposing_since = at
            elif kind in _ENDS_PROPOSING and proposing_since is not None:
                found.append(Span(experiment_id=experiment_id, phase="proposing", start=proposing_since, end=at,
                                  lane="proposing"))
                proposing_since = None
            elif kind == "run_started":
                training[str(event.get("seed"))] = at
            elif kind in ("run_finished", "interrupted"):
                seeds = [str(event.get("seed"))] if kind == "run_finished" else list(training)
                ran = event.get("seconds")  # the runner's clock: from when the run had a slot, not when it asked
                for seed in seeds:
                    if (since := training.pop(seed, None)) is not None:
                        # stamps are cut to the second, so a run may have lasted up to a second more than they say
                        if isinstance(ran, int | float) and 0 <= ran <= at - since + 1:
                            since = at - ran
                        found.append(Span(experiment_id=experiment_id, phase="training", start=since, end=at,
                                          lane=str(event.get("where") or "training")))
            elif kind == "verification":
                seconds = event.get("verify_s")
                if isinstance(seconds, int | float) and seconds >= 0:
                    found.append(Span(experiment_id=experiment_id, phase="verifying", start=at - seconds, end=at,
                                      lane="verifying"))
    return sorted(found, key=lambda s: s.start)


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if start > reach or end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def time_went(found: list[Span], events_by_id: dict[str, list[dict]]) -> TimeWent | None:
    stamps = [at for events in events_by_id.values() for e in events if (at := _stamp(e)) is not None]
    if not stamps:
        return None
    wall = max(stamps) - min(stamps)
    phases = {phase: union_seconds([(s.start, s.end) for s in found if s.phase == phase]) for phase in PHASES}
    busy = union_seconds([(s.start, s.end) for s in found])
    return TimeWent(wall_s=wall, phases=phases, idle_s=max(0.0, wall - busy))


def timeline_png(found: list[Span]) -> bytes | None:
    """One lane per training slot, one for proposing and one for verifying; each training bar names its
    experiment. None without spans."""
    if not found:
        return None
    from agent.report.plot import plt, png_bytes  # matplotlib only for the page, never for `status`

    origin = min(s.start for s in found)
    slots = sorted({s.lane for s in found if s.phase == "training"})
    lanes = ["proposing", *slots, "verifying"]
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.45 * len(lanes)), dpi=110)
    for row, lane in enumerate(lanes):
        for s in (s for s in found if s.lane == lane):
            left, width = (s.start - origin) / 60, max((s.end - s.start) / 60, 0.02)
            ax.barh(row, width, left=left, height=0.6, color=COLOURS[s.phase], alpha=0.55 if s.phase != "training"
                    else 0.8, edgecolor="white", linewidth=0.5)
            if s.phase == "training":
                ax.text(left + width / 2, row, s.experiment_id, ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("minutes since the night's first event")
    ax.grid(axis="x", alpha=0.25)
    return png_bytes(fig, integer_x=False)
