"""The tools the model may call, defined once (rendered per API by each provider), and the
read-only ones' implementations. submit_experiment is handled by the proposer."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.llm.types import UNPARSED, ToolCall, ToolResult, ToolSpec
from agent.logview import last_lines
from agent.noise import current_sigma

READABLE_FILES = ("train.py", "prepare.py", "program.md", "track.json")
MAX_RESULT_CHARS = 60_000
SUBMIT = "submit_experiment"


class ReadFileArgs(BaseModel):
    """Read one file of the experiment (read-only): train.py as it is at the best commit, prepare.py (frozen:
    data, tokenizer, dataloader, evaluate_bpb), program.md (your research program) or track.json (the
    track's constants and data)."""
    model_config = ConfigDict(extra="forbid")
    path: Literal["train.py", "prepare.py", "program.md", "track.json"]


class ListExperimentsArgs(BaseModel):
    """The history of this run as a table, newest last, the best marked with *: id, status, val_bpb (mean of
    its runs) with its standard error, runs, triage class, description; noise rows are re-runs of a best
    with other seeds that measure sigma."""
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(30, ge=1, le=500, description="how many of the newest (default 30)")


class ReadRunLogArgs(BaseModel):
    """The last lines of one experiment's training log."""
    model_config = ConfigDict(extra="forbid")
    experiment_id: str
    tail_lines: int = Field(60, ge=1, le=400)


class ShowDiffArgs(BaseModel):
    """What one experiment changed in train.py, as a unified diff."""
    model_config = ConfigDict(extra="forbid")
    experiment_id: str


class EditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    old_string: str
    new_string: str


class SubmitArgs(BaseModel):
    """Submit the ONE change to try, as search/replace edits on train.py. Each old_string must match exactly
    one place of train.py (copy it exactly, with enough lines to be unique); edits apply in order, all or
    none. This ends your turn when the edits are valid; otherwise the tool result says precisely what to
    fix."""
    model_config = ConfigDict(extra="forbid")
    description: str = Field(min_length=1, description="one line: what changes, with the numbers")
    edits: list[EditArgs] = Field(min_length=1)


ARGUMENTS: dict[str, type[BaseModel]] = {"read_file": ReadFileArgs, "list_experiments": ListExperimentsArgs,
                                         "read_run_log": ReadRunLogArgs, "show_diff": ShowDiffArgs,
                                         SUBMIT: SubmitArgs}


def _spec(name: str, model: type[BaseModel]) -> ToolSpec:
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    return ToolSpec(name, " ".join(model.__doc__.split()), schema)


TOOLS = [_spec(name, model) for name, model in ARGUMENTS.items()]


class BadToolCall(ValueError):
    """A call the model can correct: the message says what was wrong."""


def parse_arguments(call: ToolCall) -> BaseModel:
    """The call's arguments validated by its tool's model, or BadToolCall naming every problem."""
    model = ARGUMENTS.get(call.name)
    if model is None:
        raise BadToolCall(f"there is no tool {call.name!r}; the tools are {', '.join(ARGUMENTS)}")
    if UNPARSED in call.arguments:
        raw = str(call.arguments[UNPARSED])[:200]
        raise BadToolCall(f"the arguments of {call.name} are not a JSON object: {raw!r}; send them as JSON")
    try:
        return model.model_validate(call.arguments)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                             for e in err.errors())
        raise BadToolCall(f"invalid arguments for {call.name}: {problems}. Call it again with corrected "
                          "arguments") from err


def bounded(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """Head and tail of a long tool output, with a note of what was cut in between."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[-limit // 2:]
    cut = len(text) - len(head) - len(tail)
    return f"{head}\n[... {cut} characters cut here (of {len(text)}); ask for less to see them ...]\n{tail}"



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
        """A read-only tool's answer; a bad call or a failure inside the tool comes back as a tool error."""
        try:
            arguments = parse_arguments(call)
            content = getattr(self, f"_{call.name}")(**arguments.model_dump())
        except BadToolCall as err:
            return ToolResult(call.id, str(err), is_error=True)
        except LookupError as err:
            return ToolResult(call.id, str(err.args[0]), is_error=True)
        except Exception as err:  # noqa: BLE001 - the model gets the failure, the night goes on
            return ToolResult(call.id, f"{call.name} failed: {type(err).__name__}: {err}", is_error=True)
        return ToolResult(call.id, bounded(content))

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
