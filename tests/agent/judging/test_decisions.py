"""Deciding one experiment from its runs: crash, baseline, the noise-aware verdict, implausible falls."""

from pathlib import Path

import pytest

from agent.judging.decisions import IMPLAUSIBLE_FALL, Standing, decide, implausible_fall
from agent.judging.keep_rule import KeepRule
from agent.judging.noise import CLOSE
from agent.recording.history import History
from agent.recording.record import ExperimentRecord, ExperimentStatus, RunEntry
from agent.running.runner import RunResult
from trainer.runs.triage import Triage, Verdict

BEST = ExperimentRecord(id="0000", status="keep", commit="a" * 40, val_bpb=2.0,
                        runs=[RunEntry(seed=42, val_bpb=2.0)])
FLOOR = ExperimentRecord(id="0000-noise", status="noise", commit="a" * 40, sigma=0.01,
                         runs=[RunEntry(seed=43, val_bpb=2.01), RunEntry(seed=44, val_bpb=1.99)])


def result(triage=Triage.OK, reason="", val_bpb="1.900000"):
    return RunResult(returncode=0 if triage == Triage.OK else 1, timed_out=False, log_path=Path("logs/x.log"),
                     verdict=Verdict(triage, reason, {"val_bpb": val_bpb}), seconds=1.0, head="", tail="")


def test_a_run_that_did_not_finish_cleanly_is_a_crash_naming_its_class():
    judgement = decide(result(Triage.OOM, "CUDA out of memory"), Standing.of(History([BEST]), BEST),
                       [RunEntry(seed=45)], KeepRule())
    assert judgement.status == ExperimentStatus.CRASH and judgement.reason == "oom: CUDA out of memory"


def test_the_baseline_is_kept_on_its_number():
    judgement = decide(result(), Standing.of(History([]), None), [RunEntry(seed=42, val_bpb=2.5)], KeepRule())
    assert judgement.status == ExperimentStatus.KEEP and judgement.reason == "baseline val_bpb 2.500000"


@pytest.mark.parametrize("value, status", [(1.95, ExperimentStatus.KEEP), (1.99, CLOSE), (2.01,
                                                                                          ExperimentStatus.DISCARD)])
def test_a_candidate_is_judged_against_every_run_of_the_best_and_the_noise_floor(value, status):
    records = [BEST, FLOOR]
    judgement = decide(result(), Standing.of(History(records), BEST), [RunEntry(seed=45, val_bpb=value)], KeepRule())
    assert judgement.status == status
    assert judgement.evidence.best_runs == [2.0, 2.01, 1.99] and judgement.evidence.sigma == 0.01
    assert judgement.evidence.candidate_runs == [value]


def test_only_a_fall_beyond_the_plausible_share_is_flagged():
    small = RunEntry(seed=45, val_bpb=2.0 * (1 - IMPLAUSIBLE_FALL) + 0.001)
    large = RunEntry(seed=45, val_bpb=2.0 * (1 - IMPLAUSIBLE_FALL) - 0.01)
    assert implausible_fall([small], BEST) is None and implausible_fall([large], None) is None
    assert implausible_fall([RunEntry(seed=45)], BEST) is None  # no number: nothing to suspect
    flagged = implausible_fall([large], BEST)
    assert flagged.startswith("val_bpb fell 10.5% since the baseline (2.000000 -> 1.790000), more than the 10%")
    later = BEST.model_copy(update=dict(id="0007"))
    assert "since 0007, the last best the holdout split checked (2.000000" in implausible_fall([large], later)
