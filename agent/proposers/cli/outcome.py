"""What one run of a coding CLI said, as its adapter (agent.proposers.cli.agent.CodingCLI) reads it from the event
stream, line by line, and how much of each thing it said a transcript keeps (the model behind the CLI chooses how
long its messages, thoughts and tool arguments are)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.llm.types import Usage

TEXT_CHARS = 50_000  # of one message, thought or tool argument kept in the transcript (train.py fits whole)
RESULT_CHARS = 2000  # of each tool result or command output kept in the transcript


@dataclass
class CLIOutcome:
    usage: Usage = field(default_factory=Usage)
    final_text: str = ""          # the CLI's own last word (its result message)
    failed: bool = False          # the CLI said the run failed (even with exit code 0)


def json_event(line: str) -> dict | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def count(usage: dict, key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value > 0 else 0


def clipped(value: Any, chars: int = TEXT_CHARS) -> Any:
    """value with every string in it (at any depth of dicts and lists) cut to chars, saying how much was cut."""
    if isinstance(value, str):
        return value if len(value) <= chars else f"{value[:chars]}... [{len(value) - chars} more characters]"
    if isinstance(value, dict):
        return {key: clipped(item, chars) for key, item in value.items()}
    if isinstance(value, list):
        return [clipped(item, chars) for item in value]
    return value
