"""A model for the real Codex CLI talking to the loopback LLMServer over the Responses API: it learns the scratch
directory from our prompt (the user message naming it) and then, step by step from the tool outputs it has been
sent, reads train.py with the shell tool (exec_command), edits it and writes proposal.json with Codex's freeform
apply_patch tool, and ends its turn; where codex offers code mode, each call is made from JavaScript its `exec`
tool runs. `before` are calls it makes first, whatever they are answered: (name, arguments)
for a function call, (name, text) for a custom tool call."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

from tests.helpers.llm_server import Reply, custom_tool_call, text, tool_call

SCRATCH = re.compile(r"Work only in this directory \((/[^)]+)\)")
CODEX_BINARY = Path(__file__).resolve().parents[2] / ".clis" / "node_modules" / ".bin" / "codex"
MODEL = "gpt-5.5"  # in codex 0.169's bundled catalog with plain tools (exec_command, freeform apply_patch)


def input_texts(body: dict) -> list[str]:
    """The text of every user message of a Responses API request."""
    return [part.get("text", "") for item in body.get("input") or [] if isinstance(item, dict)
            and item.get("type") == "message" and item.get("role") == "user"
            for part in item.get("content") or [] if isinstance(part, dict)]


def scratch_of(body: dict) -> str:
    for said in input_texts(body):
        found = SCRATCH.search(said)
        if found:
            return found.group(1)
    raise AssertionError("no user message names the scratch directory")


def tool_outputs(body: dict) -> list[dict]:
    """The outputs of function and custom tool calls sent back so far, in order."""
    return [item for item in body.get("input") or [] if isinstance(item, dict)
            and item.get("type") in ("function_call_output", "custom_tool_call_output")]


def offers_code_mode(body: dict) -> bool:
    """Whether codex offers its models' code mode (the newest models): one `exec` tool running JavaScript that calls
    the others (`await tools.exec_command({...})`), declared in an additional_tools input item."""
    return any(tool.get("name") == "exec" for item in body.get("input") or [] if isinstance(item, dict)
               and item.get("type") == "additional_tools" for namespace in item.get("tools") or []
               for tool in namespace.get("tools") or [])


def patch(*hunks: str) -> str:
    return "*** Begin Patch\n" + "".join(hunks) + "*** End Patch\n"


def update(path: str, old: str, new: str) -> str:
    return f"*** Update File: {path}\n@@\n-{old}\n+{new}\n"


def add(path: str, content: str) -> str:
    return f"*** Add File: {path}\n" + "".join(f"+{line}\n" for line in content.splitlines())


class CodexResearcher:
    """changes: (description, old line, new line) per proposal, in order; each CLI run (one scratch directory)
    takes the next."""

    def __init__(self, changes: list[tuple[str, str, str]], before: list[tuple[str, dict | str]] = ()):
        self.changes, self.before = list(changes), list(before)
        self._lock = threading.Lock()
        self._taken: dict[str, int] = {}

    def __call__(self, api: str, body: dict) -> Reply:
        assert api == "responses", "Codex speaks the Responses API"
        scratch = scratch_of(body)
        with self._lock:
            index = self._taken.setdefault(scratch, len(self._taken))
        description, old, new = self.changes[index % len(self.changes)]
        proposal = json.dumps({"description": description, "hypothesis": f"{description} should lower val_bpb",
                               "expected": "val_bpb -0.001", "lesson": "", "lesson_for": None})
        steps = [*self.before, ("exec_command", {"cmd": "cat train.py"}),
                 ("apply_patch", patch(update("train.py", old, new))),
                 ("apply_patch", patch(add("proposal.json", proposal)))]
        step = len(tool_outputs(body))
        if step >= len(steps):
            return text(f"Proposed: {description}")
        name, arguments = steps[step]
        thinking = f"I will do step {step + 1} now."
        if offers_code_mode(body):  # the call made from JavaScript run by its `exec` tool
            script = f"const result = await tools.{name}({json.dumps(arguments)});\ntext(result);\n"
            return custom_tool_call("exec", script, thinking=thinking)
        if isinstance(arguments, str):
            return custom_tool_call(name, arguments, thinking=thinking)
        return tool_call(name, arguments, thinking=thinking)
