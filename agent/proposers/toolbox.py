"""The answers to the model's tools (their arguments are defined in agent/llm/tools.py): the run's
history as a table, its files, logs and diffs, all bounded in size, and the research notes, which
write_notes replaces."""

from __future__ import annotations

import math
from pathlib import Path

from agent.llm.tools import (
    READABLE_FILES,
    BadToolCall,
    ListExperimentsArgs,
    ReadFileArgs,
    ReadRunLogArgs,
    ShowDiffArgs,
    WriteNotesArgs,
    parse_arguments,
)
from agent.llm.types import ToolCall, ToolResult
from agent.proposers.logview import last_lines, log_seals
from agent.recording.history import History
from agent.recording.notes import NOTES_LIMIT, NotesChanged, NotesFull, write_notes
from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.recording.research_memory import filter_records, lessons_by_id, reasoning

MAX_RESULT_CHARS = 60_000


def bounded(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """Head and tail of a long tool output, with a note of what was cut in between."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[-limit // 2:]
    cut = len(text) - len(head) - len(tail)
    return f"{head}\n[... {cut} characters cut here (of {len(text)}); ask for less to see them ...]\n{tail}"


def frozen_files(workspace_dir: Path, track) -> dict[str, str]:
    """prepare.py (empty where it cannot be read) and track.json, as the tools show them."""
    try:
        prepare = (workspace_dir / "prepare.py").read_text()
    except OSError:
        prepare = ""
    return {"prepare.py": prepare, "track.json": track.model_dump_json(indent=2, exclude_unset=True)}


def history_table(records: list[ExperimentRecord], limit: int = 30,
                  shown: list[ExperimentRecord] | None = None) -> str:
    """The ledger as the proposer reads it: val_bpb is the mean of an experiment's runs, with its
    standard error (sigma / sqrt(runs)) once a noise floor is known; noise rows are re-runs of a best.
    shown: the rows to list (default all), newest `limit` of them."""
    history = History(records)
    best, sigma = (history.best().id if history.best() else None), history.sigma()
    rows = []
    if sigma:
        rows.append(f"sigma of val_bpb between seeds: {sigma:.6f} (the keep rule in the fixed rules says how many "
                    "a gain needs)")
    rows.append("id          status       val_bpb    +-       runs  triage         description")
    for r in (records if shown is None else shown)[-limit:]:
        val = f"{r.val_bpb:.6f}" if r.val_bpb is not None else "   -    "
        runs = len(r.runs) or 1
        error = f"{sigma / math.sqrt(runs):.6f}" if sigma and r.val_bpb is not None else "   -    "
        mark = "*" if r.id == best else " "
        confirmed = r.status == ExperimentStatus.KEEP and runs > 1
        description = r.description + (" (confirmed by a re-run)" if confirmed else "")
        rows.append(f"{r.id:<10}{mark} {r.kept_as:<11}  {val}  {error}  {runs:>4}  {r.triage or '':<13}  "
                    f"{description}")
    return "\n".join(rows)


class ToolBox:
    def __init__(self, workspace_dir: Path, files: dict[str, str], records: list[ExperimentRecord],
                 notes_read: str | None = None):
        self.dir, self.files, self.records = workspace_dir, files, records
        self.notes_read = notes_read  # the notes as this conversation last saw them
        self.answers = {ReadFileArgs: self._read_file, ListExperimentsArgs: self._list_experiments,
                        ReadRunLogArgs: self._read_run_log, ShowDiffArgs: self._show_diff,
                        WriteNotesArgs: self._write_notes}

    def run(self, call: ToolCall) -> ToolResult:
        """A tool's answer; a bad call or a failure inside the tool comes back as a tool error."""
        try:
            arguments = parse_arguments(call)
            if (answer := self.answers.get(type(arguments))) is None:
                raise BadToolCall(f"{call.name} is not a read-only tool")
            content = answer(arguments)
        except BadToolCall as err:
            return ToolResult(call.id, str(err), is_error=True)
        except LookupError as err:
            return ToolResult(call.id, str(err.args[0]), is_error=True)
        except Exception as err:  # noqa: BLE001 - the model gets the failure, the night goes on
            return ToolResult(call.id, f"{call.name} failed: {type(err).__name__}: {err}", is_error=True)
        return ToolResult(call.id, bounded(content))

    def _read_file(self, arguments: ReadFileArgs) -> str:
        if arguments.path not in self.files:
            raise LookupError(f"{arguments.path!r} cannot be read: choose one of {', '.join(READABLE_FILES)}")
        return self.files[arguments.path]

    def _list_experiments(self, arguments: ListExperimentsArgs) -> str:
        shown = filter_records(self.records, arguments.status, arguments.text, arguments.from_id, arguments.to_id)
        if not shown:
            return "no experiment matches these filters"
        shown = shown[-arguments.limit:]
        lessons = lessons_by_id(self.records)
        reasons = [reasoning(r, lessons, 300) for r in shown]
        notes = [f"{n.id}: hypothesis: {n.hypothesis or '-'} | expected: {n.expected or '-'} | lesson: "
                 f"{n.lesson or '-'}" for n in reasons if n.hypothesis or n.lesson]
        return history_table(self.records, len(shown), shown) + ("\n\n" + "\n".join(notes) if notes else "")

    def _write_notes(self, arguments: WriteNotesArgs) -> str:
        try:
            written = write_notes(self.dir, arguments.text, self.notes_read)
        except NotesChanged as err:
            self.notes_read = err.current  # seen now, in the error
            raise LookupError(str(err)) from err
        except NotesFull as err:
            raise LookupError(str(err)) from err
        self.notes_read = written.text
        return f"notes.md now holds {written.size} of {NOTES_LIMIT} bytes; every later conversation sees it"

    def _record(self, experiment_id: str) -> ExperimentRecord:
        if found := next((r for r in self.records if r.id == experiment_id.strip()), None):
            return found
        raise LookupError(f"no experiment {experiment_id!r}: ids are {', '.join(r.id for r in self.records)}")

    def _read_run_log(self, arguments: ReadRunLogArgs) -> str:
        record = self._record(arguments.experiment_id)
        present = [log for log in experiment_logs(self.records, record) if (self.dir / log).is_file()]
        if not present:
            raise LookupError(f"experiment {arguments.experiment_id} has no log (it was not run)")
        # Every log gets an equal share of the answer, so that the last one is never cut away.
        share = MAX_RESULT_CHARS // len(present) - 200
        seals = log_seals(self.records)
        return "\n\n".join(f"== {log} ==\n" + bounded(last_lines(self.dir / log, arguments.tail_lines,
                                                                 seals.get(log)), share) for log in present)

    def _show_diff(self, arguments: ShowDiffArgs) -> str:
        record = self._record(arguments.experiment_id)
        if record.imported is not None and not record.imported.diff_available:
            return (f"(diff not available: commit {record.imported.reference_commit} of the imported reference night "
                    "is not in its checkout)")
        return record.diff or "(no change: the baseline)"


def experiment_logs(records: list[ExperimentRecord], record: ExperimentRecord) -> list[str]:
    """Every training log of an experiment, in the order they ran: its crashed attempts before fixes, its
    runs (the first, re-runs), and the noise-floor runs of it."""
    logs = [attempt.log for attempt in record.fix_attempts if attempt.log]
    logs += [run.log for run in record.runs if run.log]
    if not logs:
        logs.append(record.log or f"logs/{record.id}.log")
    logs += [run.log for other in records if other.status == ExperimentStatus.NOISE and other.of == record.id
             for run in other.runs if run.log]
    return list(dict.fromkeys(logs))
