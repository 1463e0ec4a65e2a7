"""Obtaining the proposal for an experiment: the baseline's, or one made against the best while
other experiments are in flight (told what they are), re-applied to a newer best when one was
kept meanwhile. Every proposal's edits are applied and policy-checked once against the train.py
they are for, and the checked source travels with the proposal (Proposal.checked_against).
Proposers are asked and told by one thread at a time (the loop's proposer lock)."""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from agent.llm.types import ProviderFatal, ProviderUnavailable
from agent.proposers.base import Proposal, ProposalContext, Proposer, ProposerError, Running
from agent.proposers.edits import EditRejected
from agent.proposers.night_facts import NightFacts
from agent.recording.ledger import Ledger
from agent.recording.proposal_failures import FailedProposal, record_failure
from agent.recording.record import ExperimentRecord
from agent.recording.transcript import Transcript
from agent.workspace import Workspace


@dataclass(frozen=True)
class Program:
    name: str
    path: str
    text: str
    sha256: str


def read_program(workspace: Workspace) -> Program:
    """The research program, re-read before every experiment so that swapping it takes effect."""
    path = Path(workspace.settings["program"])
    text = path.read_text() if path.exists() else ""
    return Program(path.stem, str(path), text, hashlib.sha256(text.encode()).hexdigest())


@dataclass
class Obtained:
    proposal: Proposal
    source: str                    # train.py with the proposal's edits, checked
    base_commit: str | None        # the commit it was proposed against (None: the baseline)
    rebased: bool = False
    propose_seconds: float = 0.0   # how long the proposer worked on it
    wait_seconds: float = 0.0      # how long the experiment's training slot waited for it (the critical path)


class Proposing:
    def __init__(self, workspace: Workspace, ledger: Ledger, proposer: Proposer, proposer_lock=None):
        self.workspace, self.ledger, self.proposer = workspace, ledger, proposer
        self.proposer_lock = proposer_lock or threading.RLock()  # the loop's, shared by its threads

    def baseline(self, train_source: str, transcript: Transcript) -> Obtained:
        transcript.event("proposal", proposer="baseline", description="baseline: train.py as created", edits=[])
        return Obtained(Proposal("baseline", []), train_source, None)

    def propose(self, experiment_id: str, best: ExperimentRecord, train_source: str, program: Program,
                transcript: Transcript, facts: NightFacts, running: list[Running]) -> Obtained:
        """A fresh proposal against the best (train_source), told which experiments are in flight."""
        context = self.context(experiment_id, best, program, train_source, facts, running)
        transcript.event("proposal_started", proposer=self.proposer.name, parent=best.commit, program=program.name,
                         program_sha256=program.sha256, while_running=[r.id for r in running])
        proposal, seconds = self.validated(context, transcript)
        return Obtained(proposal, proposal.checked_against(train_source), best.commit, propose_seconds=seconds)

    def reapplied(self, experiment_id: str, obtained: Obtained, best: ExperimentRecord, train_source: str,
                  transcript: Transcript) -> Obtained | None:
        """The proposal on a best that moved since it was made; None (recorded as a failed proposal) when its
        edits no longer apply there: then tell the proposer (told_unused) and propose again."""
        try:
            source = obtained.proposal.checked_against(train_source)
        except EditRejected as err:
            transcript.event("rebase_failed", onto=best.commit, message=str(err))
            record_failure(self.workspace.dir, FailedProposal(
                experiment_id=experiment_id, kind="rejected", reason=f"no longer applies to the best: {err}",
                usage=obtained.proposal.usage))
            return None
        transcript.event("rebased", onto=best.commit, proposed_against=obtained.base_commit)
        return Obtained(obtained.proposal, source, obtained.base_commit, True, obtained.propose_seconds,
                        obtained.wait_seconds)

    def told_unused(self, experiment_id: str, obtained: Obtained) -> None:
        with self.proposer_lock:
            self.proposer.observe(experiment_id, obtained.proposal.meta, None)

    def context(self, experiment_id: str, best: ExperimentRecord, program: Program, train_source: str,
                facts: NightFacts | None = None, running: list[Running] = ()) -> ProposalContext:
        return ProposalContext(track=self.workspace.track, program_name=program.name, program_text=program.text,
                               train_source=train_source, best=best, history=list(self.ledger.records),
                               experiment_id=experiment_id, running=list(running), facts=facts or NightFacts())

    def validated(self, context: ProposalContext, transcript: Transcript) -> tuple[Proposal, float]:
        """A proposal whose edits apply to context.train_source and pass the policy, and the seconds it took."""
        with self.proposer_lock:
            started = time.monotonic()
            try:
                proposal = self.proposer.propose(context, transcript)
            except (ProposerError, ProviderFatal, ProviderUnavailable):
                raise
            except Exception as err:  # noqa: BLE001 - a proposer's own fault costs its proposal, never the night
                raise ProposerError(f"{self.proposer.name} broke off ({type(err).__name__}: {err})") from err
            seconds = time.monotonic() - started
            transcript.event("proposal", proposer=self.proposer.name, description=proposal.description,
                             edits=[vars(e) for e in proposal.edits], meta=proposal.meta, **proposal.research_fields())
            try:
                proposal.checked_against(context.train_source)
            except EditRejected as err:
                transcript.event("edit_rejected", message=str(err))
                self.proposer.observe(context.experiment_id, proposal.meta, None)
                raise
        return proposal, seconds

    def abandon(self, experiment_id: str, obtained: Obtained | None, transcript: Transcript, why: str) -> None:
        """Drops a proposal that will not run; if it was made, it is recorded with its spend (it was paid for)."""
        transcript.event("proposal_abandoned", reason=why)
        if obtained is not None and obtained.base_commit is not None:
            record_failure(self.workspace.dir, FailedProposal(experiment_id=experiment_id, kind="abandoned",
                                                              reason=why, usage=obtained.proposal.usage))
