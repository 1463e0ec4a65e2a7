"""The results ledger of a workspace: experiments.jsonl (the full record) and results.tsv.

experiments.jsonl is the source of truth, one JSON object per line, appended with a single
write of a whole line and fsynced. results.tsv keeps exactly the reference's five columns
and is derived from it, so the two always agree; a torn last line (the agent was killed
mid-write) is dropped when the ledger is opened. current.json marks the experiment in
flight, so that a loop that died during a run can record it once as interrupted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from trainer.atomic import write_text_atomic

TSV_HEADER = "commit\tval_bpb\tmemory_gb\tstatus\tdescription\n"
NOISE = "noise"  # the status of a noise-floor record (re-runs of the best), which is not an experiment
TSV_STATUS = {"keep": "keep", "discard": "discard", "crash": "crash", "interrupted": "crash"}


def append_line(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def read_records(directory: Path) -> list[dict]:
    """The experiments of a workspace, read-only: a torn last line is skipped, not repaired."""
    path = directory / "experiments.jsonl"
    if not path.exists():
        return []
    data = path.read_bytes()
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].decode("utf-8").splitlines() if line.strip()]


class Ledger:
    def __init__(self, directory: Path):
        self.jsonl = directory / "experiments.jsonl"
        self.tsv = directory / "results.tsv"
        self.current = directory / "current.json"
        self.records: list[dict] = self._load()
        self._sync_tsv()

    def _load(self) -> list[dict]:
        if not self.jsonl.exists():
            return []
        data = self.jsonl.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) != len(data):  # a torn last line: the write never finished
            write_text_atomic(self.jsonl, complete.decode("utf-8"))
        return [json.loads(line) for line in complete.decode("utf-8").splitlines() if line.strip()]

    def _sync_tsv(self) -> None:
        expected = TSV_HEADER + "".join(tsv_row(r) for r in self.records)
        if not self.tsv.exists() or self.tsv.read_text() != expected:
            write_text_atomic(self.tsv, expected)

    def append(self, record: dict) -> None:
        append_line(self.jsonl, json.dumps(record, sort_keys=True) + "\n")
        append_line(self.tsv, tsv_row(record))
        self.records.append(record)

    # -- reading ------------------------------------------------------------

    def next_id(self) -> str:
        return f"{sum(1 for r in self.records if r['status'] != NOISE):04d}"

    def best(self) -> dict | None:
        kept = [r for r in self.records if r["status"] == "keep"]
        return kept[-1] if kept else None

    def has(self, experiment_id: str) -> bool:
        return any(r["id"] == experiment_id for r in self.records)

    # -- the experiment in flight -------------------------------------------

    def begin(self, in_flight: dict) -> None:
        write_text_atomic(self.current, json.dumps(in_flight, sort_keys=True))

    def in_flight(self) -> dict | None:
        try:
            return json.loads(self.current.read_text())
        except (OSError, ValueError):
            return None

    def finish(self) -> None:
        self.current.unlink(missing_ok=True)


def tsv_row(record: dict) -> str:
    if record["status"] == NOISE:
        return ""
    val = record.get("val_bpb")
    memory_gb = (record.get("peak_vram_mb") or 0.0) / 1024
    description = " ".join(str(record.get("description", "")).split())
    return (f"{record.get('commit', '')[:7]}\t{val if val is not None else 0.0:.6f}\t{memory_gb:.1f}\t"
            f"{TSV_STATUS[record['status']]}\t{description}\n")
