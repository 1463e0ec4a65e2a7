"""Hybrid: Optuna tunes the numeric hyperparameters on a share of the experiments (re-tuning them around
each new best, agent/proposers/optuna_search.py), the LLM proposes code changes on the rest: it is told so,
and a submission of its that only changes hyperparameter values is refused back to it. The share is kept
over the run's whole history, the proposals in flight and those being made at the same moment in other
conversations."""

from __future__ import annotations

import threading
from dataclasses import replace

from agent.proposers.base import Crashed, Proposal, ProposalContext
from agent.recording.record import ExperimentRecord
from agent.recording.transcript import Transcript


class HybridProposer:
    name = "hybrid"

    def __init__(self, llm, optuna, optuna_share: float = 0.3):
        if not 0.0 <= optuna_share <= 1.0:
            raise ValueError(f"the Optuna share must be between 0 and 1, got {optuna_share}")
        self.by_name = {llm.name: llm, optuna.name: optuna}
        self.llm, self.optuna, self.share = llm, optuna, optuna_share
        self._choosing = threading.Lock()
        self._open: dict[str, str] = {}  # experiment being proposed -> the proposer it went to

    def propose(self, context: ProposalContext, transcript: Transcript) -> Proposal:
        if (chosen := self._choose(context, transcript)) is self.llm:
            context = replace(context, code_only=True)  # Optuna owns the values: the LLM proposes code
        try:
            proposal = chosen.propose(context, transcript)
        finally:
            with self._choosing:
                self._open.pop(context.experiment_id, None)
        proposal.meta["proposer"] = chosen.name
        return proposal

    def _choose(self, context: ProposalContext, transcript: Transcript):
        with self._choosing:
            proposed = [r.proposer for r in context.history if r.proposer in self.by_name]
            proposed += [r.proposer for r in context.running if r.proposer in self.by_name]  # still training
            proposed += list(self._open.values())  # being proposed in other conversations now
            by_optuna = proposed.count(self.optuna.name)
            chosen = self.optuna if by_optuna < self.share * (len(proposed) + 1) else self.llm
            self._open[context.experiment_id] = chosen.name
        transcript.event("reasoning", text=f"hybrid: {by_optuna} of {len(proposed)} proposals so far came from "
                                           f"Optuna (share {self.share:.0%}); this one goes to {chosen.name}")
        return chosen

    def fix(self, crashed: Crashed, crashed_source: str, transcript: Transcript) -> Proposal | None:
        owner = self.by_name.get(crashed.proposer or "")
        return owner.fix(crashed, crashed_source, transcript) if owner is not None else None

    def observe(self, record: ExperimentRecord) -> None:
        if (owner := self.by_name.get(record.proposal.get("proposer", ""))) is not None:
            owner.observe(record)
