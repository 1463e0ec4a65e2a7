"""Obtaining the proposal for an experiment: the baseline's, the one made ahead while the previous
experiment trained (re-applied to the best if the best moved), or a fresh one. Every proposal's
edits are applied and policy-checked once against the train.py they are for, and the checked
source travels with the proposal (Proposal.checked_against)."""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from agent.proposers.base import Proposal, ProposalContext, Proposer, Running
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
class Ahead:
    """A proposal being made in the background for the next experiment."""
    experiment_id: str
    base_commit: str
    future: Future
    transcript: Transcript


@dataclass
class Obtained:
    proposal: Proposal
    source: str                    # train.py with the proposal's edits, checked
    base_commit: str | None        # the commit it was proposed against (None: the baseline)
    rebased: bool = False
    propose_seconds: float = 0.0   # how long the proposer worked on it
    wait_seconds: float = 0.0      # how long the loop waited for it (the critical path)


class Proposing:
    def __init__(self, workspace: Workspace, ledger: Ledger, proposer: Proposer):
        self.workspace, self.ledger, self.proposer = workspace, ledger, proposer

    def obtain(self, experiment_id: str, best: ExperimentRecord | None, program: Program, transcript: Transcript,
               ahead: Ahead | None, facts: NightFacts) -> Obtained:
        """The baseline; or the proposal made ahead, re-applied to the best if the best moved; or a fresh one."""
        train_source = self.workspace.file_at("train.py")
        if best is None:
            transcript.event("proposal", proposer="baseline", description="baseline: train.py as created", edits=[])
            return Obtained(Proposal("baseline", []), train_source, None)
        if ahead is not None and ahead.experiment_id == experiment_id:
            obtained = self._made_ahead(ahead, best, train_source, transcript)
            if obtained is not None:
                return obtained
        started = time.monotonic()
        context = self.context(experiment_id, best, program, train_source, facts)
        transcript.event("proposal_started", proposer=self.proposer.name, parent=best.commit, program=program.name,
                         program_sha256=program.sha256)
        proposal, seconds = self.validated(context, transcript)
        return Obtained(proposal, proposal.checked_against(train_source), best.commit,
                        propose_seconds=seconds, wait_seconds=time.monotonic() - started)

    def _made_ahead(self, ahead: Ahead, best: ExperimentRecord, train_source: str,
                    transcript: Transcript) -> Obtained | None:
        waited = time.monotonic()
        proposal, seconds = ahead.future.result()  # its errors count against this experiment, as a serial one's would
        waited = time.monotonic() - waited
        rebased = ahead.base_commit != best.commit
        try:
            source = proposal.checked_against(train_source)  # checked already unless the best moved
        except EditRejected as err:
            transcript.event("rebase_failed", onto=best.commit, message=str(err))
            record_failure(self.workspace.dir, FailedProposal(
                experiment_id=ahead.experiment_id, kind="rejected", reason=f"no longer applies to the best: {err}",
                usage=proposal.usage))
            self.proposer.observe(ahead.experiment_id, proposal.meta, None)
            return None
        if rebased:
            transcript.event("rebased", onto=best.commit, proposed_against=ahead.base_commit)
        return Obtained(proposal, source, ahead.base_commit, rebased, seconds, waited)

    def context(self, experiment_id: str, best: ExperimentRecord, program: Program, train_source: str,
                facts: NightFacts | None = None, running: Running | None = None) -> ProposalContext:
        return ProposalContext(track=self.workspace.track, program_name=program.name, program_text=program.text,
                               train_source=train_source, best=best, history=list(self.ledger.records),
                               experiment_id=experiment_id, running=running, facts=facts or NightFacts())

    def validated(self, context: ProposalContext, transcript: Transcript) -> tuple[Proposal, float]:
        """A proposal whose edits apply to context.train_source and pass the policy, and the seconds it took."""
        started = time.monotonic()
        proposal = self.proposer.propose(context, transcript)
        transcript.event("proposal", proposer=self.proposer.name, description=proposal.description,
                         edits=[vars(e) for e in proposal.edits], meta=proposal.meta, **proposal.research_fields())
        try:
            proposal.checked_against(context.train_source)
        except EditRejected as err:
            transcript.event("edit_rejected", message=str(err))
            self.proposer.observe(context.experiment_id, proposal.meta, None)
            raise
        return proposal, time.monotonic() - started

    def look_ahead(self, best: ExperimentRecord, parent: str, running: Running, facts: NightFacts) -> Ahead:
        """Starts proposing the next experiment against the current best while `running` trains."""
        experiment_id = f"{int(running.id) + 1:04d}"
        program = read_program(self.workspace)
        context = self.context(experiment_id, best, program, self.workspace.file_at("train.py", parent), facts,
                               running)
        transcript = Transcript(self.workspace.dir / "transcripts" / f"{experiment_id}.jsonl")
        transcript.event("proposal_started", proposer=self.proposer.name, parent=parent, program=program.name,
                         program_sha256=program.sha256, while_running=running.id)
        future: Future = Future()

        def work() -> None:
            try:
                future.set_result(self.validated(context, transcript))
            except BaseException as err:  # handed to the loop with the result
                future.set_exception(err)

        threading.Thread(target=work, name=f"propose-{experiment_id}", daemon=True).start()
        return Ahead(experiment_id, parent, future, transcript)

    def abandon(self, ahead: Ahead | None, why: str) -> None:
        """Drops a proposal made ahead; if it was made, it is recorded with its spend (it was paid for)."""
        if ahead is None:
            return
        ahead.transcript.event("proposal_abandoned", reason=why)
        if ahead.future.done() and ahead.future.exception() is None:
            proposal, _ = ahead.future.result()
            record_failure(self.workspace.dir, FailedProposal(experiment_id=ahead.experiment_id, kind="abandoned",
                                                              reason=why, usage=proposal.usage))
