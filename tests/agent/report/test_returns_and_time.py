"""What each keep cost, the projection fitted to the night's gains, and the time line cut from stamped events."""

import math

import pytest

from agent.recording.record import ExperimentRecord, ExperimentStatus, RunEntry
from agent.report.returns import returns
from agent.report.timeline import spans, time_went

BASE = 1.0


def landed(i: int, val: float, keep: bool, hours: float = 1.0, usd: float = 0.5) -> ExperimentRecord:
    return ExperimentRecord.model_validate(dict(
        id=f"{i:04d}", status=ExperimentStatus.KEEP if keep else ExperimentStatus.DISCARD, val_bpb=val,
        proposer="baseline" if i == 0 else "llm", runs=[RunEntry(seconds=hours * 3600)], llm=dict(cost_usd=usd)))


def test_each_keep_costs_what_the_night_spent_since_the_keep_before_it():
    records = [landed(0, BASE, True), landed(1, 0.99, True), landed(2, 1.01, False), landed(3, 0.995, True),
               landed(4, 0.985, True, hours=2.0)]
    night = returns(records)
    assert [k.id for k in night.keeps] == ["0001", "0004"]  # 0003 is kept on its own parent but is not the best
    first, second = night.keeps
    assert first.moved == pytest.approx(0.01) and first.device_hours == pytest.approx(2.0)
    assert second.moved == pytest.approx(0.005) and second.device_hours_since == pytest.approx(4.0)
    assert second.usd_since == pytest.approx(1.5) and second.device_hours_per_gain == pytest.approx(800.0)
    assert night.projection is None and "2 keep(s)" in night.why_not


def test_the_projection_recovers_a_saturating_night():
    ceiling, tau = 0.05, 3.0
    records = [landed(0, BASE, True)] + [landed(i, BASE - ceiling * (1 - math.exp(-i / tau)), True)
                                         for i in range(1, 12)]
    p = returns(records).projection
    assert p.ceiling == pytest.approx(ceiling, rel=1e-3) and p.tau_hours == pytest.approx(tau, rel=1e-3)
    assert p.hours == pytest.approx(11.0)  # after the baseline's hour
    expected = ceiling * (math.exp(-11 / tau) - math.exp(-22 / tau))
    assert p.next_as_long == pytest.approx(expected, rel=1e-2)


def event(t: int, kind: str, **fields) -> dict:
    return {"t": f"2026-12-07T01:00:{t:02d}Z", "type": kind, **fields}


def test_spans_pair_each_run_by_seed_and_the_union_counts_overlap_once():
    events = {"0001": [event(0, "proposal_started"), event(4, "proposal"), event(5, "run_started", seed=1),
                       event(7, "run_started", seed=2), event(20, "run_finished", seed=2, where="slot 2", seconds=10.0),
                       event(25, "run_finished", seed=1, where="slot 1"), event(30, "verification", verify_s=5.0)],
              "0002": [event(10, "proposal_started"), event(12, "proposal_error"), event(40, "decision")]}
    found = spans(events)
    training = {(s.lane, s.start % 60, s.end % 60) for s in found if s.phase == "training"}
    assert training == {("slot 1", 5, 25), ("slot 2", 10, 20)}  # seed 2 waited 3 s for its slot
    went = time_went(found, events)
    assert went.wall_s == 40 and went.phases == {"proposing": 6, "training": 20, "verifying": 5}
    assert went.idle_s == 40 - (4 + 20 + 5)  # the second proposal (10-12) fell inside the training


def test_a_run_inside_one_stamped_second_still_spans_the_seconds_it_ran():
    events = {"0001": [event(3, "run_started", seed=1), event(3, "run_finished", seed=1, where="slot 1", seconds=0.4),
                       event(9, "run_started", seed=2), event(10, "run_finished", seed=2, where="slot 1", seconds=1.6),
                       event(12, "run_started", seed=3), event(20, "run_finished", seed=3, where="slot 1",
                                                                 seconds=30.0)]}
    training = sorted(round(s.end - s.start, 3) for s in spans(events) if s.phase == "training")
    assert training == [0.4, 1.6, 8]  # a runner's clock past what the stamps allow is not believed
