"""Transcripts: every event of one experiment, appended to transcripts/<id>.jsonl as it happens.

Format version 1: one JSON object per line with "v", "t" (UTC ISO time), "type" and the
event's own fields. Types used so far: proposal_started, reasoning, proposal, edit_rejected,
committed, run_started, run_finished, retry, decision, interrupted.
"""

from __future__ import annotations

import json
import time
from contextlib import suppress
from pathlib import Path

from agent.recording.ledger import append_line

FORMAT_VERSION = 1


class Transcript:
    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def event(self, type_: str, **fields) -> None:
        record = {"v": FORMAT_VERSION, "t": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "type": type_,
                  **fields}
        append_line(self.path, json.dumps(record, default=str) + "\n")

    def events(self) -> list[dict]:
        """Every complete event; a line torn by a crash mid-write is skipped."""
        if not self.path.exists():
            return []
        events = []
        for line in self.path.read_text(errors="replace").splitlines():
            with suppress(json.JSONDecodeError):
                events.append(json.loads(line))
        return events
