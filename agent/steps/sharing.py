"""What the threads of one loop share, and the locks that guard it.

Every experiment in flight runs its steps in a thread of its own. GitPython is not thread-safe and
the ledger, the notes and the in-flight markers are single files, so everything that touches them
holds `lock`. Up to `conversations.limit` proposals are made at once, never under `lock`, so the
workspace stays usable while a model thinks; with one at a time, proposers are also asked and told by
one thread at a time (`proposer_turn`). Would-be keeps land one at a time (`lane`).
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from pathlib import Path

from agent.judging.noise import fresh_seed
from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentRecord, RunEntry
from agent.steps.conversations import Conversations


class Stopping(Exception):
    """The loop is stopping (Ctrl-C, SIGTERM, a failure): this thread's experiment is recorded by the loop."""


class Shared:
    def __init__(self, ledger: Ledger, base_seed: int, counted_seeds: bool = False):
        self.ledger = ledger
        self.lock = threading.RLock()            # the workspace repository, the ledger, notes, in-flight markers
        self.proposer_lock = threading.RLock()   # proposers are told (and, one at a time, asked) under it
        self.conversations = Conversations()
        self.stopping = threading.Event()
        self.base_seed, self.counted_seeds = base_seed, counted_seeds
        self._given: list[RunEntry] = []  # seeds handed out, recorded or not yet
        self.lane = LandingLane()
        self.checkpoints = CheckpointsInUse()

    def check(self) -> None:
        if self.stopping.is_set():
            raise Stopping("the loop is stopping")

    def proposer_turn(self):
        """The proposer lock while proposals are made one at a time: a proposer that keeps state between its
        proposals is then never asked while it is told. Several conversations at once do not wait for it."""
        return self.proposer_lock if self.conversations.limit == 1 else nullcontext()

    def save_draft(self, draft: ExperimentRecord) -> None:
        """Writes (or updates) the in-flight marker, unless the loop is stopping (it records the experiment)."""
        with self.lock:
            self.check()
            self.ledger.save_draft(draft)

    def seed(self, also_used: list[RunEntry] = ()) -> int:
        """A seed no run of this workspace used and no run in flight was given."""
        with self.lock:
            seed = fresh_seed(self.ledger.records, self.base_seed, [*also_used, *self._given], self.counted_seeds)
            self._given.append(RunEntry(seed=seed))
            return seed


class CheckpointsInUse:
    """The weights of the runs of records not written yet (experiments in flight, a noise floor being measured):
    pruning keeps them, whatever their run is called, until their record is."""

    def __init__(self):
        self._guard = threading.Lock()
        self._by_record: dict[str, set[Path]] = {}

    def use(self, record_id: str, checkpoint: Path) -> None:
        with self._guard:
            self._by_record.setdefault(record_id, set()).add(checkpoint)

    def release(self, record_id: str) -> None:
        with self._guard:
            self._by_record.pop(record_id, None)

    def in_use(self) -> set[Path]:
        with self._guard:
            return set().union(*self._by_record.values())


class LandingLane:
    """Would-be keeps are settled one at a time, in the order they ended.

    The one at the front is the only candidate to move the best: its close-call re-runs, verification or re-run
    on a newer best happen while the others wait, holding no training place. If it is kept, the next is re-based
    once on the new best; if not, judged against the parent it trained on. Without a line, with many experiments
    in flight the best moves during nearly every re-based run and a good change is re-based until superseded.
    Once the loop starts no more experiments the line opens, so the night does not end on a queue of single runs
    beside idle slots.
    """

    def __init__(self):
        self._changed = threading.Condition()
        self._line: list[str] = []   # experiment ids, the candidate first
        self._open = False

    def enter(self, experiment_id: str, check, waiting=None) -> None:
        """Returns when experiment_id is at the front (or the line is open); check() raises to stop waiting;
        waiting(ahead) is called once if it has to wait, with the id of the candidate ahead of it."""
        with self._changed:
            if experiment_id not in self._line:
                self._line.append(experiment_id)
            told = False
            while not self._open and self._line[0] != experiment_id:
                if not told and waiting is not None:
                    waiting(self._line[0])
                    told = True
                self._changed.wait(0.2)
                check()

    def leave(self, experiment_id: str) -> None:
        with self._changed:
            if experiment_id in self._line:
                self._line.remove(experiment_id)
                self._changed.notify_all()

    def open(self) -> None:
        with self._changed:
            self._open = True
            self._changed.notify_all()
