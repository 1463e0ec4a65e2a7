"""Which runs are salvaged and what their salvage makes of them (the loop's own test is tests/agent/test_salvage.py):
only a run that died after its seal, on the trusted evaluator's number, with a smaller batch after running out of
memory; a run whose weights cannot be scored stays the crash it was."""

import hashlib
from types import SimpleNamespace

import pytest

from agent.judging.salvage import salvage, salvageable, smaller_batch
from agent.recording.record import RunEntry
from agent.recording.transcript import Transcript
from agent.running.evaluator import EvaluationFailed
from trainer.evaluator.evaluate import BATCH_ROWS, CUDA_BATCH_SCALE
from trainer.evaluator.evaluation import Evaluation
from trainer.runs.run_id import RunId, RunKind
from trainer.runs.run_result import RunResult
from trainer.runs.triage import Triage, Verdict

PRINTED = {"val_bpb": "0.010000"}  # what a run may print before it dies: never its number


NO_NIGHT = SimpleNamespace(settings={})  # a workspace whose night measured no tolerances: the floors apply


class Evaluator:
    """A runner's evaluate: `scores` the weights at `val` (with `lookahead`), or fails; remembers its jobs."""

    def __init__(self, val: float | None = 1.25, lookahead: float = 0.0):
        self.val, self.lookahead, self.jobs = val, lookahead, []

    def evaluate(self, workspace, job):
        self.jobs.append(job)
        if self.val is None:
            raise EvaluationFailed("the evaluator exited 1 (see below)")
        return Evaluation(device="cpu", audit=0.0, audited_tokens=64, repeat=0.0, lookahead=self.lookahead, probes=4,
                          val=self.val)


def died(tmp_path, triage: Triage, sealed: bool = True, device: str = "cpu") -> RunResult:
    checkpoint = tmp_path / "checkpoints" / "0001.pt"
    checkpoint.parent.mkdir(exist_ok=True)
    checkpoint.write_bytes(b"weights")
    log = tmp_path / "logs" / "0001.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text("---\nval_bpb: 0.010000\n")
    return RunResult(returncode=1, timed_out=triage == Triage.TIMEOUT, log_path=log, seconds=3.0, head="", tail="",
                     verdict=Verdict(triage, "what it died of", PRINTED), device=device,
                     checkpoint=checkpoint if sealed else None,
                     checkpoint_sha256=hashlib.sha256(b"weights").hexdigest() if sealed else None,
                     run=RunId.train("0001"))


@pytest.mark.parametrize("triage", [Triage.FIXABLE, Triage.OOM, Triage.TIMEOUT])
def test_a_run_that_died_after_its_seal_is_salvageable_one_before_it_is_not(tmp_path, triage):
    assert salvageable(died(tmp_path, triage))
    assert not salvageable(died(tmp_path, triage, sealed=False))


@pytest.mark.parametrize("triage", [Triage.OK, Triage.OVER_BUDGET, Triage.TAMPER, Triage.INFRA, Triage.DIVERGED,
                                    Triage.INTERRUPTED])
def test_a_finished_refused_tampering_broken_or_diverged_run_is_not_salvaged(tmp_path, triage):
    assert not salvageable(died(tmp_path, triage))


def test_a_salvaged_run_is_ok_on_the_evaluator_s_number_never_the_printed_one(tmp_path):
    evaluator, transcript = Evaluator(val=1.25), Transcript(tmp_path / "t.jsonl")
    result = salvage(NO_NIGHT, evaluator, "c0ffee", died(tmp_path, Triage.FIXABLE), transcript)

    assert result.verdict.triage == Triage.OK and "salvaged after fixable: what it died of" in result.verdict.reason
    job, = evaluator.jobs
    assert job.run == RunId.train("0001").then(RunKind.SALVAGE) and job.probe and job.batch_rows is None
    entry = RunEntry.of(result, 7, tmp_path)
    assert (entry.val_bpb, entry.trusted, entry.salvaged, entry.printed) == (1.25, True, True, None)
    assert entry.salvaged_from == "fixable: what it died of" and entry.check.printed == 0.01
    assert entry.check.trusted == 1.25 and entry.triage == "ok" and entry.checkpoint == "checkpoints/0001.pt"
    assert [e["salvaged"] for e in transcript.events()] == [True]


@pytest.mark.parametrize(("device", "rows"), [("cpu", BATCH_ROWS // 2), ("cuda", BATCH_ROWS * CUDA_BATCH_SCALE // 2)])
def test_the_weights_of_a_run_that_ran_out_of_memory_are_scored_in_smaller_batches(tmp_path, device, rows):
    evaluator = Evaluator()
    salvage(NO_NIGHT, evaluator, "c0ffee", died(tmp_path, Triage.OOM, device=device), Transcript(tmp_path / "t.jsonl"))
    assert evaluator.jobs[0].batch_rows == smaller_batch(device) == rows


def test_weights_the_evaluator_cannot_score_leave_the_crash_as_it_was(tmp_path):
    before = died(tmp_path, Triage.OOM)
    after = salvage(NO_NIGHT, Evaluator(val=None), "c0ffee", before, Transcript(tmp_path / "t.jsonl"))
    assert after is before and RunEntry.of(after, 7, tmp_path).val_bpb is None


def test_weights_changed_since_the_seal_are_not_scored(tmp_path):
    before, evaluator = died(tmp_path, Triage.TIMEOUT), Evaluator()
    before.checkpoint.write_bytes(b"other weights")
    assert salvage(NO_NIGHT, evaluator, "c0ffee", before, Transcript(tmp_path / "t.jsonl")) is before
    assert evaluator.jobs == []


def test_a_salvaged_model_that_looks_ahead_is_tamper(tmp_path):
    after = salvage(NO_NIGHT, Evaluator(lookahead=5.0), "c0ffee", died(tmp_path, Triage.OOM),
                    Transcript(tmp_path / "t.jsonl"))
    assert after.verdict.triage == Triage.TAMPER and "the model looks ahead" in after.verdict.reason
    assert after.salvage is None
