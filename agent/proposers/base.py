"""The one small interface every proposer implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from agent.edits import Edit
from agent.night_facts import NightFacts
from agent.transcript import Transcript


@dataclass
class ProposalContext:
    track: dict                 # the workspace's track.json
    program_name: str
    program_text: str
    train_source: str           # train.py at the best commit
    best: dict                  # the ledger record of the best experiment
    history: list[dict]         # every ledger record so far, oldest first
    experiment_id: str
    running: dict | None = None  # the experiment training while this one is proposed (its result unknown)
    facts: NightFacts = field(default_factory=NightFacts)  # budget left and the keep rule's settings


@dataclass
class Proposal:
    description: str
    edits: list[Edit]
    meta: dict = field(default_factory=dict)
    usage: dict = field(default_factory=dict)  # LLM tokens and cost spent on it (see agent.llm.types.Usage)
    hypothesis: str = ""       # why the change should help
    expected: str = ""         # the predicted effect, e.g. "val_bpb -0.003, step time +5%"
    lesson: str = ""           # what the result of experiment lesson_for says
    lesson_for: str | None = None

    def research_fields(self) -> dict:
        """What the ledger record keeps of the proposal's reasoning."""
        return dict(hypothesis=self.hypothesis, expected=self.expected, lesson=self.lesson,
                    lesson_for=self.lesson_for)


class ProposerError(Exception):
    """The proposer could not produce an experiment; the loop records it and goes on or stops.
    usage: the LLM tokens and cost the failed attempt spent (they count towards the cost cap)."""

    def __init__(self, message: str, usage: dict | None = None):
        super().__init__(message)
        self.usage = usage or {}


class Proposer(Protocol):
    name: str

    def propose(self, context: ProposalContext, transcript: Transcript) -> Proposal:
        """One experiment against context.best; reasoning and tool use go to the transcript."""

    def observe(self, record: dict) -> None:
        """The ledger record of an experiment this proposer proposed, once it is decided."""


class FixingProposer(Proposer, Protocol):
    def fix(self, crashed: dict, crashed_source: str, transcript: Transcript) -> Proposal:
        """A fix for a fixable crash of the change it just proposed (edits apply to crashed_source)."""
