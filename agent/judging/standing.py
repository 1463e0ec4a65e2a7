"""The best as one decision sees it, computed once per decision."""

from __future__ import annotations

from dataclasses import dataclass

from agent.recording.history import History
from agent.recording.record import ExperimentRecord


@dataclass(frozen=True)
class Standing:
    best: ExperimentRecord | None   # what the candidate is judged against (None: it is the baseline)
    best_runs: list[float]          # every run of the best's commit, its noise and control runs included
    sigma: float | None             # of the latest noise floor
    best_ever: float | None         # the lowest mean any best commit reached
    sigma_df: int | None = None     # its degrees of freedom: the floor's runs - 1

    @classmethod
    def of(cls, history: History, best: ExperimentRecord | None) -> Standing:
        return cls(best=best, best_runs=history.runs_of(best.commit) if best else [], sigma=history.sigma(),
                   best_ever=history.best_ever_mean(), sigma_df=history.sigma_df())
