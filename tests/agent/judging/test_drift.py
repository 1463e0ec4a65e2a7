"""Control runs of the best against drift of the machine's conditions: when they are due, when one is flagged,
and a night whose machine gets slower midway, through the real loop: the drift is flagged, said, shown and
recorded, re-measured, and a candidate better than the best under the new conditions is still kept against the
pooled best. A best that sabotages its own control runs (to lower the bar for the next change) moves nothing."""

import io

import pytest
from rich.console import Console

from agent.judging.drift import DRIFT_SIGMAS, control_due, drift_of
from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentRecord, ExperimentStatus
from agent.report.build import write_report
from agent.report.status_view import status_view
from agent.workspace import Workspace
from tests.agent.conftest import PROGRAM
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


def test_a_control_is_flagged_past_two_sigma_either_way_and_then_held_back():
    earlier = [1.500, 1.502, 1.498]
    within = drift_of(earlier, 1.5 + 0.9 * DRIFT_SIGMAS * 0.001, 0.001, None, True)
    assert not within.flagged and within.pooled
    worse = drift_of(earlier, 1.5 + 1.1 * DRIFT_SIGMAS * 0.001, 0.001, None, True)
    better = drift_of(earlier, 1.5 - 1.1 * DRIFT_SIGMAS * 0.001, 0.001, None, True)
    assert worse.flagged and better.flagged and worse.pooled is False and better.pooled is False
    drift = drift_of(earlier, 1.52, None, None, True)
    assert not drift.flagged and drift.moved == pytest.approx(0.02) and drift.earlier_runs == 3


def test_a_second_flag_the_same_way_pools_both_only_where_the_budget_follows_the_machine():
    first = ExperimentRecord(id="0000-control1", status=CONTROL, commit="c0", val_bpb=1.6,
                             drift=drift_of([1.5, 1.5], 1.6, 0.001, None, True))
    confirming = drift_of([1.5, 1.5], 1.6, 0.001, first, True)
    assert confirming.pooled and confirming.confirms == first.id
    assert drift_of([1.5, 1.5], 1.4, 0.001, first, True).pooled is False  # the other way: no shift confirmed
    on_steps = drift_of([1.5, 1.5], 1.6, 0.001, first, False)
    assert on_steps.pooled is False and on_steps.suspect and on_steps.confirms is None
    quiet = drift_of([1.5, 1.5], 1.5015, 0.001, None, False)  # inside 2 sigma: a check, never pooled on steps
    assert not quiet.flagged and quiet.pooled is False and not quiet.suspect


def test_a_held_back_control_makes_another_due_at_once_and_only_one():
    records = night(KEEP, NOISE, DISCARD, DISCARD, DISCARD, CONTROL)
    records[-1].drift = drift_of([1.5, 1.5], 1.6, 0.001, None, True)
    assert control_due(records, SETTINGS).id == "0000"
    records += night(KEEP, NOISE, DISCARD, DISCARD, DISCARD, CONTROL, CONTROL)[-1:]
    records[-1].id, records[-1].drift = "0006", drift_of([1.5, 1.5], 1.4, 0.001, records[-2], True)
    assert control_due(records, SETTINGS) is None  # held back twice: wait for control_every experiments


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


@pytest.fixture
def clocked(test_track, tmp_path):
    """A workspace whose track's budget is the wall clock (the gpu track's rule), for synthetic runs."""
    wall_clock = dict(test_track.spec["constants"], step_budget=None)
    return Workspace.create("t", dict(test_track.spec, track="gpu", constants=wall_clock), PROGRAM,
                            root=tmp_path / "workspaces")


def slowing_night(workspace, control_every: int) -> tuple[list[ExperimentRecord], list[str]]:
    runner = SyntheticRunner(GAINS, slots=1, slows_after=4, slowdown=SLOWDOWN)
    said: list[str] = []
    run_loop(workspace, ScriptedEdits(*CHANGES), runner,
             LoopSettings(max_experiments=6, noise_seeds=2, control_every=control_every, overlap=False),
             say=said.append)
    return Ledger(workspace.dir).records, said


def test_a_machine_that_slows_midway_is_flagged_re_measured_and_judged_against_the_pooled_best(clocked):
    workspace = clocked
    records, said = slowing_night(workspace, control_every=2)
    controls = [r for r in records if r.status == CONTROL]
    assert controls and all(r.of == "0000" and r.commit == records[0].commit for r in controls)
    first, second = controls[0].drift, controls[1].drift
    assert first.flagged and first.moved == pytest.approx(SLOWDOWN, abs=0.001) and first.earlier_runs == 3
    assert first.pooled is False and second.flagged and second.confirms == controls[0].id  # re-measured at once
    between = records[records.index(controls[0]) + 1:records.index(controls[1])]
    assert len(between) <= 1  # at most the experiment that was training beside the first control
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


def test_without_control_runs_the_same_night_keeps_nothing_after_the_slowdown(clocked):
    records, said = slowing_night(clocked, control_every=0)
    assert not [r for r in records if r.status == CONTROL] and not any("drift" in line for line in said)
    better = next(r for r in records if r.description == "WARMDOWN_RATIO 0.7")
    assert better.status == DISCARD and len(better.evidence.best_runs) == 3


class SabotagesItsControls(SyntheticRunner):
    """Change A is a real gain plus a line that makes every run the harness makes of it after its first one worse
    (a train.py that guesses which runs are controls; here it always guesses right)."""

    def run(self, workspace, job):
        self.job = job
        return super().run(workspace, job)

    def __init__(self, gains, by: float):
        super().__init__(gains, slots=1)
        self.by = by

    def score(self, source, seed):
        sabotaged = "SABOTAGE = 1" in source and "-control" in self.job.run.name
        return super().score(source, seed) + (self.by if sabotaged else 0.0)


A = ("warmdown 0.4, and the line", "WARMDOWN_RATIO = 0.5", "SABOTAGE = 1\nWARMDOWN_RATIO = 0.4")


@pytest.mark.parametrize("then,kept_as", [
    (("drop both lines", "SABOTAGE = 1\nWARMDOWN_RATIO = 0.4", "WARMDOWN_RATIO = 0.5"), None),  # a worse model
    (("drop the line", "SABOTAGE = 1\n", ""), "simplify"),  # A's own model, a line shorter: no gain, no loss
])
@pytest.mark.parametrize("by", [0.2, 0.01])  # far past 2 sigma (0.0114 here), and just inside it
def test_a_best_that_sabotages_its_own_controls_moves_no_bar(workspace, then, kept_as, by):
    runner = SabotagesItsControls({"WARMDOWN_RATIO = 0.4": 0.05}, by)
    said: list[str] = []
    run_loop(workspace, ScriptedEdits(A, then), runner,
             LoopSettings(max_experiments=3, noise_seeds=2, control_every=8, overlap=False), say=said.append)
    records = Ledger(workspace.dir).records
    a, b = (next(r for r in records if r.description == description) for description in (A[0], then[0]))
    controls = [r for r in records if r.status == CONTROL]
    assert a.status == KEEP and controls and all(c.of == a.id for c in controls)
    assert all(c.drift.flagged == c.drift.suspect == (by > 0.1) and c.drift.pooled is False for c in controls)
    assert any(("Suspect" if by > 0.1 else "a check only") in line for line in said)
    assert records.index(b) > records.index(controls[0])
    assert b.evidence.best_runs == [run.val_bpb for run in a.runs]  # A's own runs; none of the sabotaged ones
    assert "clear win" not in b.reason and b.evidence.gain < b.evidence.sigma
    if kept_as is None:
        assert b.status == DISCARD and Ledger(workspace.dir).head().id == a.id, b.reason
    else:
        assert b.status == KEEP and b.evidence.kept_as == kept_as, b.reason
