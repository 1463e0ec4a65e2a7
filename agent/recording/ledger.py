"""The results ledger of a workspace: experiments.jsonl (the full record) and results.tsv.

experiments.jsonl is the source of truth, one JSON object per line, appended with a single write of a whole line
and fsynced. results.tsv keeps exactly the reference's five columns and is derived from it, so the two always
agree; a torn last line (the agent was killed mid-write) is dropped when the ledger is opened. A marker per
experiment in flight (inflight/<id>.json) lets a loop that died during runs record each once as interrupted. A
line that is not a record (not JSON, no status) is moved, with its line number, to experiments.quarantine.jsonl
when the ledger is opened for writing, and skipped when it is only read.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from agent.recording.history import History
from agent.recording.record import ExperimentRecord, ExperimentStatus
from trainer.files.atomic import write_text_atomic

IN_FLIGHT_DIR = "inflight"  # one <id>.json per experiment in flight
LEGACY_IN_FLIGHT = "current.json"  # the single marker of versions that ran one experiment at a time
TSV_HEADER = "commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"
QUARANTINE = "experiments.quarantine.jsonl"  # lines of experiments.jsonl that were not records, with their numbers
TSV_STATUS = {ExperimentStatus.KEEP: "keep", ExperimentStatus.DISCARD: "discard", ExperimentStatus.CRASH: "crash",
              ExperimentStatus.INTERRUPTED: "crash", ExperimentStatus.SUPERSEDED: "discard"}


def append_line(path: Path, line: str) -> None:
    """Appends a whole line or nothing: a write the disk cut short is taken back and raised as ENOSPC."""
    data = line.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if os.write(fd, data) != len(data):
            os.ftruncate(fd, size)
            raise OSError(errno.ENOSPC, f"only part of a line could be appended to {path}", str(path))
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class BadLine:
    number: int      # 1-based line number in experiments.jsonl
    problem: str
    text: str        # the line as it was

    def describe(self, path: Path, moved: bool = True) -> str:
        where = path.with_name(QUARANTINE)
        return (f"{path} line {self.number} is not an experiment record ({self.problem}); "
                + (f"it was set aside in {where}" if moved else f"skipped here; `run` sets it aside in {where}")
                + " and the other records are used")


def parse_records(data: bytes) -> tuple[list[ExperimentRecord], list[BadLine]]:
    """The records of the complete lines of experiments.jsonl, and the lines that are not records."""
    records, bad = [], []
    for number, line in enumerate(data[: data.rfind(b"\n") + 1].decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(ExperimentRecord.model_validate_json(line))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            bad.append(BadLine(number, f"{where + ': ' if where else ''}{first['msg']}"[:200], line))
    return records, bad


def read_records(directory: Path) -> list[ExperimentRecord]:
    """The experiments of a workspace, read-only: a torn last line and lines that are not records are skipped."""
    return read_ledger(directory)[0]


def read_ledger(directory: Path) -> tuple[list[ExperimentRecord], list[BadLine]]:
    path = directory / "experiments.jsonl"
    return parse_records(path.read_bytes()) if path.exists() else ([], [])


class Ledger:
    def __init__(self, directory: Path):
        self.jsonl = directory / "experiments.jsonl"
        self.tsv = directory / "results.tsv"
        self.current = directory / LEGACY_IN_FLIGHT
        self.in_flight_dir = directory / IN_FLIGHT_DIR
        self.set_aside: list[str] = []  # what _load moved to the quarantine file, for the user
        self.records: list[ExperimentRecord] = self._load()
        expected = TSV_HEADER + "".join(tsv_row(r) for r in self.records)
        if not self.tsv.exists() or self.tsv.read_text() != expected:
            write_text_atomic(self.tsv, expected)

    def _load(self) -> list[ExperimentRecord]:
        if not self.jsonl.exists():
            return []
        data = self.jsonl.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        records, bad = parse_records(data)
        if bad:
            quarantine = self.jsonl.with_name(QUARANTINE)
            for line in bad:
                append_line(quarantine, json.dumps(dict(line=line.number, problem=line.problem, text=line.text)) + "\n")
                self.set_aside.append(line.describe(self.jsonl))
            kept = {line.number for line in bad}
            good = [t for n, t in enumerate(complete.decode("utf-8", errors="replace").splitlines(), 1)
                    if n not in kept and t.strip()]
            write_text_atomic(self.jsonl, "".join(t + "\n" for t in good))
        elif len(complete) != len(data):  # a torn last line: the write never finished
            write_text_atomic(self.jsonl, complete.decode("utf-8"))
        return records

    def append(self, record: ExperimentRecord) -> None:
        append_line(self.jsonl, record.to_json() + "\n")
        append_line(self.tsv, tsv_row(record))
        self.records.append(record)

    def history(self) -> History:
        return History(self.records)

    def best(self) -> ExperimentRecord | None:
        return self.history().best()

    def head(self) -> ExperimentRecord | None:
        return self.history().head()

    def has(self, experiment_id: str) -> bool:
        return any(r.id == experiment_id for r in self.records)

    def prune_checkpoints(self, in_use: set[Path]) -> None:
        """Keeps the weights of every keep (`confirm` scores each in order; falls are measured from the last the
        holdout split checked) and those in use by records not written yet (a would-be keep is verified from
        them); the rest go."""
        workspace_dir = self.jsonl.parent
        wanted = {workspace_dir / r.checkpoint for r in self.history().kept() if r.checkpoint} | in_use
        for path in (workspace_dir / "checkpoints").glob("*.pt"):
            if path not in wanted:
                path.unlink(missing_ok=True)

    def save_draft(self, draft: ExperimentRecord) -> None:
        """Writes (or updates) the in-flight marker: the experiment's record as far as it is filled in."""
        self.in_flight_dir.mkdir(exist_ok=True)
        write_text_atomic(self.in_flight_dir / f"{draft.id}.json", draft.to_json())

    def finish(self, experiment_id: str) -> None:
        """The experiment is recorded (or was never started): its in-flight marker goes."""
        (self.in_flight_dir / f"{experiment_id}.json").unlink(missing_ok=True)
        if (legacy := read_in_flight_file(self.current)) is None or legacy.id == experiment_id:
            self.current.unlink(missing_ok=True)

    def clear_in_flight(self) -> None:
        for marker in self.in_flight_dir.glob("*.json"):
            marker.unlink(missing_ok=True)
        self.current.unlink(missing_ok=True)


def read_in_flight(directory: Path) -> list[ExperimentRecord]:
    """The experiments in flight in a workspace, by id (unreadable markers are skipped)."""
    markers = sorted((directory / IN_FLIGHT_DIR).glob("*.json")) + [directory / LEGACY_IN_FLIGHT]
    found = {m.id: m for m in map(read_in_flight_file, markers) if m is not None}
    return [found[key] for key in sorted(found)]


def read_in_flight_file(path: Path) -> ExperimentRecord | None:
    """A draft record; a marker of an earlier version (no status, the program by name) is read as one."""
    try:
        marker = json.loads(path.read_bytes())
        marker.setdefault("status", ExperimentStatus.PENDING.value)
        marker.pop("pid", None), marker.pop("seed", None)
        if isinstance(marker.get("program"), str):
            marker["program"] = {"name": marker["program"]}
        return ExperimentRecord.model_validate(marker)
    except (OSError, ValueError, AttributeError):
        return None


def tsv_row(record: ExperimentRecord) -> str:
    if not record.is_experiment:
        return ""
    memory_gb = (record.peak_vram_mb or 0.0) / 1024
    return (f"{record.commit[:7]}\t{record.val_bpb or 0.0:.6f}\t{memory_gb:.1f}\t"
            f"{TSV_STATUS[record.status]}\t{' '.join(record.description.split())}\n")
