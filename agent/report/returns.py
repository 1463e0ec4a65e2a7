"""What each keep cost and what more of the night would buy.

A keep's cost is what the night spent since the keep before it (device-hours of every run landed in between, LLM
dollars of every proposal) over what it moved the best's val_bpb. The projection fits the night's running gain
against the device-hours spent after the baseline with a saturating curve, gain(h) = a * (1 - exp(-h / tau)): least
squares over the running gain after every landed experiment. Searches like this one buy most of their gain early,
and the curve says how far the night was from its ceiling a; with fewer than MIN_KEEPS keeps there is no curve to
fit and it says so.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel
from scipy.optimize import curve_fit

from agent.recording.gpu_cost import gpu_hours
from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.report.summary import commit_mean

MIN_KEEPS = 3
MODEL = ("gain(h) = a * (1 - exp(-h / tau)), h the device-hours after the baseline, least squares over the running "
         "gain after every landed experiment")


class KeepCost(BaseModel):
    id: str
    moved: float                  # how far it moved the best's val_bpb (the running best before it, less its own)
    gain_so_far: float            # the baseline's val_bpb less the best's after it
    device_hours: float           # spent by the night up to it
    usd: float                    # LLM dollars up to it
    device_hours_since: float     # spent since the keep before it
    usd_since: float

    @property
    def device_hours_per_gain(self) -> float | None:
        return self.device_hours_since / self.moved if self.moved > 0 else None


class Projection(BaseModel):
    ceiling: float                # a: the gain the curve levels off at
    tau_hours: float
    hours: float                  # the device-hours the night spent after its baseline
    next_as_long: float           # what as many device-hours again would add, by the curve


class Returns(BaseModel):
    keeps: list[KeepCost]
    projection: Projection | None
    why_not: str = ""             # why there is no projection


def _saturating(hours, ceiling, tau):
    return ceiling * (1.0 - np.exp(-hours / tau))


def returns(records: list[ExperimentRecord]) -> Returns:
    """Each keep's val_bpb is its commit's mean over all its runs (its noise floor's and controls' included), as the
    headline's baseline and best are."""
    baseline = next((commit_mean(records, r) for r in records
                     if r.status == ExperimentStatus.KEEP and r.val_bpb is not None), None)
    keeps, points, best, start = [], [], baseline, None
    last_hours = last_usd = 0.0
    for i, record in enumerate(records):
        landed = records[: i + 1]
        hours, usd = gpu_hours(landed), sum(r.llm.cost_usd for r in landed)
        is_keep = record.status == ExperimentStatus.KEEP and record.val_bpb is not None and best is not None
        if is_keep and (mean := commit_mean(records, record)) < best and record.proposer != "baseline":
            keeps.append(KeepCost(id=record.id, moved=best - mean, gain_so_far=baseline - mean,
                                  device_hours=hours, usd=usd, device_hours_since=hours - last_hours,
                                  usd_since=usd - last_usd))
            best, last_hours, last_usd = mean, hours, usd
        if baseline is not None:
            start = hours if start is None else start   # the curve starts where the baseline landed, at no gain
            points.append((hours - start, baseline - best))
    return Returns(keeps=keeps, **_projection(keeps, points))


def _projection(keeps: list[KeepCost], points: list[tuple[float, float]]) -> dict:
    if len(keeps) < MIN_KEEPS:
        return {"projection": None, "why_not": f"{len(keeps)} keep(s): a curve needs {MIN_KEEPS} or more to fit"}
    hours, gains = np.array([h for h, _ in points]), np.array([g for _, g in points])
    total = float(hours[-1])
    try:
        (ceiling, tau), _ = curve_fit(_saturating, hours, gains, p0=(float(gains.max()) * 1.2, total / 2 or 1.0),
                                      bounds=([0.0, 1e-6], [np.inf, np.inf]), maxfev=5000)
    except (RuntimeError, ValueError) as error:
        return {"projection": None, "why_not": f"the curve did not fit: {error}"}
    if not (math.isfinite(ceiling) and math.isfinite(tau)):
        return {"projection": None, "why_not": "the curve did not fit: no finite solution"}
    more = float(_saturating(2 * total, ceiling, tau) - _saturating(total, ceiling, tau))
    return {"projection": Projection(ceiling=float(ceiling), tau_hours=float(tau), hours=total, next_as_long=more)}
