"""z and p of a verdict: gain / SE with SE = sigma x sqrt(1/n_candidate + 1/n_best); p is Student's t's upper tail
with the noise floor's degrees of freedom, 1 - Phi(z) where they are not known."""

import math
from statistics import NormalDist

import pytest

from agent.judging.noise import judge
from agent.judging.significance import one_sided_p, z_score
from agent.recording.record import ExperimentRecord
from agent.report.verdict import record_verdict


def test_one_run_against_three_best_runs_by_hand():
    # gain 1.010 - 1.000 = 0.010; SE = 0.004 x sqrt(1/1 + 1/3) = 0.0046188; z = 2.1651; 1 - Phi(2.1651) = 0.01519
    judged = judge([1.000], [1.010, 1.012, 1.008], sigma=0.004)
    assert judged.evidence.z == pytest.approx(2.1651, abs=1e-4)
    assert judged.evidence.p == pytest.approx(0.01519, abs=1e-5)


@pytest.mark.parametrize(("candidate", "best", "sigma"), [
    ([3.180, 3.181], [3.20, 3.21, 3.19], 0.01),        # a re-run: two runs against three
    ([3.195], [3.20, 3.21, 3.19], 0.01),               # a close call
    ([3.25], [3.20, 3.21], 0.02),                      # a loss: z below 0, p above a half
])
def test_z_is_the_gain_in_standard_errors_and_p_its_upper_normal_tail(candidate, best, sigma):
    evidence = judge(candidate, best, sigma=sigma).evidence
    gain = sum(best) / len(best) - sum(candidate) / len(candidate)
    z = gain / (sigma * math.sqrt(1 / len(candidate) + 1 / len(best)))
    assert evidence.z == pytest.approx(z, abs=1e-4)
    assert evidence.p == pytest.approx(1 - NormalDist().cdf(z), abs=1e-6)
    assert (evidence.p > 0.5) == (gain < 0)


def test_with_the_floors_degrees_of_freedom_p_is_students_t_not_the_normal():
    """sigma from a floor of three runs has 2 degrees of freedom: z 2.01 is p 0.09 there, 0.022 in a normal tail."""
    judged = judge([1.000], [1.020, 1.020, 1.020], sigma=0.01, sigma_df=2)
    z = judged.evidence.z
    assert judged.evidence.sigma_df == 2
    assert judged.evidence.p == pytest.approx(0.5 - z / (2 * math.sqrt(2 + z * z)), abs=1e-5)  # t(2) in closed form
    assert one_sided_p(2.01, 2) == pytest.approx(0.0911, abs=1e-4) and one_sided_p(2.01) == pytest.approx(0.0222,
                                                                                                     abs=1e-4)
    words = record_verdict(ExperimentRecord(id="1", status="keep", evidence=judged.evidence)).words()
    assert "(t, 2 df)" in words


def test_without_a_noise_floor_there_is_no_z():
    evidence = judge([3.19], [3.20], sigma=None).evidence
    assert evidence.z is None and evidence.p is None and z_score(0.01, None, 1, 1) is None
    assert one_sided_p(0.0) == pytest.approx(0.5)


def test_a_record_judged_before_z_was_stored_gets_the_same_numbers_computed():
    judged = judge([3.180, 3.181], [3.20, 3.21, 3.19], sigma=0.01)
    new = ExperimentRecord(id="0003", status="keep", evidence=judged.evidence)
    old = ExperimentRecord(id="0003", status="keep",
                           evidence=judged.evidence.model_dump(exclude={"z", "p"}, exclude_none=True))
    assert old.evidence.z is None
    shown_new, shown_old = record_verdict(new), record_verdict(old)
    assert shown_old.z == pytest.approx(shown_new.z, abs=1e-4) and shown_old.p == pytest.approx(shown_new.p, abs=1e-6)
    assert shown_old.words() == shown_new.words()
    assert (shown_new.candidate_runs, shown_new.best_runs) == (2, 3)
    assert "kept: the gain is above the threshold after the re-run" in shown_new.words()


def test_why_it_was_not_kept_is_said():
    lost = judge([3.25], [3.20, 3.21], sigma=0.02)
    assert record_verdict(ExperimentRecord(id="1", status="discard", evidence=lost.evidence)).why == \
        "discarded: no gain"
    unconfirmed = judge([3.195, 3.196], [3.20, 3.21, 3.19], sigma=0.01)
    assert record_verdict(ExperimentRecord(id="2", status="discard", evidence=unconfirmed.evidence)).why == \
        "discarded: the re-run did not confirm the gain"
    assert record_verdict(ExperimentRecord(id="0000", status="keep")) is None  # the baseline compared nothing
