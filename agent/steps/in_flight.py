"""An experiment as it moves through the steps (agent/steps/experiment.py): its record, the draft every step
fills in (written to its in-flight marker once committed, decided at the end), and what only the loop needs."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from agent.judging.noise import Judgement
from agent.llm.types import Usage
from agent.proposers.base import Proposal, Running
from agent.proposers.night_facts import NightFacts
from agent.proposers.proposing import Program
from agent.recording.record import ExperimentRecord, ProgramRef
from agent.recording.transcript import Transcript
from agent.running.runner import RunResult
from agent.untrusted import bounded

PROPOSING, READY, TRAINING, JUDGING = "proposing", "ready", "training", "judging"


@dataclass
class Experiment:
    id: str
    transcript: Transcript
    program: Program
    clock: float                    # time.monotonic() at its start
    facts: NightFacts               # the budget left and the keep rule, as the proposer is told
    record: ExperimentRecord = field(init=False)  # the draft, made with it
    best: ExperimentRecord | None = None   # the best it is judged against (None: this is the baseline)
    phase: str = PROPOSING
    admitted: threading.Event = field(default_factory=threading.Event)  # it may train now
    admitted_at: float | None = None
    abandoned: str | None = None    # why it will never train (the loop stopped starting experiments)
    proposal: Proposal | None = None  # what it trains; its edits are re-applied when the best moves
    seed: int | None = None         # the seed of its runs (re-runs get fresh ones)
    result: RunResult | None = None  # its last run
    judgement: Judgement | None = None
    holds_slot_from: float | None = None  # time.monotonic() once it was both proposed and admitted

    def __post_init__(self):
        self.record = ExperimentRecord.draft(self.id, ProgramRef(name=self.program.name, sha256=self.program.sha256))

    @property
    def spend(self) -> Usage:
        """What its proposal and fixes have spent so far."""
        return self.record.llm

    @property
    def committed(self) -> bool:
        return bool(self.record.commit)

    def admit(self, why_not: str | None = None) -> None:
        self.abandoned, self.admitted_at = why_not, time.monotonic()
        self.admitted.set()

    def running(self) -> Running | None:
        """What a proposal made meanwhile is told about it."""
        if self.proposal is None and self.phase == PROPOSING and self.best is not None:
            return Running(self.id, "being proposed now, in a conversation of its own (its change is not known "
                                    "yet)", None)
        if self.proposal is None or self.best is None:
            return None
        return Running(self.id, bounded(self.proposal.description), self.proposal.meta.get("proposer"),
                       bounded(self.proposal.hypothesis))


