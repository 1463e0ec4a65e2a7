"""experiments.jsonl lines as earlier versions wrote them are read, typed and written back unchanged."""

import json

from agent.judging.noise import fresh_seed
from agent.llm.types import Usage
from agent.recording.history import History
from agent.recording.ledger import Ledger, read_records
from agent.recording.record import ExperimentRecord, ExperimentStatus, RunEntry
from agent.report.summary import headline

BASE, CHANGE = "a" * 40, "b" * 40

# The first ledger format: no per-run entries, evidence, seeds or overlap timings; summary values as strings.
FIRST_VERSION = {
    "id": "0000", "parent": BASE, "commit": BASE, "status": "keep", "triage": "ok", "reason": "baseline",
    "description": "baseline", "val_bpb": 2.5, "peak_vram_mb": 812.5,
    "summary": {"val_bpb": "2.500000", "training_seconds": "12.0", "device": "cpu"},
    "model_config": {"n_layer": 2, "n_embd": 64}, "returncode": 0, "timed_out": False, "frozen_changed": [],
    "timings": {"propose_s": 0.0, "run_s": 14.2, "total_s": 14.9}, "proposer": "baseline", "proposal": {},
    "llm": {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0},
    "program": {"name": "program", "sha256": "c" * 64}, "diff": "", "log": "logs/0000.log", "log_tail": "",
    "transcript": "transcripts/0000.jsonl", "started": "2026-11-30T21:00:00+0000",
    "finished": "2026-11-30T21:00:15+0000"}
# An experiment interrupted under an older loop: no runs, no timings, a program without its hash.
INTERRUPTED = {
    "id": "0001", "parent": BASE, "commit": CHANGE, "status": "interrupted", "triage": "interrupted",
    "reason": "the loop stopped while this experiment ran", "description": "LR 0.04 -> 0.05", "val_bpb": None,
    "peak_vram_mb": None, "summary": {}, "proposal": {"trial": 0}, "program": {"name": None},
    "transcript": "transcripts/0001.jsonl", "started": "2026-11-30T21:01:00+0000",
    "finished": "2026-11-30T21:01:30+0000"}
NOISE_FLOOR = {
    "id": "0000-noise", "status": "noise", "triage": "ok", "of": "0000", "parent": BASE, "commit": BASE,
    "description": "noise floor: 0000 re-run with seeds 43, 44", "val_bpb": 2.51,
    "runs": [{"seed": 43, "val_bpb": 2.52, "training_seconds": 12.0, "seconds": 14.0, "log": "logs/0000-noise1.log"},
             {"seed": 44, "val_bpb": 2.51, "training_seconds": 12.0, "seconds": 14.0, "log": "logs/0000-noise2.log"}],
    "values": [2.5, 2.52, 2.51], "sigma": 0.01, "peak_vram_mb": None, "timings": {"run_s": 28.0, "total_s": 28.3},
    "transcript": "transcripts/0000-noise.jsonl", "started": "2026-11-30T21:02:00+0000",
    "finished": "2026-11-30T21:02:30+0000"}
# A line of a newer version: keys this one does not know, at the top and inside a run and the evidence.
NEWER_VERSION = {
    "id": "0002", "parent": BASE, "commit": CHANGE, "status": "discard", "triage": "ok", "val_bpb": 2.6,
    "description": "WARMDOWN 0.3 -> 0.4", "hypothesis": "a longer warm-down helps", "confidence": "high",
    "verified": False,
    "runs": [{"seed": 45, "val_bpb": 2.6, "gpu_temperature": 71}],
    "evidence": {"gain": -0.09, "rule": "gain > 0", "flavour": "new"},
    "llm": {"input_tokens": 1000, "output_tokens": 200, "cost_usd": 0.02, "calls": 2, "reasoning_tokens": 50},
    "started": "2026-11-30T21:03:00+0000", "finished": "2026-11-30T21:03:30+0000"}
LINES = [FIRST_VERSION, INTERRUPTED, NOISE_FLOOR, NEWER_VERSION]


def write(directory, records):
    (directory / "experiments.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_lines_of_older_and_newer_versions_are_read_typed(tmp_path):
    write(tmp_path, LINES)
    first, interrupted, floor, newer = read_records(tmp_path)
    assert first.status is ExperimentStatus.KEEP and first.runs == [] and first.measured == [2.5]
    assert first.architecture == {"n_layer": 2, "n_embd": 64} and first.timings.wait_s is None
    assert first.llm.cost_usd == 0.0 and first.program.sha256 == "c" * 64
    assert interrupted.status is ExperimentStatus.INTERRUPTED and interrupted.program.name is None
    assert interrupted.measured == [] and interrupted.llm.calls == 0
    assert floor.runs[1] == RunEntry(seed=44, val_bpb=2.51, training_seconds=12.0, seconds=14.0,
                                     log="logs/0000-noise2.log")
    assert not floor.is_experiment and newer.is_experiment
    assert newer.model_extra == {"confidence": "high"} and newer.hypothesis == "a longer warm-down helps"
    assert first.hypothesis == "" and first.lesson_for is None and first.kept_as == "keep"  # older lines read too
    assert newer.runs[0].model_extra == {"gpu_temperature": 71} and newer.evidence.model_extra == {"flavour": "new"}
    # The numbers every reader derives from them.
    records = [first, interrupted, floor, newer]
    assert History(records).runs_of(BASE) == [2.5, 2.52, 2.51] and History(records).sigma() == 0.01
    assert fresh_seed(records, 42) not in {42, 43, 44, 45}
    summary = headline(records)
    assert (summary.experiments, summary.keeps, summary.tokens, summary.cost_usd) == (3, 0, 1200, 0.02)


def test_an_imported_number_counts_only_until_this_harness_measured_the_commit(tmp_path):
    imported = dict(FIRST_VERSION, val_bpb=1.9, imported={"source": "/ref", "line": 2, "reference_commit": "abc1234"})
    write(tmp_path, [imported])
    assert History(read_records(tmp_path)).runs_of(BASE) == [1.9]
    write(tmp_path, [imported, NOISE_FLOOR])
    assert History(read_records(tmp_path)).runs_of(BASE) == [2.52, 2.51]


def test_records_are_written_back_with_exactly_the_keys_they_were_read_with(tmp_path):
    write(tmp_path, LINES)
    ledger = Ledger(tmp_path)
    assert ledger.set_aside == [] and [r.id for r in ledger.records] == ["0000", "0001", "0000-noise", "0002"]
    for original, record in zip(LINES, ledger.records, strict=True):
        assert json.loads(record.to_json()) == original
    assert (tmp_path / "results.tsv").read_text().splitlines()[1:] == [
        "aaaaaaa\t2.500000\t0.8\tkeep\tbaseline", "bbbbbbb\t0.000000\t0.0\tcrash\tLR 0.04 -> 0.05",
        "bbbbbbb\t2.600000\t0.0\tdiscard\tWARMDOWN 0.3 -> 0.4"]
    assert ledger.best().id == "0000"


def test_a_line_whose_known_keys_have_the_wrong_type_is_set_aside_not_crashed_on(tmp_path):
    bad = dict(FIRST_VERSION, id="0001", runs="not a list")
    write(tmp_path, [FIRST_VERSION, bad])
    ledger = Ledger(tmp_path)
    assert [r.id for r in ledger.records] == ["0000"]
    assert len(ledger.set_aside) == 1 and "line 2" in ledger.set_aside[0] and "runs" in ledger.set_aside[0]


def test_a_new_record_is_written_with_the_keys_it_was_built_with(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(ExperimentRecord(id="0000", status=ExperimentStatus.CRASH, val_bpb=None, architecture={"d": 1},
                                   llm=Usage.total(Usage(cost_usd=0.5, calls=1), Usage(cost_usd=0.25, calls=1))))
    line = json.loads((tmp_path / "experiments.jsonl").read_text())
    assert line == {"id": "0000", "status": "crash", "val_bpb": None, "model_config": {"d": 1},
                    "llm": {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0,
                            "cache_write_1h_tokens": 0, "thinking_tokens": 0, "cost_usd": 0.75, "calls": 2}}
