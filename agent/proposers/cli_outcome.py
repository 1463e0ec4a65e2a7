"""What one run of a coding CLI said, as its adapter (agent.proposers.cli_agent.CodingCLI) reads it from the event
stream, line by line."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.llm.types import Usage


@dataclass
class CLIOutcome:
    """What one CLI run's event stream said, filled in line by line by the adapter's read_event."""
    usage: Usage = field(default_factory=Usage)
    final_text: str = ""          # the CLI's own last word (its result message)
    failed: bool = False          # the CLI said the run failed (even with exit code 0)
    events: int = 0               # JSON events read
