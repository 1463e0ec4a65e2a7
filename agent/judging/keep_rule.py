"""The keep rule of agent/judging/noise.py in words, made from its settings (--keep-sigmas, --min-delta,
--noise-seeds), for everything that states it: what the model is told, the report. `run` keeps the
settings of its night in run.json, where the report reads them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from agent.settings import LoopSettings
from agent.workspace import Workspace

STORED_AS = "keep_rule"  # its key in run.json


class KeepRule(BaseModel):
    model_config = ConfigDict(frozen=True)
    keep_sigmas: float = LoopSettings.model_fields["keep_sigmas"].default
    min_delta: float = LoopSettings.model_fields["min_delta"].default
    noise_seeds: int = LoopSettings.model_fields["noise_seeds"].default

    @classmethod
    def of(cls, settings: LoopSettings) -> KeepRule:
        return cls(keep_sigmas=settings.keep_sigmas, min_delta=settings.min_delta, noise_seeds=settings.noise_seeds)

    def words(self) -> str:
        """The rule as one sentence without its final full stop."""
        if self.noise_seeds <= 0:
            return (f"no noise floor is measured, so a change is kept when its val_bpb beats the best by more than "
                    f"{self.min_delta:g}")
        return (f"after the baseline the best commit is re-run with {self.noise_seeds} other seed(s) to measure sigma, "
                f"the run-to-run noise (again every few keeps). A gain above {self.keep_sigmas:g} sigma is kept at "
                f"once; a smaller gain is re-run with another seed and kept only if the mean gain exceeds "
                f"{self.keep_sigmas:g} standard errors of the difference"
                + (f"; either way the gain must also exceed {self.min_delta:g}" if self.min_delta > 0 else ""))


def stored_keep_rule(workspace: Workspace) -> KeepRule:
    """The keep rule of the workspace's latest night (the defaults for a workspace no `run` recorded one in)."""
    return KeepRule.model_validate(workspace.settings.get(STORED_AS, {}))


def store_keep_rule(workspace: Workspace, rule: KeepRule) -> None:
    workspace.update_settings(**{STORED_AS: rule.model_dump()})
