"""The numbers of a run, computed from its ledger records."""

from __future__ import annotations

import time
from dataclasses import dataclass


def parse_time(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z"))


@dataclass
class Headline:
    baseline: float | None
    best: float | None
    experiments: int
    keeps: int
    keep_rate: float
    crash_rates: dict[str, float]
    hours: float
    duty_cycle: float
    tokens: int
    cost_usd: float

    @property
    def gain(self) -> float:
        return (self.baseline - self.best) if self.baseline is not None and self.best is not None else 0.0

    @property
    def gain_percent(self) -> float:
        return 100 * self.gain / self.baseline if self.baseline else 0.0


def headline(records: list[dict]) -> Headline:
    proposed = [r for r in records if r.get("proposer") != "baseline"]
    keeps = [r for r in proposed if r["status"] == "keep"]
    baseline = next((r["val_bpb"] for r in records if r.get("proposer") == "baseline" and r["status"] == "keep"),
                    None)
    kept_values = [r["val_bpb"] for r in records if r["status"] == "keep"]
    crashes: dict[str, int] = {}
    for r in records:
        if r["status"] in ("crash", "interrupted"):
            crashes[r.get("triage", "crash")] = crashes.get(r.get("triage", "crash"), 0) + 1
    wall = (parse_time(records[-1]["finished"]) - parse_time(records[0]["started"])) if records else 0.0
    training = sum(_number((r.get("summary") or {}).get("training_seconds")) for r in records)
    usage = [r.get("llm") or {} for r in records]
    return Headline(
        baseline=baseline, best=min(kept_values) if kept_values else None, experiments=len(records),
        keeps=len(keeps), keep_rate=len(keeps) / len(proposed) if proposed else 0.0,
        crash_rates={k: v / len(records) for k, v in sorted(crashes.items())},
        hours=wall / 3600, duty_cycle=training / wall if wall > 0 else 0.0,
        tokens=sum(u.get("input_tokens", 0) + u.get("output_tokens", 0) for u in usage),
        cost_usd=sum(u.get("cost_usd", 0.0) for u in usage))


def gains_by_program(records: list[dict]) -> dict[str, tuple[int, int, float]]:
    """program -> (experiments, keeps, summed val_bpb gain of its keeps)."""
    out: dict[str, tuple[int, int, float]] = {}
    best = None
    for r in records:
        name = (r.get("program") or {}).get("name") or "?"
        count, kept, gain = out.get(name, (0, 0, 0.0))
        if r["status"] == "keep":
            if best is not None and r.get("proposer") != "baseline":
                kept, gain = kept + 1, gain + best - r["val_bpb"]
            best = r["val_bpb"]
        out[name] = (count + 1, kept, gain)
    return out


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0
