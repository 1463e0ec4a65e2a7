"""Several proposals at once: how many conversations may be open, and how many keep the slots fed.

With K slots, runs of R seconds and proposals of P seconds, the slots ask for K / R proposals a second
and one conversation makes 1 / P: ceil(K * P / R) conversations keep up, and a quarter more absorbs the
spread of both times. A proposer that answers at once (P under 1% of R) keeps one, which keeps its
proposals in order. Never more than K.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

INSTANT = 0.01      # P / R under which a proposer counts as answering at once
MARGIN = 1.25
RECENT = 16         # proposals and runs the medians are taken over


def conversations_needed(slots: int, proposal_seconds: list[float], run_seconds: list[float]) -> int:
    if not proposal_seconds or not run_seconds:
        return 1
    p, r = statistics.median(proposal_seconds[-RECENT:]), statistics.median(run_seconds[-RECENT:])
    if r <= 0 or p / r < INSTANT:
        return 1
    return max(1, min(slots, math.ceil(slots * p / r * MARGIN)))


class Conversations:
    """The proposals being made now, by experiment id, and how many may be (set by the loop)."""

    def __init__(self, limit: int = 1):
        self._changed = threading.Condition()
        self._limit = limit
        self._open: set[str] = set()

    @property
    def limit(self) -> int:
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        with self._changed:
            self._limit = max(1, value)
            self._changed.notify_all()

    @contextmanager
    def held(self, experiment_id: str, check: Callable[[], None]) -> Iterator[None]:
        """Open while the body runs, once fewer than `limit` are; check() raises to stop waiting."""
        with self._changed:
            while len(self._open) >= self._limit:
                self._changed.wait(0.2)
                check()
            self._open.add(experiment_id)
        try:
            yield
        finally:
            with self._changed:
                self._open.discard(experiment_id)
                self._changed.notify_all()


class Pace:
    """The proposal seconds and the seconds an experiment holds its slot once its proposal is in, measured so far
    this night (the runs of the tag before it count with what their records say)."""

    def __init__(self, records=()):
        self.proposal_seconds: list[float] = []
        self.run_seconds: list[float] = []
        self._counted: set[str] = set()
        for record in records:
            if record.is_experiment and record.timings.run_s:
                self.ran(record.timings.run_s)
            if record.is_experiment and record.commit != record.parent and record.timings.propose_s is not None:
                self.proposed(record.id, record.timings.propose_s)

    def proposed(self, experiment_id: str, seconds: float) -> None:
        if experiment_id not in self._counted:
            self._counted.add(experiment_id)
            self.proposal_seconds.append(seconds)

    def ran(self, seconds: float) -> None:
        self.run_seconds.append(seconds)

    def needed(self, slots: int) -> int:
        return conversations_needed(slots, self.proposal_seconds, self.run_seconds)
