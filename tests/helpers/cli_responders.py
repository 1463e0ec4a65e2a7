"""A model for a real coding CLI (Claude Code) talking to the loopback LLMServer: it learns the scratch directory
from the CLI's first message (our prompt names it), and then, step by step from the tool results it has been sent,
reads train.py, edits it with one change, writes proposal.json and ends its turn, as Anthropic tool calls of
Claude Code's own tools (Read, Edit, Write). `before` are calls it makes first, whatever they are answered ("{scratch}"
in a string argument stands for the scratch directory)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

from tests.helpers.llm_responders import first_user_text, tool_results
from tests.helpers.llm_server import Reply, text, tool_call

SCRATCH = re.compile(r"Work only in this directory \((/[^)]+)\)")
# Two one-line changes of train.py the scripted researchers make, and a secret no CLI may ever send.
NORM = "    return F.rms_norm(x, (x.size(-1),))"
EPS = "    return F.rms_norm(x, (x.size(-1),), eps=1e-6)"
SCHEDULE = "    remaining = (1 - progress) / WARMDOWN_RATIO"
CLAMPED = "    remaining = max(0.0, (1 - progress) / WARMDOWN_RATIO)"
SECRET = "4f1c-very-secret-do-not-send"
CLI_BINARY = Path(__file__).resolve().parents[2] / ".clis" / "node_modules" / ".bin" / "claude"


def scratch_of(body: dict) -> str:
    found = SCRATCH.search(first_user_text(body))
    assert found, "the CLI's first message does not name the scratch directory"
    return found.group(1)


class ClaudeCodeResearcher:
    """changes: (description, old, new) per proposal, in order; each CLI run (one scratch directory) takes the
    next."""

    def __init__(self, changes: list[tuple[str, str, str]], before: list[tuple[str, dict]] = ()):
        self.changes, self.before = list(changes), list(before)
        self._lock = threading.Lock()
        self._taken: dict[str, int] = {}  # scratch directory -> index of its change

    def __call__(self, api: str, body: dict) -> Reply:
        assert api == "anthropic", "Claude Code speaks the Messages API"
        scratch = scratch_of(body)
        with self._lock:
            index = self._taken.setdefault(scratch, len(self._taken))
        description, old, new = self.changes[index % len(self.changes)]
        step = len(tool_results(body))
        before = [(name, {key: value.replace("{scratch}", scratch) if isinstance(value, str) else value
                          for key, value in arguments.items()}) for name, arguments in self.before]
        steps = [*before,
                 ("Read", {"file_path": f"{scratch}/train.py"}),
                 ("Edit", {"file_path": f"{scratch}/train.py", "old_string": old, "new_string": new}),
                 ("Write", {"file_path": f"{scratch}/proposal.json", "content": json.dumps({
                     "description": description, "hypothesis": f"{description} should lower val_bpb",
                     "expected": "val_bpb -0.001", "lesson": "", "lesson_for": None})})]
        if step < len(steps):
            return tool_call(*steps[step], text=f"step {step + 1}", thinking=f"I will do step {step + 1} now.")
        return text(f"Proposed: {description}")
