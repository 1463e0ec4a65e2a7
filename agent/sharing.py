"""What the threads of one loop share, and the locks that guard it.

Every experiment in flight runs its steps in a thread of its own. GitPython is not thread-safe and
the ledger, the notes and the in-flight markers are single files, so everything that touches them
holds `lock`; proposers are asked and told by one thread at a time (`proposer_lock`), and a
proposal is made under that lock only, so the workspace stays usable while a model thinks. Seeds
come from one counter, so that no two runs in flight share one.
"""

from __future__ import annotations

import threading

from agent.judging.noise import fresh_seed
from agent.recording.ledger import Ledger
from agent.recording.record import InFlight, RunEntry


class Stopping(Exception):
    """The loop is stopping (Ctrl-C, SIGTERM, a failure): this thread's experiment is recorded by the loop."""


class Shared:
    def __init__(self, ledger: Ledger, base_seed: int):
        self.ledger = ledger
        self.lock = threading.RLock()            # the workspace repository, the ledger, notes, in-flight markers
        self.proposer_lock = threading.RLock()   # proposers are asked and told one at a time
        self.stopping = threading.Event()
        self.base_seed = base_seed
        self._last_seed: int | None = None

    def check(self) -> None:
        if self.stopping.is_set():
            raise Stopping("the loop is stopping")

    def begin(self, in_flight: InFlight) -> None:
        """Writes (or updates) the in-flight marker, unless the loop is stopping (it records the experiment)."""
        with self.lock:
            self.check()
            self.ledger.begin(in_flight)

    def seed(self, also_used: list[RunEntry] = ()) -> int:
        """A seed no run of this workspace used and no run in flight was given."""
        with self.lock:
            seed = fresh_seed(self.ledger.records, self.base_seed, also_used)
            if self._last_seed is not None:
                seed = max(seed, self._last_seed + 1)
            self._last_seed = seed
            return seed
