"""The evaluator's result, typed from the pipe it is handed back through to a run's check: what comes back is the
Evaluation or nothing, a result that does not parse is no result, nothing is read out of the evaluator's log, and
verify.py writes the keys it always wrote."""

import fcntl
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent.judging.verify import Untrusted, score_run, verification_evidence
from agent.recording.record import RunEntry
from agent.running.evaluator import EvaluationFailed, evaluation_of
from trainer.evaluator.evaluation import RESULT_LIMIT, Evaluation, EvaluationOutcome, read_result
from trainer.files.hashing import file_sha256
from trainer.runs.jobs import EvaluationJob
from trainer.runs.run_id import RunId, RunKind
from trainer.runs.training_run import TRACKED, evaluate_commit

FOUND = dict(device="cpu", audit=2.384185791015625e-07, audited_tokens=2048, repeat=0.0, lookahead=0.0, probes=24)
ROOT = Path(__file__).resolve().parents[3]


def handed_back(text: bytes) -> tuple[Evaluation | None, str | None]:
    read, write = os.pipe()
    os.write(write, text)
    os.close(write)
    return read_result(read)


def test_what_the_pipe_carries_is_the_evaluation():
    both = Evaluation(**FOUND, val=1.2101, holdout=1.2845)
    assert handed_back(both.model_dump_json().encode()) == (both, None)
    assert handed_back(b"") == (None, "it handed back no result")


def test_a_result_behind_padding_or_a_pipe_someone_still_holds_is_no_result():
    # a forged result padded past the limit, the evaluator's own written behind it: nothing of it is believed
    padded = Evaluation(**FOUND, val=0.5).model_dump_json().encode() + b" " * RESULT_LIMIT
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4 * RESULT_LIMIT)
    os.write(write, padded + Evaluation(**FOUND, val=1.2101).model_dump_json().encode())
    os.close(write)
    assert read_result(read) == (None, "it handed back more than a result")
    read, write = os.pipe()
    os.write(write, Evaluation(**FOUND, val=1.2101).model_dump_json().encode())
    try:
        assert read_result(read) == (None, "its result pipe was still held open")
    finally:
        os.close(write)


@pytest.mark.parametrize("text", [
    "{not json",
    json.dumps({**FOUND}),                                  # no val
    json.dumps({**FOUND, "val": 1.0, "audit": "none"}),
    json.dumps({**FOUND, "val": 1.0, "trusted": True}),     # a key the evaluator never writes
    json.dumps({**FOUND, "val": float("nan")}),              # NaN compares false with any limit
    json.dumps({**FOUND, "val": 1.0, "audit": float("nan")}),
    json.dumps({**FOUND, "val": float("-inf")}),
])
def test_a_result_that_does_not_parse_is_no_result(text):
    assert handed_back(text.encode()) == (None, "the result it handed back does not parse")


def stand_in_evaluator(tmp_path: Path, body: str) -> str:
    """An interpreter in python's place for `python -m trainer.evaluator.evaluate ...`: body runs with `fd`, the
    result pipe."""
    script = tmp_path / "python"
    script.write_text(f"#!{sys.executable}\nimport os, sys\nfd = int(sys.argv[sys.argv.index('--result-fd') + 1])\n"
                      f"{body}\n")
    script.chmod(0o755)
    return str(script)


def evaluated(tmp_path: Path, body: str) -> EvaluationOutcome:
    files = {name: (ROOT / "trainer" / name).read_bytes() if name != "track.json" else b"{}" for name in TRACKED}
    job = EvaluationJob(run=RunId.train("0001").then(RunKind.VERIFY), commit="c" * 40,
                        checkpoint=tmp_path / "0001.pt", probe=True, timeout=60)
    return evaluate_commit(files, job, run_dir=tmp_path / "run", log_path=tmp_path / "verify-0001.log",
                           python=stand_in_evaluator(tmp_path, body))


def test_an_evaluation_comes_back_through_the_pipe_and_never_out_of_the_log(tmp_path):
    found = Evaluation(**FOUND, val=1.2101)
    outcome = evaluated(tmp_path, f"os.write(fd, {found.model_dump_json()!r}.encode())")
    assert outcome.returncode == 0 and outcome.evaluation == found
    assert evaluation_of(outcome, tmp_path / "verify-0001.log", tmp_path / "0001.pt") == found
    # what a model process could print: the old result line in the log, and a clean exit
    line = "EVALUATION " + Evaluation(**FOUND, val=0.5).model_dump_json()
    forged = evaluated(tmp_path, f"print({line!r})")
    assert line in (tmp_path / "verify-0001.log").read_text()
    assert forged.returncode == 0 and forged.evaluation is None
    with pytest.raises(EvaluationFailed, match=r"exited 0 on 0001.pt \(it handed back no result\).*verify-0001.log"):
        evaluation_of(forged, tmp_path / "verify-0001.log", tmp_path / "0001.pt")


def test_a_result_from_an_evaluator_that_then_failed_is_no_result(tmp_path):
    found = Evaluation(**FOUND, val=1.2101).model_dump_json()
    outcome = evaluated(tmp_path, f"os.write(fd, {found!r}.encode()); sys.exit(1)")
    assert outcome.returncode == 1 and outcome.evaluation is None
    with pytest.raises(EvaluationFailed, match=r"exited 1 on 0001.pt \(see its log\)"):
        evaluation_of(outcome, tmp_path / "verify-0001.log", tmp_path / "0001.pt")


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
