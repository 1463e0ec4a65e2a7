"""classify and parse_summary: what happened to a run, from its exit, its log and the frozen-file check."""

import pytest

from trainer.runs.triage import AFTER_SEAL, Triage, classify, parse_summary

PROGRESS = "step 00000 (  0.0%) | loss 10.8000 | lr x1.00 | 900 ms | 1,000 tok/s | mfu n/a | epoch 1\n"
GOOD_LOG = PROGRESS + "---\nval_bpb: 1.234567\ntraining_seconds: 300.1\ndepth: 8\n"


def traceback(last_line: str) -> str:
    return (PROGRESS + "Traceback (most recent call last):\n"
            '  File "/work/train.py", line 533, in main\n'
            "    model = build_model(config, device, attend)\n" + last_line + "\n")


CASES = [
    ("ok", 0, False, GOOD_LOG, [], Triage.OK, "val_bpb 1.234567"),
    ("ok despite an infra word in a clean run", 0, False, "warning: No space left on device\n" + GOOD_LOG, [],
     Triage.OK, "val_bpb 1.234567"),
    ("tamper: frozen file changed", 0, False, GOOD_LOG, ["prepare.py", "track.json"], Triage.TAMPER,
     "frozen files changed during the run: prepare.py, track.json"),
    ("tamper: frozen change beats timeout", None, True, PROGRESS, ["prepare.py"], Triage.TAMPER,
     "frozen files changed during the run: prepare.py"),
    ("tamper: exit 0 without val_bpb", 0, False, PROGRESS + "---\ntraining_seconds: 300.1\n", [], Triage.TAMPER,
     "exited 0 without a val_bpb in its summary"),
    ("tamper: exit 0 without any summary", 0, False, PROGRESS, [], Triage.TAMPER,
     "exited 0 without a val_bpb in its summary"),
    ("tamper: val_bpb nan", 0, False, PROGRESS + "---\nval_bpb: nan\n", [], Triage.TAMPER,
     "exited 0 with an impossible val_bpb (not a number in (0, 64])"),
    ("tamper: val_bpb zero", 0, False, PROGRESS + "---\nval_bpb: 0.000000\n", [], Triage.TAMPER,
     "exited 0 with an impossible val_bpb (not a number in (0, 64])"),
    ("timeout even with a traceback", -9, True, traceback("NameError: name 'x' is not defined"), [],
     Triage.TIMEOUT, "killed at the hard timeout (the whole process group)"),
    ("diverged", 1, False, PROGRESS + "FAIL: training diverged at step 5: loss nan\n", [], Triage.DIVERGED,
     "training diverged at step 5: loss nan"),
    ("oom: CUDA out of memory", 1, False,
     traceback("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"), [], Triage.OOM,
     "out of memory: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    ("oom: SIGKILL without a message", -9, False, PROGRESS, [], Triage.OOM,
     "killed by SIGKILL (most likely the kernel's out-of-memory killer)"),
    ("infra: track not prepared", 1, False,
     traceback("prepare.PrepareError: track 'test' is not prepared in /x: run `autoresearch prepare`"), [],
     Triage.INFRA, "the machine or its data failed: prepare.PrepareError: track 'test' is not prepared in /x: "
     "run `autoresearch prepare`"),
    ("infra: disk full", 1, False, traceback("OSError: [Errno 28] No space left on device"), [], Triage.INFRA,
     "the machine or its data failed: OSError: [Errno 28] No space left on device"),
    ("infra: no GPU", 1, False, traceback("RuntimeError: no CUDA-capable device is detected"), [], Triage.INFRA,
     "the machine or its data failed: RuntimeError: no CUDA-capable device is detected"),
    ("fixable: NameError", 1, False, traceback("NameError: name 'DEPHT' is not defined"), [], Triage.FIXABLE,
     "NameError: name 'DEPHT' is not defined"),
    ("fixable: exit 1 without a traceback", 1, False, PROGRESS, [], Triage.FIXABLE,
     "exited with code 1 and no traceback"),
]


@pytest.mark.parametrize(("returncode", "timed_out", "log", "frozen_changed", "triage", "reason"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_classify(returncode, timed_out, log, frozen_changed, triage, reason):
    verdict = classify(returncode, timed_out, log, frozen_changed)
    assert (verdict.triage, verdict.reason) == (triage, reason)


def test_an_ok_verdict_carries_the_parsed_summary():
    verdict = classify(0, False, GOOD_LOG, [])
    assert verdict.summary == {"val_bpb": "1.234567", "training_seconds": "300.1", "depth": "8"}


def test_parse_summary_reads_only_after_the_last_separator():
    log = ("---\nval_bpb: 9.9\nstale: 1\n" + PROGRESS
           + "---\nval_bpb: 1.5\ndevice: NVIDIA H200\nnote: a: b\n")
    assert parse_summary(log) == {"val_bpb": "1.5", "device": "NVIDIA H200", "note": "a: b"}


def test_parse_summary_ignores_lines_that_are_not_key_value():
    log = ("---\nval_bpb: 1.5\n" + PROGRESS + "no colon here\n: no key\nmfu percent: 40\n----\n"
           "  depth :  8  \nmfu_percent:\n")
    assert parse_summary(log) == {"val_bpb": "1.5", "depth": "8", "mfu_percent": ""}


def test_parse_summary_without_a_separator_is_empty():
    assert parse_summary(PROGRESS + "val_bpb: 1.5\n-- -\n --- \n") == {}


def test_a_run_that_printed_after_its_seal_is_never_quoted():
    """A reason reaches the proposers: after the seal the run could pick, from lines it printed before, the one
    that spells what it read of val. Where it printed anything after its seal, no line is quoted."""
    log = traceback("ValueError: VB 3f") + "FAIL: VB 3f\n"
    for returncode, words in ((1, "diverged"), (0, "tamper")):
        said = classify(returncode, False, log + ("---\nval_bpb: 277088294822940.0\n" if returncode == 0 else ""),
                        [], quote=False)
        assert "3f" not in said.reason and "277088" not in said.reason and said.triage.value == words
    assert classify(1, False, traceback("ValueError: VB 3f"), [], quote=False).reason == AFTER_SEAL
    assert classify(1, False, traceback("ValueError: VB 3f"), []).reason == "ValueError: VB 3f"
