"""Noise-aware decisions: the rule on its own, the seed policy, and real runs on the test track
(whose step budget makes a run a function of its code and seed, so outcomes are exact)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.judging.confirm import confirm
from agent.judging.noise import (
    LOW_RATIO,
    SEED_RANGE,
    USUAL_SIGMA,
    floored,
    fresh_seed,
    judge,
    wants_noise_floor,
)
from agent.loop import LoopSettings, run_loop
from agent.proposers.edits import EditRejected
from agent.proposers.policy import check_policy
from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentRecord, RunEntry
from agent.running.runner import LocalRunner
from tests.helpers.scripted import ScriptedEdits
from trainer.tracks.hyperparameters import set_hyperparameters

ROOT = Path(__file__).resolve().parents[3]
TRAIN = (ROOT / "trainer" / "train.py").read_text()
SEED_LINE = 'SEED = int(os.environ.get("AUTORESEARCH_SEED", "42"))'
MATRIX = "MATRIX_LR = 0.0            # times sqrt(max(1, rows / cols))"


def test_a_clear_gain_is_kept_a_small_one_re_run_and_a_loss_discarded():
    best = [3.20, 3.21, 3.19]
    assert judge([3.17], best, sigma=0.01).status == "keep"
    close = judge([3.195], best, sigma=0.01)
    assert close.status == "close" and "re" in close.reason and close.evidence.threshold == 0.02
    assert judge([3.205], best, sigma=0.01).status == "discard"
    # after a re-run: the gain of the means against 2 standard errors of their difference, 0.01 x sqrt(1/2 + 1/3)
    assert judge([3.195, 3.196], best, sigma=0.01).status == "discard"
    confirmed = judge([3.180, 3.181], best, sigma=0.01)
    assert confirmed.status == "keep" and confirmed.evidence.candidate_runs == [3.180, 3.181]
    # no noise floor: the plain comparison, with min_delta
    assert judge([3.199], best, sigma=None).status == "keep"
    assert judge([3.199], best, sigma=None, min_delta=0.01).status == "discard"


def test_a_floor_far_below_the_tracks_usual_sigma_is_raised_to_it_saying_why():
    """Runs that come out the same whatever their seed (the seed does not reach them) would make a gain of nothing a
    keep: such a floor counts as a quarter of the track's usual sigma."""
    assert floored(0.0, "test") == (LOW_RATIO * USUAL_SIGMA["test"], floored(0.0, "test")[1])
    assert "as if the seed did not reach them" in floored(0.0, "test")[1]
    assert floored(0.3 * USUAL_SIGMA["test"], "test") == (0.3 * USUAL_SIGMA["test"], None)
    assert floored(None, "test") == (None, None) and floored(0.0, "unknown") == (0.0, None)
    assert judge([3.198999], [3.199], sigma=floored(0.0, "test")[0]).status == "close"  # not a clear win


def test_noise_floor_schedule_and_fresh_seeds():
    baseline = ExperimentRecord(id="0000", status="keep", commit="a", runs=[RunEntry(seed=42, val_bpb=3.2)])
    floor = ExperimentRecord(id="0000-noise", status="noise", commit="a",
                             runs=[RunEntry(seed=43, val_bpb=3.1), RunEntry(seed=44)])
    keep = ExperimentRecord(id="0001", status="keep", commit="b", runs=[RunEntry(seed=42, val_bpb=3.0)])
    assert not wants_noise_floor([], 2, 5) and not wants_noise_floor([baseline], 0, 5)
    assert wants_noise_floor([baseline], 2, 5) and not wants_noise_floor([baseline, floor], 2, 5)
    assert wants_noise_floor([baseline, floor, keep, keep], 2, 2)
    drawn = [fresh_seed([baseline, floor], 42, [RunEntry(seed=9)]) for _ in range(200)]
    assert not {42, 43, 44, 9} & set(drawn) and all(0 <= seed < SEED_RANGE for seed in drawn)
    assert len(set(drawn)) > 195  # drawn at random, not counted up: no run can tell what the next one gets


@pytest.mark.parametrize("old,new", [
    (SEED_LINE, SEED_LINE.replace('"42"', '"1337"')),                      # the default seed
    (SEED_LINE, "SEED = 1234"),                                            # ignore the harness's seed
    ("    torch.manual_seed(SEED)", "    torch.manual_seed(SEED + 1)"),    # offset it where it is used
    # the red team's: every seed's generator reset to a fresh one's state, so that the noise floor reads sigma 0
    ("    torch.manual_seed(SEED)",
     "    torch.manual_seed(SEED)\n    torch.set_rng_state(torch.Generator().get_state())"),
])
def test_an_edit_that_changes_the_seeding_is_rejected_saying_why(old, new):
    assert old in TRAIN
    edited = TRAIN.replace(old, new, 1)
    check_policy(edited)  # nothing else in it is wrong
    with pytest.raises(EditRejected, match="changes how train.py is seeded") as info:
        check_policy(edited, parent=TRAIN)
    assert "AUTORESEARCH_SEED" in str(info.value) and "luck" in str(info.value)


def test_seeding_moved_unchanged_is_not_a_seed_edit():
    moved = TRAIN.replace("    torch.manual_seed(SEED)\n", "", 1).replace(
        "def main() -> None:\n", "def main() -> None:\n    torch.manual_seed(SEED)\n", 1)
    check_policy(moved, parent=TRAIN)


def test_noise_floor_then_a_no_op_re_run_and_discarded_and_a_clear_win_kept(workspace):
    # The baseline cannot train its block matrices, so restoring their learning rate is a clear win.
    handicapped = set_hyperparameters(workspace.file_at("train.py"), {"MATRIX_LR": 0.0})
    workspace.advance_to(workspace.commit_train(handicapped, "MATRIX_LR = 0"))
    proposer = ScriptedEdits(("a comment only", "# Batch\n", "# Batch (unchanged)\n"),
                        ("MATRIX_LR 0.0 -> 0.04", MATRIX, MATRIX.replace("0.0 ", "0.04")))
    # Seeds counted up from 46 run 46 (baseline), 47 and 48 (noise floor), 49 (the no-op, a little below the
    # best's mean: a close call), 50 (its re-run), 51 (the win). The test track makes each run exact.
    run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=3, seed=46, counted_seeds=True),
             say=lambda _: None)

    baseline, floor, no_op, win = Ledger(workspace.dir).records
    assert floor.status == "noise" and floor.of == "0000" and [r.seed for r in floor.runs] == [47, 48]
    assert len(floor.values) == 3 and floor.sigma > 0
    assert len(set(floor.values)) == 3  # different seeds, different runs

    assert no_op.status == "discard" and [r.seed for r in no_op.runs] == [49, 50]
    assert 0 < no_op.evidence.gain < no_op.evidence.threshold  # the re-run did not hold the gain up
    assert no_op.evidence.sigma == pytest.approx(floor.sigma, abs=1e-6)
    assert no_op.evidence.best_runs == floor.values and "did not confirm" in no_op.reason
    assert no_op.val_bpb == pytest.approx(sum(r.val_bpb for r in no_op.runs) / 2)
    events = [json.loads(line) for line in (workspace.dir / no_op.transcript).read_text().splitlines()]
    assert [e["type"] for e in events].count("run_started") == 2 and "rerun" in [e["type"] for e in events]
    assert events[-1]["type"] == "decision"
    assert events[-1]["evidence"]["candidate_runs"] == no_op.evidence.candidate_runs
    assert (workspace.dir / "logs" / "0001.rerun1.log").exists()

    assert win.status == "keep" and [r.seed for r in win.runs] == [51] and "clear win" in win.reason
    assert win.evidence.gain > win.evidence.threshold
    tsv = (workspace.dir / "results.tsv").read_text().splitlines()
    assert [row.split("\t")[3] for row in tsv[1:]] == ["keep", "discard", "keep"]  # the noise floor is no experiment

    shown = subprocess.run([sys.executable, "-m", "agent.cli", "status", "--tag", workspace.tag, "--workspaces",
                            str(workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT)
    assert f"sigma {floor.sigma:.6f} from 3 runs of 0000" in shown.stdout, shown.stdout
    assert "3 experiments" in shown.stdout

    # Only the baseline's and the best's weights are kept; scored again, they reproduce the printed val_bpb,
    # and the holdout split, which no decision read, says whether the gain is real.
    assert sorted(p.name for p in (workspace.dir / "checkpoints").iterdir()) == ["0000.pt", "0002.pt"]
    shown = subprocess.run([sys.executable, "-m", "agent.cli", "confirm", "--tag", workspace.tag, "--workspaces",
                            str(workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT)
    assert shown.returncode == 0 and "gain" in shown.stdout and "holdout" in shown.stdout, shown.stdout + shown.stderr
    confirmed = json.loads((workspace.dir / "confirmation.json").read_text())
    assert confirmed["baseline"]["val"] == pytest.approx(baseline.val_bpb, abs=1e-6)
    assert confirmed["best"]["val"] == pytest.approx(win.val_bpb, abs=1e-6)
    assert confirmed["baseline"]["search_val"] == pytest.approx(sum(floor.values) / 3)
    assert confirmed["holdout_gain"] > 0 and confirmed["best"]["holdout"] != confirmed["best"]["val"]
    assert confirm(workspace).holdout_gain == confirmed["holdout_gain"]  # the same weights, the same numbers
    assert workspace.is_clean()
