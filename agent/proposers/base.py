"""The one small interface every proposer implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from agent.edits import Edit
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


@dataclass
class Proposal:
    description: str
    edits: list[Edit]
    meta: dict = field(default_factory=dict)
    usage: dict = field(default_factory=dict)  # LLM tokens and cost spent on it (see agent.llm.types.Usage)


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
