"""The tools the model may call, defined once (rendered per API by each provider), and the
read-only ones' implementations. submit_experiment is handled by the proposer."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.ledger import NOISE
from agent.llm.types import UNPARSED, ToolCall, ToolResult, ToolSpec
from agent.logview import last_lines
from agent.noise import current_sigma
from agent.notes import NOTES_LIMIT, NotesFull, write_notes
from agent.research_memory import filter_records, kept_as, lessons_by_id, reasoning

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
    with other seeds that measure sigma. Filters narrow it down; the hypothesis, expectation and lesson of
    each listed experiment follow the table."""
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(30, ge=1, le=500, description="how many of the newest matching rows (default 30)")
    status: Literal["keep", "simplify", "discard", "crash", "interrupted", "noise"] | None = Field(
        None, description="only this status (simplify: keeps won by removing code)")
    text: str | None = Field(None, max_length=200, description="only rows whose description, hypothesis, "
                                                              "expectation, lesson or decision contain this text")
    from_id: str | None = Field(None, max_length=20, description="only from this experiment id on, e.g. 0040")
    to_id: str | None = Field(None, max_length=20, description="only up to this experiment id")


class ReadRunLogArgs(BaseModel):
    """The last lines of every training log of one experiment: its run, its re-runs with other seeds, the
    runs of its fixes and the noise-floor runs of it, each under its own heading."""
    model_config = ConfigDict(extra="forbid")
    experiment_id: str
    tail_lines: int = Field(60, ge=1, le=400, description="lines from the end of each log")


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
    hypothesis: str = Field(min_length=1, max_length=600, description="why this should help, in a sentence or two")
    expected: str = Field(min_length=1, max_length=300, description='the predicted effect, e.g. "val_bpb -0.003, '
                                                                    'step time +5%"')
    lesson: str = Field("", max_length=600, description="what the result of the experiment named as awaiting a "
                                                         "lesson says, in one or two sentences (required then)")
    edits: list[EditArgs] = Field(min_length=1)


class WriteNotesArgs(BaseModel):
    """Replace notes.md, the research notes every later conversation sees: open questions, promising
    directions, dead ends and why. Send the whole new text (at most 8192 bytes); what is not in it is gone."""
    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="the complete new notes, markdown")


ARGUMENTS: dict[str, type[BaseModel]] = {"read_file": ReadFileArgs, "list_experiments": ListExperimentsArgs,
                                         "read_run_log": ReadRunLogArgs, "show_diff": ShowDiffArgs,
                                         "write_notes": WriteNotesArgs, SUBMIT: SubmitArgs}


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



def history_table(records: list[dict], limit: int = 30, shown: list[dict] | None = None) -> str:
    """The ledger as the proposer reads it: val_bpb is the mean of an experiment's runs, with its
    standard error (sigma / sqrt(runs)) once a noise floor is known; noise rows are re-runs of a best.
    shown: the rows to list (default all), newest `limit` of them."""
    best = next((r["id"] for r in reversed(records) if r["status"] == "keep"), None)
    sigma = current_sigma(records)
    rows = []
    if sigma:
        rows.append(f"sigma of val_bpb between seeds: {sigma:.6f} (the keep rule in the fixed rules says how many "
                    "a gain needs)")
    rows.append("id          status       val_bpb    +-       runs  triage         description")
    for r in (records if shown is None else shown)[-limit:]:
        val = f"{r['val_bpb']:.6f}" if r.get("val_bpb") is not None else "   -    "
        runs = len(r.get("runs") or []) or 1
        error = f"{sigma / math.sqrt(runs):.6f}" if sigma and r.get("val_bpb") is not None else "   -    "
        mark = "*" if r["id"] == best else " "
        description = r["description"] + (" (confirmed by a re-run)" if r["status"] == "keep" and runs > 1 else "")
        rows.append(f"{r['id']:<10}{mark} {kept_as(r):<11}  {val}  {error}  {runs:>4}  {r.get('triage', ''):<13}  "
                    f"{description}")
    return "\n".join(rows)


class ToolBox:
    """Answers the read-only tools against one workspace's state."""

    def __init__(self, workspace_dir: Path, files: dict[str, str], records: list[dict]):
        self.dir, self.files, self.records = workspace_dir, files, records
        self.notes_written = 0  # successful write_notes calls

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

    def _list_experiments(self, limit: int = 30, status: str | None = None, text: str | None = None,
                          from_id: str | None = None, to_id: str | None = None) -> str:
        shown = filter_records(self.records, status, text, from_id, to_id)
        if not shown:
            return "no experiment matches these filters"
        shown = shown[-max(1, min(int(limit), 500)):]
        lessons = lessons_by_id(self.records)
        reasons = [reasoning(r, lessons, 300) for r in shown]
        notes = [f"{n.id}: hypothesis: {n.hypothesis or '-'} | expected: {n.expected or '-'} | lesson: "
                 f"{n.lesson or '-'}" for n in reasons if n.hypothesis or n.lesson]
        return history_table(self.records, len(shown), shown) + ("\n\n" + "\n".join(notes) if notes else "")

    def _write_notes(self, text: str) -> str:
        try:
            written = write_notes(self.dir, text)
        except NotesFull as err:
            raise LookupError(str(err)) from err
        self.notes_written += 1
        return f"notes.md now holds {written.size} of {NOTES_LIMIT} bytes; every later conversation sees it"

    def _record(self, experiment_id: str) -> dict:
        for r in self.records:
            if r["id"] == str(experiment_id).strip():
                return r
        raise LookupError(f"no experiment {experiment_id!r}: ids are {', '.join(r['id'] for r in self.records)}")

    def _read_run_log(self, experiment_id: str, tail_lines: int = 60) -> str:
        record = self._record(experiment_id)
        logs = experiment_logs(self.records, record)
        present = [log for log in logs if (self.dir / log).is_file()]
        if not present:
            raise LookupError(f"experiment {experiment_id} has no log (it was not run)")
        lines = max(1, min(int(tail_lines), 400))
        # Every log gets an equal share of the answer, so that the last one is never cut away.
        share = MAX_RESULT_CHARS // len(present) - 200
        return "\n\n".join(f"== {log} ==\n" + bounded(last_lines(self.dir / log, lines), share) for log in present)

    def _show_diff(self, experiment_id: str) -> str:
        return self._record(experiment_id).get("diff") or "(no change: the baseline)"


def experiment_logs(records: list[dict], record: dict) -> list[str]:
    """Every training log of an experiment, in the order they ran: its runs (the first, re-runs), its
    crashed attempts before fixes, and the noise-floor runs of it."""
    logs = [a["log"] for a in record.get("fix_attempts") or [] if a.get("log")]
    logs += [run["log"] for run in record.get("runs") or [] if run.get("log")]
    if not logs and record.get("log"):
        logs.append(record["log"])
    for other in records:
        if other["status"] == NOISE and other.get("of") == record["id"]:
            logs += [run["log"] for run in other.get("runs") or [] if run.get("log")]
    return list(dict.fromkeys(logs))
