"""Models for the loopback server that answer what they are asked (LLMServer(responder=...)), for conversations
running at once: each request is answered from its own conversation, not from a shared script.

SettingChanges reads train.py from the conversation's first message, makes a few read-only calls and then
submits one setting at a new value, as an Anthropic tool call. Told that its change was refused (another
conversation has it), it submits another.
"""

from __future__ import annotations

import random
import re
import threading

from tests.helpers.llm_server import Reply, tool_call
from tests.helpers.submissions import reasoned

SETTINGS = ("WARMDOWN_RATIO", "WEIGHT_DECAY", "EMBEDDING_LR", "UNEMBEDDING_LR", "MATRIX_LR", "X0_LAMBDA_LR",
            "RESID_LAMBDA_LR", "NORMUON_BETA2")


def first_user_text(body: dict) -> str:
    content = body["messages"][0]["content"]
    return content if isinstance(content, str) else "\n".join(b.get("text", "") for b in content)


def tool_results(body: dict) -> list[dict]:
    """The tool results the conversation has sent so far, in order."""
    return [block for message in body["messages"] if message["role"] == "user" and isinstance(message["content"], list)
            for block in message["content"] if block.get("type") == "tool_result"]


def setting_line(source: str, name: str) -> str | None:
    found = re.search(rf"^{name} = [^\n]*$", source, re.MULTILINE)
    return found.group(0) if found else None


class SettingChanges:
    """calls: requests per proposal (calls - 1 read_file calls, then the submission). first: the change every
    conversation tries first, as (setting, value), to see two conversations reach for the same idea."""

    def __init__(self, seed: int = 0, calls: int = 1, first: tuple[str, float] | None = None):
        self.random, self.calls, self.first = random.Random(seed), calls, first
        self._lock = threading.Lock()
        self.submitted: list[str] = []  # descriptions, in the order they were sent

    def __call__(self, api: str, body: dict) -> Reply:
        assert api == "anthropic", "SettingChanges answers the Messages API"
        results = tool_results(body)
        if len(results) < self.calls - 1:
            return tool_call("read_file", {"path": "train.py"})
        source = first_user_text(body)
        refused = any(r.get("is_error") for r in results)
        name, value = self.first if self.first and not refused else self._random_change(source)
        line = setting_line(source, name)
        current = line.split(" = ")[1].split("#")[0].strip()
        new = line.replace(f"{name} = {current}", f"{name} = {value:g}", 1)
        description = f"{name} {current} -> {value:g}"
        with self._lock:
            self.submitted.append(description)
        return tool_call("submit_experiment", reasoned({"description": description,
                                                        "edits": [{"old_string": line, "new_string": new}]}))

    def _random_change(self, source: str) -> tuple[str, float]:
        present = [name for name in SETTINGS if setting_line(source, name)]
        with self._lock:
            name = self.random.choice(present)
            factor = self.random.uniform(0.5, 2.0)
        current = float(setting_line(source, name).split(" = ")[1].split("#")[0])
        value = float(f"{current * factor:.4g}")
        if name == "NORMUON_BETA2":
            value = min(value, 0.999)
        return name, value if value != current else float(f"{current * 0.9:.4g}")


# Changes to train.py's code, never to a value of its block: (description, [(old, new), ...]).
CODE_CHANGES = (
    ("rms_norm with eps 1e-6", [("    return F.rms_norm(x, (x.size(-1),))",
                                 "    return F.rms_norm(x, (x.size(-1),), eps=1e-6)")]),
    ("MLP activation relu^2 -> gelu", [("F.relu(self.c_fc(x)).square()", "F.gelu(self.c_fc(x))")]),
    ("x0 skip weights start at 0.2", [("torch.full((config.n_layer,), 0.1)", "torch.full((config.n_layer,), 0.2)"),
                                      ("self.x0_lambdas.fill_(0.1)", "self.x0_lambdas.fill_(0.2)")]),
    ("warmdown never below zero", [("    remaining = (1 - progress) / WARMDOWN_RATIO",
                                    "    remaining = max(0.0, (1 - progress) / WARMDOWN_RATIO)")]),
    ("MLP activation relu^2 -> relu^1.5", [("F.relu(self.c_fc(x)).square()", "F.relu(self.c_fc(x)).pow(1.5)")]),
    ("logit softcap halved inside tanh", [("LOGIT_SOFTCAP * torch.tanh(logits / LOGIT_SOFTCAP)",
                                           "LOGIT_SOFTCAP * torch.tanh(logits / (2 * LOGIT_SOFTCAP))")]),
)


class CodeChanges:
    """Submits the next change of CODE_CHANGES, in one fixed order, whose text is in the conversation's train.py;
    told that a submission was refused, the next one after it. The same changes in the same order every night."""

    def __init__(self, changes=CODE_CHANGES):
        self.changes = list(changes)
        self._lock = threading.Lock()
        self._next = 0
        self.submitted: list[str] = []

    def __call__(self, api: str, body: dict) -> Reply:
        assert api == "anthropic", "CodeChanges answers the Messages API"
        source = first_user_text(body)
        refused = sum(1 for r in tool_results(body) if r.get("is_error"))
        applicable = [c for c in self.changes if all(old in source for old, _ in c[1])]
        if not applicable:
            return tool_call("submit_experiment", reasoned({"description": "nothing left", "edits": []}))
        with self._lock:
            if not refused:
                self._next += 1
            description, edits = applicable[(self._next - 1 + refused) % len(applicable)]
            self.submitted.append(description)
        return tool_call("submit_experiment", reasoned({
            "description": description, "edits": [{"old_string": old, "new_string": new} for old, new in edits]}))
