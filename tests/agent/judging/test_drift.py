"""Control runs of the best against drift of the machine's conditions: when they are due, when one is flagged,
and a night whose machine gets slower midway, through the real loop: the drift is flagged, said, shown and
recorded, and a candidate better than the best under the new conditions is still kept against the pooled best."""

import io

import pytest
from rich.console import Console

from agent.judging.drift import DRIFT_SIGMAS, control_due, drift_of
from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.report.build import write_report
from agent.report.status_view import status_view
from tests.helpers.scripted import ScriptedEdits
from tests.helpers.synthetic_runner import SyntheticRunner

KEEP, DISCARD, NOISE, CONTROL = (ExperimentStatus.KEEP, ExperimentStatus.DISCARD, ExperimentStatus.NOISE,
                                 ExperimentStatus.CONTROL)


def night(*statuses: ExperimentStatus) -> list[ExperimentRecord]:
    """Records in order: each keep makes its commit the best, noise floors and controls are of the best's commit."""
    records, best = [], None
    for number, status in enumerate(statuses):
        best = f"c{number}" if status == KEEP else best
        commit = best if status in (KEEP, NOISE, CONTROL) else f"e{number}"
        records.append(ExperimentRecord(id=f"{number:04d}", status=status, commit=commit, val_bpb=1.5))
    return records


SETTINGS = LoopSettings(noise_seeds=2, noise_every_keeps=5, control_every=3)


def test_a_best_the_floor_re_runs_needs_no_control_until_enough_experiments_without_a_keep():
    assert control_due(night(KEEP), SETTINGS) is None  # the floor is due: it re-runs the baseline
    assert control_due(night(KEEP, NOISE, DISCARD, DISCARD), SETTINGS) is None
    assert control_due(night(KEEP, NOISE, DISCARD, DISCARD, DISCARD), SETTINGS).id == "0000"
    assert control_due(night(KEEP, NOISE, DISCARD, DISCARD, DISCARD, CONTROL, DISCARD, DISCARD), SETTINGS) is None
    assert control_due(night(KEEP, NOISE, DISCARD, DISCARD, DISCARD, CONTROL, DISCARD, DISCARD, DISCARD),
                       SETTINGS).id == "0000"


def test_a_new_best_is_re_run_once_unless_a_floor_is_due():
    assert control_due(night(KEEP, NOISE, DISCARD, KEEP), SETTINGS).id == "0003"
    assert control_due(night(KEEP, NOISE, DISCARD, KEEP, CONTROL), SETTINGS) is None
    assert control_due(night(KEEP, NOISE, DISCARD, KEEP, CONTROL, DISCARD, DISCARD, DISCARD), SETTINGS).id == "0003"
    every_keep = SETTINGS.model_copy(update=dict(noise_every_keeps=1))
    assert control_due(night(KEEP, NOISE, DISCARD, KEEP), every_keep) is None  # the floor re-runs it


@pytest.mark.parametrize("settings", [SETTINGS.model_copy(update=dict(control_every=0)),
                                      SETTINGS.model_copy(update=dict(noise_seeds=0))])
def test_no_control_runs_when_disabled_or_without_a_noise_floor(settings):
    assert control_due(night(KEEP, NOISE, DISCARD, DISCARD, DISCARD, KEEP), settings) is None


def test_a_control_is_flagged_past_two_sigma_either_way():
    earlier = [1.500, 1.502, 1.498]
    assert not drift_of(earlier, 1.5 + 0.9 * DRIFT_SIGMAS * 0.001, 0.001).flagged
    assert drift_of(earlier, 1.5 + 1.1 * DRIFT_SIGMAS * 0.001, 0.001).flagged
    assert drift_of(earlier, 1.5 - 1.1 * DRIFT_SIGMAS * 0.001, 0.001).flagged
    drift = drift_of(earlier, 1.52, None)
    assert not drift.flagged and drift.moved == pytest.approx(0.02) and drift.earlier_runs == 3


# The machine gets busier after the baseline, its noise floor and the first experiment: every later run scores
# SLOWDOWN worse. Four worse changes, then one that is better than the best under the new conditions, yet worse
# than the best's one idle measurement.
SLOWDOWN = 0.05
GAINS = {"MATRIX_LR = 0.1": -0.01, "MATRIX_LR = 0.2": -0.01, "WEIGHT_DECAY = 0.5": -0.01,
         "WEIGHT_DECAY = 0.6": -0.01, "WARMDOWN_RATIO = 0.7": 0.045}
CHANGES = [("MATRIX_LR 0.1", "MATRIX_LR = 0.04", "MATRIX_LR = 0.1"),
           ("MATRIX_LR 0.2", "MATRIX_LR = 0.04", "MATRIX_LR = 0.2"),
           ("WEIGHT_DECAY 0.5", "WEIGHT_DECAY = 0.2", "WEIGHT_DECAY = 0.5"),
           ("WEIGHT_DECAY 0.6", "WEIGHT_DECAY = 0.2", "WEIGHT_DECAY = 0.6"),
           ("WARMDOWN_RATIO 0.7", "WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.7")]


def slowing_night(workspace, control_every: int) -> tuple[list[ExperimentRecord], list[str]]:
    runner = SyntheticRunner(GAINS, slots=1, slows_after=4, slowdown=SLOWDOWN)
    said: list[str] = []
    run_loop(workspace, ScriptedEdits(*CHANGES), runner,
             LoopSettings(max_experiments=6, noise_seeds=2, control_every=control_every, overlap=False),
             say=said.append)
    return Ledger(workspace.dir).records, said


def test_a_machine_that_slows_midway_is_flagged_and_judged_against_the_pooled_best(workspace):
    records, said = slowing_night(workspace, control_every=2)
    controls = [r for r in records if r.status == CONTROL]
    assert controls and all(r.of == "0000" and r.commit == records[0].commit for r in controls)
    first = controls[0].drift
    assert first.flagged and first.moved == pytest.approx(SLOWDOWN, abs=0.001) and first.earlier_runs == 3
    assert all(run.trusted for r in controls for run in r.runs)
    assert any(line.startswith(f"warning: control {controls[0].id}") and "drift flagged" in line for line in said)

    better = next(r for r in records if r.description == "WARMDOWN_RATIO 0.7")
    assert better.status == KEEP, better.reason
    pooled = better.evidence.best_runs
    assert len(pooled) > 3 and {r.val_bpb for r in controls} & set(pooled)
    assert better.val_bpb > records[0].val_bpb  # worse than the best's idle run: only the pooled mean lets it in
    assert [r.status for r in records if r.is_experiment] == [KEEP, DISCARD, DISCARD, DISCARD, DISCARD, KEEP]

    printed = io.StringIO()
    Console(file=printed, width=400).print(status_view(workspace))
    assert f"{len(controls)} run(s) of the best" in printed.getvalue() and "drift flagged" in printed.getvalue()
    html = write_report(workspace).read_text()
    assert "<tr class=warning><td>0000-control1</td>" in html and "drift flagged" in html


def test_without_control_runs_the_same_night_keeps_nothing_after_the_slowdown(workspace):
    records, said = slowing_night(workspace, control_every=0)
    assert not [r for r in records if r.status == CONTROL] and not any("drift" in line for line in said)
    better = next(r for r in records if r.description == "WARMDOWN_RATIO 0.7")
    assert better.status == DISCARD and len(better.evidence.best_runs) == 3
