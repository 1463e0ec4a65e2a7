"""Obtaining the proposal for an experiment: the baseline's, or one made against the best while
other experiments are in flight (told what they are), re-applied to a newer best when one was
kept meanwhile. Every proposal's edits are applied and policy-checked once against the train.py
they are for, and the checked source travels with the proposal (Proposal.checked_against).

Each change is claimed when its proposal is accepted, so that no two experiments run the same one. It is
refused when its edits equal those of a change in flight (after normalising whitespace; whatever its parent,
since changes in flight are re-applied on the best), or when train.py after it equals, whitespace aside, a
change already tried on the same parent. A claim is dropped once its experiment is recorded (the ledger then
says it was tried) or when its proposal will not run."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from agent.llm.types import ProviderFatal, ProviderUnavailable, Usage
from agent.proposers.base import Proposal, ProposalContext, Proposer, ProposerError, Running
from agent.proposers.edits import Edit, EditRejected
from agent.proposers.night_facts import NightFacts
from agent.recording.ledger import Ledger
from agent.recording.proposal_failures import FailedProposal, record_failure
from agent.recording.record import ExperimentRecord, ExperimentStatus
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


def normalised(text: str) -> str:
    return " ".join(text.split())


def source_key(source: str) -> str:
    return hashlib.sha256(normalised(source).encode()).hexdigest()


@dataclass(frozen=True)
class Claim:
    experiment_id: str
    parent: str
    source: str      # source_key of train.py after the change
    edits: tuple     # the change's (old_string, new_string) pairs, normalised and sorted


class Claims:
    def __init__(self, records: Callable[[], list[ExperimentRecord]], source_at: Callable[[str], str]):
        self._records, self._source_at = records, source_at
        self._lock = threading.Lock()
        self._open: dict[str, Claim] = {}
        self._tried: dict[str, str] = {}  # commit -> source_key of its train.py

    def claim(self, experiment_id: str, parent: str, source: str, edits: list[Edit]) -> str | None:
        """Claims the change for experiment_id; if another has it, why it is refused (and nothing is claimed)."""
        wanted = Claim(experiment_id, parent, source_key(source),
                       tuple(sorted((normalised(e.old_string), normalised(e.new_string)) for e in edits)))
        with self._lock:
            if (why := self._taken(wanted)) is None:
                self._open[experiment_id] = wanted
            return why

    def drop(self, experiment_id: str) -> None:
        with self._lock:
            self._open.pop(experiment_id, None)

    def _taken(self, wanted: Claim) -> str | None:
        for other in self._open.values():
            if other.experiment_id != wanted.experiment_id and (
                    other.edits == wanted.edits or (other.parent == wanted.parent and other.source == wanted.source)):
                return (f"experiment {other.experiment_id}, in flight now, makes this same change; propose a "
                        "different one")
        for record in self._records():
            if record.parent == wanted.parent and record.commit != record.parent and record.is_experiment \
                    and self._tried_source(record.commit) == wanted.source:
                return (f"experiment {record.id} already tried this same change on this parent ({record.status.value}"
                        + (f", val_bpb {record.val_bpb:.6f}" if record.val_bpb is not None else "")
                        + "); propose a different one")
        return None

    def _tried_source(self, commit: str) -> str | None:
        if commit not in self._tried:
            try:
                self._tried[commit] = source_key(self._source_at(commit))
            except Exception:  # noqa: BLE001 - a commit the repository no longer has is simply not compared
                self._tried[commit] = ""
        return self._tried[commit]


class Proposing:
    def __init__(self, workspace: Workspace, ledger: Ledger, proposer: Proposer, proposer_lock=None,
                 repository_lock=None):
        self.workspace, self.ledger, self.proposer = workspace, ledger, proposer
        self.proposer_lock = proposer_lock or threading.RLock()  # the loop's, shared by its threads
        self.repository_lock = repository_lock or threading.RLock()
        self.claims = Claims(lambda: list(self.ledger.records), self._train_source_at)

    def _train_source_at(self, commit: str) -> str:
        with self.repository_lock:
            return self.workspace.file_at("train.py", commit)

    def baseline(self, train_source: str, transcript: Transcript) -> Proposal:
        transcript.event("proposal", proposer="baseline", description="baseline: train.py as created", edits=[])
        return Proposal("baseline", [], source=train_source, applied_to=train_source)

    def propose(self, experiment_id: str, best: ExperimentRecord, train_source: str, program: Program,
                transcript: Transcript, facts: NightFacts, running: list[Running], spend: Usage) -> Proposal:
        """A fresh proposal against the best (train_source), checked against it, told which experiments are in
        flight; spend: what it spends, as it spends it."""
        context = self.context(experiment_id, best, program, train_source, facts, running)
        context.spend = spend
        transcript.event("proposal_started", proposer=self.proposer.name, parent=best.commit, program=program.name,
                         program_sha256=program.sha256, while_running=[r.id for r in running])
        return self.validated(context, transcript)

    def reapplied(self, experiment_id: str, proposal: Proposal, best: ExperimentRecord, train_source: str,
                  transcript: Transcript) -> bool:
        """Whether the proposal applies to a best that moved since it was made (then it is checked against it); if
        not, it is recorded as a failed proposal: tell the proposer (told_unused) and propose again."""
        try:
            proposal.checked_against(train_source)
        except EditRejected as err:
            transcript.event("rebase_failed", onto=best.commit, message=str(err))
            record_failure(self.workspace.dir, FailedProposal(
                experiment_id=experiment_id, kind="rejected", reason=f"no longer applies to the best: {err}",
                usage=proposal.usage))
            return False
        transcript.event("rebased", onto=best.commit)
        return True

    def told_unused(self, experiment_id: str, proposal: Proposal) -> None:
        self.claims.drop(experiment_id)
        with self.proposer_lock:
            self.proposer.observe(ExperimentRecord(id=experiment_id, status=ExperimentStatus.PENDING,
                                                   proposal=proposal.meta))

    def context(self, experiment_id: str, best: ExperimentRecord, program: Program, train_source: str,
                facts: NightFacts | None = None, running: list[Running] = ()) -> ProposalContext:
        return ProposalContext(track=self.workspace.track, program_name=program.name, program_text=program.text,
                               train_source=train_source, best=best, history=list(self.ledger.records),
                               experiment_id=experiment_id, running=list(running), facts=facts or NightFacts(),
                               claim=partial(self.claims.claim, experiment_id, best.commit))

    def validated(self, context: ProposalContext, transcript: Transcript) -> Proposal:
        """A proposal whose edits apply to context.train_source, pass the policy and make a change no other
        experiment has claimed. The caller holds its conversation's place."""
        try:
            proposal = self.proposer.propose(context, transcript)
        except (ProposerError, ProviderFatal, ProviderUnavailable):
            raise
        except Exception as err:  # noqa: BLE001 - a proposer's own fault costs its proposal, never the night
            raise ProposerError(f"{self.proposer.name} broke off ({type(err).__name__}: {err})") from err
        transcript.event("proposal", proposer=self.proposer.name, description=proposal.description,
                         edits=[vars(e) for e in proposal.edits], meta=proposal.meta, **proposal.research_fields())
        try:
            source = proposal.checked_against(context.train_source)
            if taken := context.claim(source, proposal.edits):
                raise EditRejected(f"refused: {taken}")
        except EditRejected as err:
            transcript.event("edit_rejected", message=str(err))
            err.usage = proposal.usage  # it was paid for: recorded with the failure, counted by the cost cap
            self.told_unused(context.experiment_id, proposal)
            raise
        return proposal

    def abandon(self, experiment_id: str, proposal: Proposal | None, transcript: Transcript, why: str) -> None:
        """Drops a proposal that will not run; if it was made, it is recorded with its spend (it was paid for)."""
        transcript.event("proposal_abandoned", reason=why)
        self.claims.drop(experiment_id)
        if proposal is not None:
            record_failure(self.workspace.dir, FailedProposal(experiment_id=experiment_id, kind="abandoned",
                                                              reason=why, usage=proposal.usage))
