"""Simplification can win: deleting code for an equal result is kept as `simplify` (a real run on the test
track), and a chain of simplifications cannot walk the best upwards past the drift guard."""

import subprocess
import sys
from pathlib import Path

import pytest

from agent.judging.decisions import Standing
from agent.judging.noise import Judgement
from agent.judging.simplify import code_lines, simplify_or_discard, weigh
from agent.loop import LoopSettings, run_loop
from agent.recording.history import History
from agent.recording.ledger import Ledger
from agent.recording.record import Evidence, ExperimentRecord, ExperimentStatus, RunEntry
from agent.running.runner import LocalRunner
from tests.helpers.scripted import ScriptedEdits

ROOT = Path(__file__).resolve().parents[3]
GC_BLOCK = ("        if step == 0 or (step + 1) % 5000 == 0:  # after step 0 the heap is steady; collections would "
            "only stall steps\n            gc.collect()\n            if step == 0:\n                gc.freeze()\n"
            "                gc.disable()\n")


def test_deleting_a_block_that_does_nothing_here_is_kept_as_simplify(workspace):
    """Garbage collection does not change a single number. The baseline here is made to ignore the harness's
    seed, so every run of it, and of it without the block, gives the same val_bpb: the deletion ties exactly,
    which the gain rule discards and the simplify rule keeps."""
    fixed = workspace.file_at("train.py").replace('SEED = int(os.environ.get("AUTORESEARCH_SEED", "42"))',
                                                  "SEED = 42")
    assert GC_BLOCK in fixed and "SEED = 42\n" in fixed
    workspace.advance_to(workspace.commit_train(fixed, "baseline that ignores the harness's seed"))
    proposer = ScriptedEdits(("remove the garbage-collection tuning", GC_BLOCK, ""))
    settings = LoopSettings(max_experiments=2, noise_seeds=0, timeout_seconds=900)  # a loaded machine is slow
    run_loop(workspace, proposer, LocalRunner(), settings, say=lambda _: None)
    baseline, simpler = Ledger(workspace.dir).records
    assert simpler.val_bpb == baseline.val_bpb and simpler.evidence.gain == 0  # an exact tie
    assert simpler.status == ExperimentStatus.KEEP and simpler.kept_as == "simplify", simpler.reason
    evidence = simpler.evidence.simplify
    assert evidence.lines_removed == 5 and evidence.allowed and evidence.standard_error == 0
    assert simpler.verified and simpler.reason.startswith("simplify:")
    assert workspace.head() == simpler.commit and "gc.freeze" not in workspace.file_at("train.py")
    assert (workspace.dir / "results.tsv").read_text().splitlines()[-1].split("\t")[3] == "keep"
    shown = subprocess.run([sys.executable, "-m", "agent.cli", "status", "--tag", workspace.tag, "--workspaces",
                            str(workspace.dir.parent)], capture_output=True, text=True, cwd=ROOT)
    assert "simplify" in shown.stdout, shown.stdout


def test_the_rule_needs_removed_code_and_an_equal_result():
    sigma = 0.001
    equal = weigh([1.5005], [1.5, 1.5, 1.5], best_ever=1.5, sigma=sigma, lines_removed=4)
    assert equal.allowed and equal.standard_error == pytest.approx(sigma * (1 + 1 / 3) ** 0.5, abs=1e-6)
    assert not weigh([1.5005], [1.5, 1.5, 1.5], 1.5, sigma, lines_removed=0).allowed
    worse = weigh([1.5013], [1.5, 1.5, 1.5], 1.5, sigma, lines_removed=4)
    assert not worse.allowed and "more than one standard error" in worse.why
    # without a noise floor only an equal or better mean counts, and the guard allows no drift
    assert weigh([1.5], [1.5], 1.5, None, 3).allowed and not weigh([1.5001], [1.5], 1.5, None, 3).allowed
    assert code_lines("a = 1\n\n# only a comment\n    b = 2  # code\n") == 2


def test_a_chain_of_simplifications_cannot_drift_past_one_sigma():
    """Each step is within one standard error of the best before it, yet the best may never end more than one
    sigma above the best mean ever reached."""
    sigma, best_ever, best = 0.001, 1.5, 1.5
    accepted = []
    for _ in range(10):
        candidate = best + 0.0009  # inside one standard error of the difference (1.15 sigma for 1 vs 3 runs)
        verdict = weigh([candidate], [best] * 3, best_ever, sigma, lines_removed=2)
        if not verdict.allowed:
            assert "drift guard" in verdict.why
            break
        accepted.append(candidate)
        best = candidate
    assert len(accepted) == 1 and best <= best_ever + sigma


def test_the_loop_rule_records_its_evidence_either_way():
    parent = "a = 1\nb = 2\nc = 3\n"
    records = [ExperimentRecord(id="0000", status="keep", commit="c0", runs=[RunEntry(val_bpb=1.5)]),
               ExperimentRecord(id="0000-noise", status="noise", commit="c0", sigma=0.001,
                                runs=[RunEntry(val_bpb=1.501), RunEntry(val_bpb=1.499)]),
               ExperimentRecord(id="0001", status="keep", commit="c1", runs=[RunEntry(val_bpb=1.4995)])]
    discard = Judgement(ExperimentStatus.DISCARD, "no gain", Evidence(gain=-0.0004))
    standing = Standing.of(History(records), records[2])
    kept = simplify_or_discard(discard, parent, "a = 1\n", [RunEntry(val_bpb=1.4999)], standing)
    assert kept.status == ExperimentStatus.KEEP and kept.evidence.kept_as == "simplify"
    assert kept.evidence.simplify.best_ever_mean == pytest.approx(1.4995)
    assert kept.evidence.gain == -0.0004 and discard.evidence.simplify is None  # the discard's evidence is kept
    refused = simplify_or_discard(discard, parent, "a = 1\n", [RunEntry(val_bpb=1.5012)], standing)
    assert refused.status == ExperimentStatus.DISCARD and "not kept as a simplification" in refused.reason
    assert refused.evidence.simplify.allowed is False
    assert simplify_or_discard(discard, parent, parent + "d = 4\n", [RunEntry(val_bpb=1.4)], standing) \
        is discard  # adds code: the rule does not apply
