"""The evaluator's result, typed on its way from the EVALUATION line of its log to a run's check: the line keeps
its format, a result that does not parse is no result, and verify.py writes the keys it always wrote."""

import json
from types import SimpleNamespace

import pytest

from agent.judging.verify import Untrusted, score_run, verification_evidence
from agent.recording.record import RunEntry
from agent.running.evaluator import EvaluationFailed, parse_evaluation
from trainer.evaluation import RESULT_PREFIX, Evaluation, EvaluationOutcome, evaluation_in
from trainer.hashing import file_sha256
from trainer.run_id import RunId

FOUND = dict(device="cpu", audit=2.384185791015625e-07, audited_tokens=2048, repeat=0.0, lookahead=0.0, probes=24)
CLEAN = EvaluationOutcome(returncode=0, timed_out=False, seconds=3.5, isolated=True)


def test_the_result_line_is_the_one_evaluate_py_always_printed():
    both = Evaluation(**FOUND, val=1.2101, holdout=1.2845)
    assert both.log_line() == RESULT_PREFIX + json.dumps({**FOUND, "val": 1.2101, "holdout": 1.2845})
    assert Evaluation(**FOUND, val=1.2101).log_line() == RESULT_PREFIX + json.dumps({**FOUND, "val": 1.2101})
    assert evaluation_in(["val: 1.2", both.log_line(), "done"]) == both
    assert evaluation_in(["val: 1.2"]) is None


def test_the_last_result_line_of_a_clean_exit_is_the_evaluation(tmp_path):
    log = tmp_path / "verify-0001.log"
    earlier = Evaluation(**FOUND, val=9.0).log_line()
    log.write_text(f"{earlier}\nval: 1.210100\n{Evaluation(**FOUND, val=1.2101).log_line()}\n")
    assert parse_evaluation(log, CLEAN, tmp_path / "0001.pt") == Evaluation(**FOUND, val=1.2101)
    with pytest.raises(EvaluationFailed, match="exited 1 on 0001.pt"):
        parse_evaluation(log, CLEAN.model_copy(update={"returncode": 1}), tmp_path / "0001.pt")


@pytest.mark.parametrize("line", [
    RESULT_PREFIX + "{not json",
    RESULT_PREFIX + json.dumps({**FOUND}),                                  # no val
    RESULT_PREFIX + json.dumps({**FOUND, "val": 1.0, "audit": "none"}),
    RESULT_PREFIX + json.dumps({**FOUND, "val": 1.0, "trusted": True}),     # a key the evaluator never writes
    RESULT_PREFIX + json.dumps({**FOUND, "val": float("nan")}),              # NaN compares false with any limit
    RESULT_PREFIX + json.dumps({**FOUND, "val": 1.0, "audit": float("nan")}),
    RESULT_PREFIX + json.dumps({**FOUND, "val": float("-inf")}),
])
def test_a_result_line_that_does_not_parse_fails_the_evaluation(tmp_path, line):
    log = tmp_path / "verify-0001.log"
    log.write_text(line + "\n")
    with pytest.raises(EvaluationFailed, match="does not parse"):
        parse_evaluation(log, CLEAN, tmp_path / "0001.pt")


class ScoresWith:
    def __init__(self, evaluation: Evaluation):
        self.evaluation = evaluation

    def evaluate(self, *asked, **options) -> Evaluation:
        return self.evaluation


def scored_run(tmp_path, evaluation: Evaluation, splits=("val",)) -> RunEntry:
    weights = tmp_path / "checkpoints" / "0001.pt"
    weights.parent.mkdir(exist_ok=True)
    weights.write_bytes(b"weights")
    run = RunEntry(run_id=RunId.train("0001"), seed=42, val_bpb=1.2101, printed=1.2101,
                   checkpoint="checkpoints/0001.pt",
                   checkpoint_sha256=file_sha256(weights), device="cpu", log="logs/0001.log")
    score_run(SimpleNamespace(dir=tmp_path, settings={}), ScoresWith(evaluation), "c" * 40, run, splits)
    return run


WRITTEN = ["seed", "printed", "trusted", "gap", "tolerance", "lookahead", "probes", "audit", "audited_tokens",
           "repeat", "device", "seconds"]


def test_a_scored_run_s_check_has_the_keys_it_always_had(tmp_path):
    run = scored_run(tmp_path, Evaluation(**FOUND, val=1.2101023))
    check = run.check.model_dump(exclude_unset=True)
    assert list(check) == WRITTEN
    assert check["trusted"] == 1.210102 and check["gap"] == pytest.approx(2.3e-6) and check["tolerance"] == 1e-5
    assert run.trusted and run.val_bpb == 1.210102 and run.holdout_bpb is None

    run = scored_run(tmp_path, Evaluation(**FOUND, val=1.2101023, holdout=1.28451234), ("val", "holdout"))
    assert list(run.check.model_dump(exclude_unset=True)) == [*WRITTEN, "holdout"]
    assert run.check.holdout == run.holdout_bpb == 1.284512
    written = verification_evidence([run, RunEntry(seed=7)]).as_written()
    assert list(written) == ["checks", "verify_s"] and written["verify_s"] == run.check.seconds
    assert written["checks"] == [run.check.model_dump(exclude_unset=True)]


def test_a_failed_check_says_what_the_evaluation_found(tmp_path):
    with pytest.raises(Untrusted, match="looks ahead") as raised:
        scored_run(tmp_path, Evaluation(**{**FOUND, "lookahead": 0.5}, val=1.2101))
    assert "24 probes" in str(raised.value)
