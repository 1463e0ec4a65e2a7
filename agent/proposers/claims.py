"""The changes claimed by the proposals of a night, so that two conversations never run the same one.

A change is claimed when its proposal is accepted. It is refused when its edits equal those of a change
in flight (after normalising whitespace; whatever its parent, since changes in flight are re-applied on
the best), or when train.py after it equals, whitespace aside, a change already tried on the same parent.
A claim is dropped once its experiment is recorded (the ledger then says it was tried) or when its
proposal will not run.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

from agent.proposers.edits import Edit
from agent.recording.record import ExperimentRecord


def normalised(text: str) -> str:
    return " ".join(text.split())


def source_key(source: str) -> str:
    return hashlib.sha256(normalised(source).encode()).hexdigest()


def edits_key(edits: list[Edit]) -> tuple:
    return tuple(sorted((normalised(e.old_string), normalised(e.new_string)) for e in edits))


@dataclass(frozen=True)
class Claim:
    experiment_id: str
    parent: str
    source: str      # source_key of train.py after the change
    edits: tuple     # edits_key of the change


class Claims:
    def __init__(self, records: Callable[[], list[ExperimentRecord]], source_at: Callable[[str], str]):
        self._records, self._source_at = records, source_at
        self._lock = threading.Lock()
        self._open: dict[str, Claim] = {}
        self._tried: dict[str, str] = {}  # commit -> source_key of its train.py

    def claim(self, experiment_id: str, parent: str, source: str, edits: list[Edit]) -> str | None:
        """Claims the change for experiment_id; if another has it, why it is refused (and nothing is claimed)."""
        wanted = Claim(experiment_id, parent, source_key(source), edits_key(edits))
        with self._lock:
            why = self._taken(wanted)
            if why is None:
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
