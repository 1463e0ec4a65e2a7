"""The trusted evaluator's checks (RunEntry.check, Evidence.verification) and confirmation.json, typed: lines and
files as earlier versions wrote them are read into the types and written back byte for byte."""

import json

from agent.recording.confirmation import Confirmation, read_confirmation
from agent.recording.record import Check, ExperimentRecord, Verification

# What verify.py wrote for one run scored on val and holdout (its keys in the order it built them).
CHECK = {"seed": 42, "printed": 1.210135, "trusted": 1.210134, "gap": 6.000000000061512e-07, "tolerance": 1e-05,
         "lookahead": 0.0, "probes": 24, "audit": 2.384185791015625e-07, "audited_tokens": 2048, "repeat": 0.0,
         "device": "cpu", "seconds": 41.337, "holdout": 1.284511}
KEEP = {"id": "0003", "status": "keep", "commit": "c" * 40, "verified": True, "val_bpb": 1.210134,
        "runs": [{"seed": 42, "val_bpb": 1.210134, "printed": 1.210135, "trusted": True, "holdout_bpb": 1.284511,
                  "check": CHECK, "checkpoint": "checkpoints/0003.pt", "device": "cpu", "log": "logs/0003.log"}],
        "evidence": {"gain": 0.01, "verification": {"checks": [CHECK], "verify_s": 41.337}}}
# A tamper found before any run was scored: no checks, and the sum of no seconds is the integer 0.
TAMPER = {"id": "0004", "status": "crash", "triage": "tamper",
          "runs": [{"seed": 43, "val_bpb": None, "printed": 0.5, "check": None}],
          "evidence": {"verification": {"checks": [], "verify_s": 0}}}
# An older evaluator said nothing of probes; a newer one may say more than this version knows.
OLDER_AND_NEWER = {"id": "0005", "status": "discard",
                   "runs": [{"seed": 44, "check": {**CHECK, "probes": None, "found_later": [1, 2]}}],
                   "evidence": {"verification": {"checks": [{**CHECK, "probes": None, "found_later": [1, 2]}],
                                                 "verify_s": 41.337, "by": "a newer version"}}}


def test_records_with_checks_are_typed_and_written_back_unchanged():
    for written in (KEEP, TAMPER, OLDER_AND_NEWER):
        line = json.dumps(written, sort_keys=True)
        record = ExperimentRecord.model_validate_json(line)
        assert record.to_json() == line
    keep = ExperimentRecord.model_validate_json(json.dumps(KEEP))
    check = keep.runs[0].check
    assert isinstance(check, Check) and isinstance(keep.evidence.verification, Verification)
    assert keep.evidence.verification.checks == [check] and check.holdout == 1.284511 and check.probes == 24
    assert ExperimentRecord.model_validate_json(json.dumps(TAMPER)).evidence.verification.verify_s == 0


def test_a_check_writes_the_keys_it_was_built_with_in_the_order_built():
    without_holdout = {key: value for key, value in CHECK.items() if key != "holdout"}
    assert Check(**without_holdout).model_dump(exclude_unset=True) == without_holdout
    built = Check(**without_holdout)
    built.holdout = CHECK["holdout"]
    assert list(built.model_dump(exclude_unset=True)) == list(CHECK)
    verification = Verification(checks=[built], verify_s=41.337)
    assert json.dumps(verification.as_written()) == json.dumps({"checks": [CHECK], "verify_s": 41.337})


# confirmation.json as agent/judging/confirm.py wrote it: its keys in this order, on one line.
CONFIRMED = {"time": "2025-01-02T03:04:05+0000", "sigma": 0.0012,
             "baseline": {"id": "0000", "commit": "a" * 40, "description": "baseline", "search_val": 1.31,
                          "runs": 3, "val": 1.3100012, "holdout": 1.35},
             "best": {"id": "0004", "commit": "b" * 40, "description": "DEPTH 4 -> 2", "search_val": 1.25,
                      "runs": 1, "val": 1.2500004, "holdout": 1.3},
             "search_gain": 0.06000000000000005, "holdout_gain": 0.050000000000000044}


def test_confirmation_is_read_and_written_as_before(tmp_path):
    text = json.dumps(CONFIRMED) + "\n"
    (tmp_path / "confirmation.json").write_text(text)
    confirmation = read_confirmation(tmp_path)
    assert confirmation.best.holdout == 1.3 and confirmation.baseline.runs == 3 and confirmation.sigma == 0.0012
    (tmp_path / "confirmation.json").unlink()
    confirmation.write(tmp_path)
    assert (tmp_path / "confirmation.json").read_text() == text
    assert Confirmation.model_validate({**CONFIRMED, "sigma": None}).sigma is None


def test_a_missing_or_unreadable_confirmation_is_none(tmp_path):
    assert read_confirmation(tmp_path) is None
    (tmp_path / "confirmation.json").write_text("{not json")
    assert read_confirmation(tmp_path) is None
    (tmp_path / "confirmation.json").write_text(json.dumps({**CONFIRMED, "best": {"id": "0004"}}))
    assert read_confirmation(tmp_path) is None
