"""The CLI researcher: the user's own coding CLI (claude, codex) proposes in a scratch directory. Its one entry
from outside: the researcher and the adapter --model chooses."""

from agent.proposers.cli.agent import UnknownCLI, chosen_cli
from agent.proposers.cli.researcher import CLIResearcher

__all__ = ["CLIResearcher", "UnknownCLI", "chosen_cli"]
