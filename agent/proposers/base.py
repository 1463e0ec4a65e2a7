"""The one small interface every proposer implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from agent.llm.types import Usage
from agent.proposers.edits import Edit
from agent.proposers.night_facts import NightFacts
from agent.proposers.policy import checked_source
from agent.recording.record import ExperimentRecord
from agent.recording.transcript import Transcript
from trainer.tracks.spec import FrozenTrack


@dataclass(frozen=True)
class Running:
    """An experiment in flight while another is proposed (its result unknown)."""
    id: str
    description: str
    proposer: str | None
    hypothesis: str = ""


@dataclass
class ProposalContext:
    track: FrozenTrack  # the workspace's frozen track.json
    program_name: str
    program_text: str
    train_source: str           # train.py at the best commit
    best: ExperimentRecord      # the ledger record of the best experiment
    history: list[ExperimentRecord]  # every ledger record so far, oldest first
    experiment_id: str
    running: list[Running] = field(default_factory=list)  # every other experiment in flight
    facts: NightFacts = field(default_factory=NightFacts)  # budget left and the keep rule's settings
    # claim(source, edits): claims the change for this experiment; why not, when another experiment has it
    claim: Callable[[str, list[Edit]], str | None] = lambda source, edits: None
    spend: Usage = field(default_factory=Usage)  # what the proposal has spent so far, while it is being made
    code_only: bool = False     # another proposer tunes the hyperparameter values: only code changes are taken


@dataclass
class Proposal:
    description: str
    edits: list[Edit]
    meta: dict = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)  # LLM tokens and cost spent on it
    hypothesis: str = ""       # why the change should help
    expected: str = ""         # the predicted effect, e.g. "val_bpb -0.003, step time +5%"
    lesson: str = ""           # what the result of experiment lesson_for says
    lesson_for: str | None = None
    # train.py after the edits and the source they were applied to, once checked (agent.proposers.policy.checked_source)
    source: str | None = None
    applied_to: str | None = None

    def checked_against(self, parent: str) -> str:
        """train.py after the edits on parent, applied and policy-checked once per parent."""
        if self.source is None or self.applied_to != parent:
            self.source, self.applied_to = checked_source(parent, self.edits), parent
        return self.source

    def research_fields(self) -> dict:
        """What the ledger record and the transcript keep of the proposal's reasoning."""
        return dict(hypothesis=self.hypothesis, expected=self.expected, lesson=self.lesson,
                    lesson_for=self.lesson_for)


@dataclass(frozen=True)
class Crashed:
    """A fixable crash of the change a proposer just proposed."""
    id: str
    triage: str
    reason: str
    log_tail: str
    proposer: str | None


class ProposerError(Exception):
    """The proposer could not produce an experiment; the loop records it and goes on or stops.
    usage: the LLM tokens and cost the failed attempt spent (they count towards the cost cap)."""

    def __init__(self, message: str, usage: Usage | None = None):
        super().__init__(message)
        self.usage = usage or Usage()


class Proposer(Protocol):
    """A proposer that subclasses it explicitly takes its defaults: fix fixes no crash, observe learns nothing."""

    name: str

    def propose(self, context: ProposalContext, transcript: Transcript) -> Proposal:
        """One experiment against context.best; reasoning and tool use go to the transcript."""

    def fix(self, crashed: Crashed, crashed_source: str, transcript: Transcript) -> Proposal | None:
        """A fix for a fixable crash of the change it just proposed, whose edits apply to crashed_source; None when
        it does not fix crashes (the crash stands)."""
        return None

    def observe(self, record: ExperimentRecord) -> None:
        """What became of a proposal of this proposer: its ledger record once decided, or a pending record of its
        id and proposal meta when it never ran (its edits no longer applied to the best, or failed the policy)."""
