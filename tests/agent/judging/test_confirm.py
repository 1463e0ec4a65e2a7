"""`confirm` scores every keep of the night in order through the runner's evaluator, so a keep that undid an
earlier gain shows, and flags a searched gain the holdout split does not keep; the report and the CLI say both."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.judging.confirm import confirm, warnings_of
from agent.loop import LoopSettings, run_loop
from agent.recording.confirmation import Confirmation, ConfirmedCommit, read_confirmation
from agent.recording.ledger import Ledger
from agent.report.build import write_report
from tests.helpers.scripted import ScriptedChanges
from tests.helpers.synthetic_runner import SyntheticRunner

ROOT = Path(__file__).resolve().parents[3]


class HoldoutOwnWay(SyntheticRunner):
    """val_bpb from the gains; the holdout split moves by HOLDOUT[setting] for each setting present instead."""

    def __init__(self, gains: dict[str, float], holdout: dict[str, float], noise: float = 0.0):
        super().__init__(gains, noise=noise)
        self.holdout = holdout

    def evaluate(self, workspace, job):
        scored = super().evaluate(workspace, job)
        source = workspace.file_at("train.py", job.commit)
        moved = sum(change for setting, change in self.holdout.items() if setting in source)
        return scored.model_copy(update={"holdout": round(self.base + moved, 6)})


A = ("warmdown 0.4", [("WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.4")])
B = ("final lr 0.1", [("FINAL_LR_FRAC = 0.0", "FINAL_LR_FRAC = 0.1")])


def night(workspace, runner, noise_seeds: int = 0) -> list:
    run_loop(workspace, ScriptedChanges(A, B), runner, LoopSettings(max_experiments=3, noise_seeds=noise_seeds),
             say=lambda _: None)
    return Ledger(workspace.dir).records


def test_every_keep_is_scored_in_order_and_one_that_undid_a_gain_on_holdout_is_flagged(workspace):
    # B gains a little on val but gives back on holdout all A gained there and more
    runner = HoldoutOwnWay({"WARMDOWN_RATIO = 0.4": 0.05, "FINAL_LR_FRAC = 0.1": 0.01},
                           {"WARMDOWN_RATIO = 0.4": -0.05, "FINAL_LR_FRAC = 0.1": 0.08})
    baseline, a, b = night(workspace, runner)
    assert [a.status, b.status] == ["keep", "keep"] and all((workspace.dir / r.checkpoint).is_file()
                                                          for r in (baseline, a, b))
    confirmation = confirm(workspace, runner)
    assert [c.id for c in confirmation.chain] == [baseline.id, a.id, b.id]
    assert read_confirmation(workspace.dir) == confirmation  # the chain and the warnings are written
    assert confirmation.chain[2].holdout - confirmation.chain[1].holdout > 0.07
    regressed, = [w for w in confirmation.warnings if "undid a gain" in w]
    assert regressed.startswith(f"{b.id} (final lr 0.1) is worse than {a.id} before it on holdout")
    html = write_report(workspace).read_text()
    assert f"keep {a.id}" in html and "undid a gain" in html


def test_a_searched_gain_the_holdout_does_not_keep_is_flagged_and_said_by_the_cli(workspace):
    # far below half, by more than the noise of two scorings at the night's own noise floor
    runner = HoldoutOwnWay({"WARMDOWN_RATIO = 0.4": 0.05, "FINAL_LR_FRAC = 0.1": 0.05},
                           {"WARMDOWN_RATIO = 0.4": -0.005, "FINAL_LR_FRAC = 0.1": -0.005}, noise=0.002)
    night(workspace, runner, noise_seeds=2)
    confirmation = confirm(workspace, runner)
    assert confirmation.retention < 0.5 and not any("undid" in w for w in confirmation.warnings)
    kept, = [w for w in confirmation.warnings if "keeps" in w]
    assert "10% of the searched gain" in kept and "part of the night's gain is val" in kept
    shown = subprocess.run([sys.executable, "-m", "agent.cli", "report", "--tag", workspace.tag, "--workspaces",
                            str(workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    assert "part of the night" in (workspace.dir / "report" / "index.html").read_text()
    # the morning's first screens say it too: status, and the report's headline and JSON
    status = subprocess.run([sys.executable, "-m", "agent.cli", "status", "--tag", workspace.tag, "--workspaces",
                             str(workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT,
                            env=os.environ | {"COLUMNS": "400"})
    said = " ".join(status.stdout.split())
    assert f"held out: gain {confirmation.holdout_gain:+.6f} on the holdout split against" in said
    assert f"({100 * confirmation.retention:.0f}%)" in said and "part of the night's gain is val" in said
    data = json.loads((workspace.dir / "report" / "report.json").read_text())
    assert data["confirmation"]["warnings"] == confirmation.warnings


def test_an_honest_night_gets_no_warning(workspace):
    runner = HoldoutOwnWay({"WARMDOWN_RATIO = 0.4": 0.05, "FINAL_LR_FRAC = 0.1": 0.02},
                           {"WARMDOWN_RATIO = 0.4": -0.04, "FINAL_LR_FRAC = 0.1": -0.015})
    night(workspace, runner)
    confirmation = confirm(workspace, runner)
    assert len(confirmation.chain) == 3 and confirmation.warnings == [] and 0.7 < confirmation.retention < 0.9


def test_a_keep_whose_own_val_gain_the_holdout_does_not_show_is_flagged_though_the_night_keeps_half(workspace):
    runner = HoldoutOwnWay({"WARMDOWN_RATIO = 0.4": 0.06, "FINAL_LR_FRAC = 0.1": 0.05},
                           {"WARMDOWN_RATIO = 0.4": -0.06})  # the second learnt val: nothing on holdout
    run_loop(workspace, ScriptedChanges(A, B), runner, LoopSettings(max_experiments=3, noise_seeds=2),
             say=lambda _: None)
    kept = [r for r in Ledger(workspace.dir).records if r.status == "keep"]
    confirmation = confirm(workspace, runner)
    assert len(kept) == 3 and confirmation.retention > 0.5  # the night as a whole keeps more than half
    step, = [w for w in confirmation.warnings if "a gain of val" in w]
    assert step.startswith(f"{kept[2].id} (final lr 0.1) gained") and f"over {kept[1].id}" in step


def confirmed(searched: float, held: float) -> Confirmation:
    """A night of one keep whose searched gain is `searched` and whose holdout gain is `held`."""
    base = ConfirmedCommit(id="0000", commit="a", description="baseline", search_val=2.0, runs=3, val=2.0,
                           holdout=2.0)
    best = ConfirmedCommit(id="0001", commit="b", description="x", search_val=2.0 - searched, runs=3,
                           val=2.0 - searched, holdout=2.0 - held)
    return Confirmation(time="t", sigma=0.01, baseline=base, best=best, search_gain=searched, holdout_gain=held,
                        chain=[base, best])


@pytest.mark.parametrize(("searched", "held", "warned"), [
    (0.05, 0.015, False),  # 30%, but within the noise of two scorings of half (0.025 - 0.028)
    (0.20, 0.060, True),   # 30% of a gain the noise cannot explain
    (0.20, 0.080, False),  # 40%: half less 0.028
])
def test_the_night_is_flagged_only_when_its_holdout_is_short_of_half_by_more_than_its_noise(searched, held, warned):
    said = warnings_of(confirmed(searched, held), sigma=0.01)
    assert any("of the searched gain" in w for w in said) == warned
