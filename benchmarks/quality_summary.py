"""The nights of each proposer summed up (mean and sd over seeds), and whether the research goals hold:
no noise keeps, a held-out gain of at least RETENTION_GOAL of the searched one, TPE ahead of the random control."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from pydantic import BaseModel

from benchmarks.night_quality import NightQuality

RETENTION_GOAL = 0.9


class Spread(BaseModel):
    mean: float
    sd: float
    n: int

    def show(self, fmt: str = ".4f") -> str:
        unsigned = fmt.lstrip("+ ")
        return f"{self.mean:{fmt}} ± {self.sd:{unsigned}}" if self.n > 1 else f"{self.mean:{fmt}}"


def spread(values: list[float]) -> Spread | None:
    """Mean and sample sd of the values; None when there are none."""
    if not values:
        return None
    return Spread(mean=statistics.fmean(values), sd=statistics.stdev(values) if len(values) > 1 else 0.0,
                  n=len(values))


class ProposerSummary(BaseModel):
    proposer: str
    nights: int
    gain: Spread
    keeps: Spread
    keep_rate: Spread | None
    noise_keeps: Spread
    retention: Spread | None       # over the nights that gained
    experiments_per_hour: Spread
    night_s: Spread


def summarize(nights: list[NightQuality]) -> list[ProposerSummary]:
    """One summary per proposer, in the order the nights ran."""
    proposers = list(dict.fromkeys(night.proposer for night in nights))
    summaries = []
    for proposer in proposers:
        own = [night for night in nights if night.proposer == proposer]

        def over(value: Callable[[NightQuality], float | None], own=own) -> Spread | None:
            return spread([v for v in map(value, own) if v is not None])

        summaries.append(ProposerSummary(
            proposer=proposer, nights=len(own), gain=over(lambda n: n.gain), keeps=over(lambda n: n.keeps),
            keep_rate=over(lambda n: n.keep_rate), noise_keeps=over(lambda n: n.noise_keeps),
            retention=over(lambda n: n.retention), experiments_per_hour=over(lambda n: n.experiments_per_hour),
            night_s=over(lambda n: n.night_s)))
    return summaries


class Goal(BaseModel):
    name: str
    holds: bool | None   # None: not measured by these nights
    detail: str


def goals(nights: list[NightQuality], failed_nights: int = 0) -> list[Goal]:
    summaries = {summary.proposer: summary for summary in summarize(nights)}
    noise = sum(night.noise_keeps for night in nights)
    found = [Goal(name="every night measured", holds=failed_nights == 0,
                  detail=f"{failed_nights} night(s) failed" if failed_nights else f"{len(nights)} night(s)"),
             Goal(name="0 noise keeps", holds=noise == 0 if nights else None,
                  detail=f"{noise} noise keep(s) in {sum(night.keeps for night in nights)} keep(s)")]
    retained = {name: s.retention for name, s in summaries.items() if s.retention is not None}
    found.append(Goal(
        name=f"holdout retention >= {RETENTION_GOAL:.0%}",
        holds=all(r.mean >= RETENTION_GOAL for r in retained.values()) if retained else None,
        detail=", ".join(f"{name} {r.mean:.0%}" for name, r in retained.items()) or "no night gained anything"))
    found.append(ahead("optuna", "random", nights))
    return found


ALPHA, POWER = 0.05, 0.8  # one-sided 5%, and the power at which the detectable difference is stated


def ahead(treatment: str, control: str, nights: list[NightQuality]) -> Goal:
    """Whether treatment's nights gained more than control's, by Welch's one-sided t-test at ALPHA: never on a
    difference of means alone. The detail says p and the smallest difference these nights could detect."""
    name = "TPE ahead of random"
    gains = {who: [n.gain for n in nights if n.proposer == who] for who in (treatment, control)}
    if min(len(values) for values in gains.values()) < 2:
        said = ", ".join(f"{who} {len(values)}" for who, values in gains.items())
        return Goal(name=name, holds=None, detail=f"needs 2 nights or more of each for a test ({said})")
    from scipy.stats import t, ttest_ind
    first, second = gains[treatment], gains[control]
    p = float(ttest_ind(first, second, equal_var=False, alternative="greater").pvalue)
    parts = [statistics.variance(first) / len(first), statistics.variance(second) / len(second)]
    se = sum(parts) ** 0.5
    df = sum(parts) ** 2 / sum(part ** 2 / (len(values) - 1) for part, values in zip(parts, (first, second),
                                                                                       strict=True)) if se else 1
    detectable = (t.ppf(1 - ALPHA, df) + t.ppf(POWER, df)) * se  # Welch's degrees of freedom, not the normal's
    detail = (f"mean gain {statistics.fmean(first):+.5f} vs {statistics.fmean(second):+.5f} over "
              f"{len(first)}+{len(second)} nights, Welch's t one-sided p {p:.2g}; these nights detect about "
              f"{detectable:.5f} at {POWER:.0%} power")
    return Goal(name=name, holds=p < ALPHA, detail=detail if p < ALPHA else f"not shown: {detail}")


def verdict(found: list[Goal]) -> str:
    """One line: whether the goals hold, each goal with its numbers."""
    word = {True: "holds", False: "FAILS", None: "not measured"}
    overall = ("the goals hold" if all(g.holds for g in found)
               else "the goals do not hold" if any(g.holds is False for g in found)
               else "the goals are not all measured")
    return overall + ": " + "; ".join(f"{g.name} {word[g.holds]} ({g.detail})" for g in found)
