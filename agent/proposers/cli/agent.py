"""The coding-agent CLIs a CLI researcher can drive (the user's own `claude`, `codex`): what each one needs to be
started headless in a scratch directory and how its JSON event stream is read.

An adapter knows only its CLI; agent.proposers.cli.researcher does the rest. An adapter imports CLIOutcome from
agent.proposers.cli.outcome, never this module (which imports the adapters).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from agent.proposers.cli.claude import ClaudeCode
from agent.proposers.cli.codex import Codex
from agent.proposers.cli.outcome import CLIOutcome
from agent.recording.transcript import Transcript

# What every CLI is given of our own environment: nothing secret, enough to find itself and its login.
PASSED_THROUGH = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "TMPDIR",
                  "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE",
                  "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy")


class CodingCLI(Protocol):
    name: str          # what --model names it: "claude-code", "codex"
    executable: str    # the program looked up on PATH: "claude", "codex"
    # True: its result event states what the run cost; False: it reports tokens only, priced from our table
    states_cost: bool

    def command(self, executable: str, scratch: Path, prompt: str, model: str | None) -> list[str]:
        """argv of one headless run in scratch that follows prompt; model None: the CLI's own default."""

    def environment(self, scratch: Path, base_url: str | None) -> dict[str, str]:
        """What the CLI needs on top of the scrubbed environment (PASSED_THROUGH): its own key or login and
        base URL, and switches that keep it quiet; never another provider's key."""

    def read_event(self, line: str, transcript: Transcript, outcome: CLIOutcome) -> None:
        """One line of its stdout: reasoning, tool calls and results into the transcript; tokens and cost from
        its result event into outcome.usage, its final message into outcome. A line that is not JSON is ignored."""

    def failure(self, returncode: int, stderr_tail: str, outcome: CLIOutcome) -> str:
        """What to say of a run that failed (non-zero exit or outcome.failed), in the CLI's own words, with what
        to do (log in, set the key)."""


def scrubbed_environment(cli: CodingCLI, scratch: Path, base_url: str | None) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    env.update(cli.environment(scratch, base_url))
    return env


CODING_CLIS: dict[str, Callable[[], CodingCLI]] = {"claude-code": ClaudeCode, "codex": Codex}


class UnknownCLI(ValueError):
    """--model names no registered coding CLI."""


def chosen_cli(model: str | None) -> tuple[CodingCLI, str | None]:
    """The adapter and the CLI's model for --model NAME or NAME:MODEL (None: the CLI's default model)."""
    name, _, cli_model = (model or "").partition(":")
    if name not in CODING_CLIS:
        raise UnknownCLI(f"--proposer cli needs --model CLI or CLI:MODEL with CLI one of {', '.join(CODING_CLIS)} "
                         f"(got {model!r}), e.g. --model claude-code or --model claude-code:sonnet")
    return CODING_CLIS[name](), (cli_model or None)
