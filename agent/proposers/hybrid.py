"""Hybrid: Optuna tunes the numeric hyperparameters on a share of the experiments, the LLM
proposes code changes on the rest. The share is kept over the run's whole history."""

from __future__ import annotations

from agent.proposers.base import Crashed, Proposal, ProposalContext, ProposerError
from agent.recording.record import ExperimentRecord
from agent.recording.transcript import Transcript


class HybridProposer:
    name = "hybrid"

    def __init__(self, llm, optuna, optuna_share: float = 0.3):
        if not 0.0 <= optuna_share <= 1.0:
            raise ValueError(f"the Optuna share must be between 0 and 1, got {optuna_share}")
        self.by_name = {llm.name: llm, optuna.name: optuna}
        self.llm, self.optuna, self.share = llm, optuna, optuna_share

    def propose(self, context: ProposalContext, transcript: Transcript) -> Proposal:
        proposed = [r.proposer for r in context.history if r.proposer in self.by_name]
        proposed += [r.proposer for r in context.running if r.proposer in self.by_name]  # proposed, still training
        by_optuna = proposed.count(self.optuna.name)
        chosen = self.optuna if by_optuna < self.share * (len(proposed) + 1) else self.llm
        transcript.event("reasoning", text=f"hybrid: {by_optuna} of {len(proposed)} proposals so far came from "
                                           f"Optuna (share {self.share:.0%}); this one goes to {chosen.name}")
        proposal = chosen.propose(context, transcript)
        proposal.meta["proposer"] = chosen.name
        return proposal

    def fix(self, crashed: Crashed, crashed_source: str, transcript: Transcript) -> Proposal:
        owner = self.by_name.get(crashed.proposer or "")
        if not hasattr(owner, "fix"):
            raise ProposerError(f"{crashed.proposer} does not fix crashes")
        return owner.fix(crashed, crashed_source, transcript)

    def observe(self, experiment_id: str, proposal_meta: dict, record: ExperimentRecord | None) -> None:
        owner = self.by_name.get(proposal_meta.get("proposer", ""))
        if owner is not None:
            owner.observe(experiment_id, proposal_meta, record)
