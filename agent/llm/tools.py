"""The tools the model may call, defined once (rendered per API by each provider), and the
read-only ones' implementations. submit_experiment is handled by the proposer."""

from __future__ import annotations

import math
from pathlib import Path

from agent.llm.types import ToolCall, ToolResult, ToolSpec
from agent.logview import last_lines
from agent.noise import current_sigma

READABLE_FILES = ("train.py", "prepare.py", "program.md", "track.json")
MAX_RESULT_CHARS = 60_000

TOOLS = [
    ToolSpec("read_file", "Read one file of the experiment (read-only): train.py as it is at the best commit, "
             "prepare.py (frozen: data, tokenizer, dataloader, evaluate_bpb), program.md (your research "
             "program) or track.json (the track's constants and data).",
             {"type": "object", "properties": {"path": {"type": "string", "enum": list(READABLE_FILES)}},
              "required": ["path"]}),
    ToolSpec("list_experiments", "The history of this run as a table, newest last, the best marked with *: "
             "id, status, val_bpb (mean of its runs) with its standard error, runs, triage class, description; "
             "noise rows are re-runs of a best with other seeds that measure sigma.",
             {"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 500,
                                                         "description": "how many of the newest (default 30)"}}}),
    ToolSpec("read_run_log", "The last lines of one experiment's training log.",
             {"type": "object", "properties": {"experiment_id": {"type": "string"},
                                               "tail_lines": {"type": "integer", "minimum": 1, "maximum": 400}},
              "required": ["experiment_id"]}),
    ToolSpec("show_diff", "What one experiment changed in train.py, as a unified diff.",
             {"type": "object", "properties": {"experiment_id": {"type": "string"}}, "required": ["experiment_id"]}),
    ToolSpec("submit_experiment", "Submit the ONE change to try, as search/replace edits on train.py. Each "
             "old_string must match exactly one place of train.py (copy it exactly, with enough lines to be "
             "unique); edits apply in order, all or none. This ends your turn when the edits are valid; "
             "otherwise the tool result says precisely what to fix.",
             {"type": "object", "properties": {
                 "description": {"type": "string", "description": "one line: what changes, with the numbers"},
                 "edits": {"type": "array", "minItems": 1, "items": {
                     "type": "object", "properties": {"old_string": {"type": "string"},
                                                      "new_string": {"type": "string"}},
                     "required": ["old_string", "new_string"]}}},
              "required": ["description", "edits"]}),
]
SUBMIT = "submit_experiment"


def history_table(records: list[dict], limit: int = 30) -> str:
    """The ledger as the proposer reads it: val_bpb is the mean of an experiment's runs, with its
    standard error (sigma / sqrt(runs)) once a noise floor is known; noise rows are re-runs of a best."""
    best = next((r["id"] for r in reversed(records) if r["status"] == "keep"), None)
    sigma = current_sigma(records)
    rows = []
    if sigma:
        rows.append(f"sigma of val_bpb between seeds: {sigma:.6f}; a gain under 2 sigma is noise unless re-runs "
                    "confirm it")
    rows.append("id          status       val_bpb    +-       runs  triage         description")
    for r in records[-limit:]:
        val = f"{r['val_bpb']:.6f}" if r.get("val_bpb") is not None else "   -    "
        runs = len(r.get("runs") or []) or 1
        error = f"{sigma / math.sqrt(runs):.6f}" if sigma and r.get("val_bpb") is not None else "   -    "
        mark = "*" if r["id"] == best else " "
        description = r["description"] + (" (confirmed by a re-run)" if r["status"] == "keep" and runs > 1 else "")
        rows.append(f"{r['id']:<10}{mark} {r['status']:<11}  {val}  {error}  {runs:>4}  {r.get('triage', ''):<13}  "
                    f"{description}")
    return "\n".join(rows)


class ToolBox:
    """Answers the read-only tools against one workspace's state."""

    def __init__(self, workspace_dir: Path, files: dict[str, str], records: list[dict]):
        self.dir, self.files, self.records = workspace_dir, files, records

    def run(self, call: ToolCall) -> ToolResult:
        try:
            content = getattr(self, f"_{call.name}")(**call.arguments)
        except (AttributeError, TypeError) as err:
            return ToolResult(call.id, f"cannot call {call.name} with {call.arguments}: {err}", is_error=True)
        except LookupError as err:
            return ToolResult(call.id, str(err.args[0]), is_error=True)
        return ToolResult(call.id, content[-MAX_RESULT_CHARS:])

    def _read_file(self, path: str) -> str:
        if path not in self.files:
            raise LookupError(f"{path!r} cannot be read: choose one of {', '.join(READABLE_FILES)}")
        return self.files[path]

    def _list_experiments(self, limit: int = 30) -> str:
        return history_table(self.records, max(1, min(int(limit), 500)))

    def _record(self, experiment_id: str) -> dict:
        for r in self.records:
            if r["id"] == str(experiment_id).strip():
                return r
        raise LookupError(f"no experiment {experiment_id!r}: ids are {', '.join(r['id'] for r in self.records)}")

    def _read_run_log(self, experiment_id: str, tail_lines: int = 60) -> str:
        record = self._record(experiment_id)
        path = self.dir / record.get("log", f"logs/{record['id']}.log")
        if not path.exists():
            raise LookupError(f"experiment {experiment_id} has no log (it was not run)")
        return last_lines(path, max(1, min(int(tail_lines), 400)))

    def _show_diff(self, experiment_id: str) -> str:
        return self._record(experiment_id).get("diff") or "(no change: the baseline)"
