"""What a proposer is told about the night itself: the budget left and the keep rule."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from agent.judging.keep_rule import KeepRule
from agent.settings import LoopSettings


class NightFacts(BaseModel):
    model_config = ConfigDict(frozen=True)
    experiments_left: int | None = None   # None: no limit
    hours_left: float | None = None
    usd_left: float | None = None
    usd_spent: float = 0.0
    usd_counts: str = "LLM spend"         # what the spend counts: GPU time too where a GPU price was given
    keep_rule: KeepRule = KeepRule()

    @classmethod
    def of(cls, settings: LoopSettings, done: int = 0, hours_used: float = 0.0, spent_usd: float = 0.0) -> NightFacts:
        return cls(
            experiments_left=None if settings.max_experiments is None else max(0, settings.max_experiments - done),
            hours_left=None if settings.max_hours is None else max(0.0, settings.max_hours - hours_used),
            usd_left=None if settings.max_cost_usd is None else max(0.0, settings.max_cost_usd - spent_usd),
            usd_spent=spent_usd, usd_counts="LLM spend and GPU time" if settings.gpu_usd_per_hour else "LLM spend",
            keep_rule=KeepRule.of(settings))

    def budget_line(self) -> str:
        parts = [f"{self.experiments_left} experiment(s) including this one" if self.experiments_left is not None
                 else "no limit on experiments",
                 f"{self.hours_left:.1f} h" if self.hours_left is not None else "no time limit",
                 f"${self.usd_left:.2f} of {self.usd_counts} (${self.usd_spent:.2f} spent)" if self.usd_left is not None
                 else f"no cost cap (${self.usd_spent:.2f} spent)"]
        return "Budget left: " + ", ".join(parts) + "."
