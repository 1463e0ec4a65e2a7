"""The numbers of a run, computed from its ledger records."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from agent.ledger import NOISE
from agent.noise import commit_runs, current_sigma


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
    sigma: float | None     # run-to-run sigma of val_bpb from the latest noise floor
    confirmed: int          # keeps decided on the mean of re-runs (close calls that held up)

    @property
    def gain(self) -> float:
        return (self.baseline - self.best) if self.baseline is not None and self.best is not None else 0.0

    @property
    def gain_percent(self) -> float:
        return 100 * self.gain / self.baseline if self.baseline else 0.0


def headline(records: list[dict]) -> Headline:
    experiments = [r for r in records if r["status"] != NOISE]
    proposed = [r for r in experiments if r.get("proposer") != "baseline"]
    keeps = [r for r in proposed if r["status"] == "keep"]
    kept = [r for r in experiments if r["status"] == "keep"]
    crashes: dict[str, int] = {}
    for r in experiments:
        if r["status"] in ("crash", "interrupted"):
            crashes[r.get("triage", "crash")] = crashes.get(r.get("triage", "crash"), 0) + 1
    wall = (parse_time(records[-1]["finished"]) - parse_time(records[0]["started"])) if records else 0.0
    usage = [r.get("llm") or {} for r in records]
    return Headline(
        baseline=commit_mean(records, kept[0]) if kept else None,
        best=commit_mean(records, kept[-1]) if kept else None, experiments=len(experiments),
        keeps=len(keeps), keep_rate=len(keeps) / len(proposed) if proposed else 0.0,
        crash_rates={k: v / len(experiments) for k, v in sorted(crashes.items())},
        hours=wall / 3600, duty_cycle=sum(map(training_seconds, records)) / wall if wall > 0 else 0.0,
        tokens=sum(u.get("input_tokens", 0) + u.get("output_tokens", 0) for u in usage),
        cost_usd=sum(u.get("cost_usd", 0.0) for u in usage), sigma=current_sigma(records),
        confirmed=sum(1 for r in keeps if len(r.get("runs") or []) > 1))


def commit_mean(records: list[dict], record: dict) -> float:
    """val_bpb of a kept commit: the mean of all its runs (its experiment's, and noise-floor re-runs)."""
    values = commit_runs(records, record["commit"])
    return statistics.fmean(values) if values else record["val_bpb"]


def training_seconds(record: dict) -> float:
    """Seconds the trainer spent training for this record, over all its runs."""
    runs = record.get("runs")
    if runs:
        return sum(_number(run.get("training_seconds")) for run in runs)
    return _number((record.get("summary") or {}).get("training_seconds"))


def gains_by_program(records: list[dict]) -> dict[str, tuple[int, int, float]]:
    """program -> (experiments, keeps, summed val_bpb gain of its keeps)."""
    out: dict[str, tuple[int, int, float]] = {}
    best = None
    for r in records:
        if r["status"] == NOISE:
            continue
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
