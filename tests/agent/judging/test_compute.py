"""Compute the harness measured against what the track's budget costs on the same machine: the rule in units
(agent/judging/compute.py), then through the real loop and the local runner, a run that trains its batches
again on a step track and one that trains before its clock starts on a wall-clock track. Each ends over budget,
with nothing kept, while an honest change beside it is judged on its number."""

from types import SimpleNamespace

import pytest

from agent.judging.compute import (
    COMPUTE_TOLERANCE,
    TOKEN_COST_SHARE,
    UNCOUNTED_BUDGET_SHARE,
    UNCOUNTED_FLOOR_S,
    UNCOUNTED_MARGIN,
    over_compute,
)
from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from agent.recording.record import ExperimentRecord, ExperimentStatus, RunEntry
from agent.report.build import write_report
from agent.running.runner import LocalRunner
from agent.workspace import Workspace
from tests.agent.conftest import PROGRAM
from tests.helpers.scripted import ScriptedChanges
from trainer.tracks.hardware import Hardware
from trainer.tracks.spec import TrackConstants

HERE = Hardware(backend="cpu", name="CPU here", memory_bytes=1 << 30, cores=2)
ELSEWHERE = Hardware(backend="cpu", name="CPU elsewhere", memory_bytes=1 << 30, cores=2)
STEPS = TrackConstants.of_track("test")  # 30 steps; 5 s of wall clock the budget was set from
CLOCK = TrackConstants.of_track("gpu")  # 300 s of the run's own clock


def baseline(*runs: RunEntry) -> list[ExperimentRecord]:
    return [ExperimentRecord(id="0000", status=ExperimentStatus.KEEP, commit="base", val_bpb=1.0, runs=list(runs)),
            ExperimentRecord(id="0001", status=ExperimentStatus.DISCARD, commit="other", val_bpb=1.1,
                             runs=[RunEntry(cpu_seconds=1000.0, seal_seconds=1000.0, device="cpu", hardware=HERE)])]


def entry(cpu: float, seal: float = 0.0, device: str = "cpu", hardware: Hardware = HERE) -> RunEntry:
    return RunEntry(cpu_seconds=cpu, seal_seconds=seal, device=device, hardware=hardware, trained_tokens=31 * 2048)


def run(cpu: float = 0.0, seal: float = 0.0, device: str = "cpu", steps: str = "30", tokens: int = 31 * 2048,
        hardware: Hardware = HERE):
    return SimpleNamespace(cpu_seconds=cpu, seal_seconds=seal, device=device, hardware=hardware,
                           trained_tokens=tokens, summary={"num_steps": steps})


def test_a_run_past_the_tolerance_of_the_baselines_median_on_the_same_machine_is_over_budget():
    records = baseline(entry(10.0), entry(12.0), entry(40.0))  # median 12: one slow baseline run moves nothing
    assert over_compute(run(cpu=COMPUTE_TOLERANCE * 12 - 0.1), records, STEPS, 2048) is None
    over = over_compute(run(cpu=COMPUTE_TOLERANCE * 12 + 0.1), records, STEPS, 2048)
    assert over and "where the baseline's runs used 12 on this machine" in over and "CPU seconds" in over
    # another machine's baseline is no measure of this one's, and no baseline run yet is no measure at all
    assert over_compute(run(cpu=100.0, hardware=ELSEWHERE), records, STEPS, 2048) is None
    assert over_compute(run(cpu=100.0), [], STEPS, 2048) is None


def test_a_run_that_draws_more_tokens_than_the_baseline_may_use_that_much_more():
    """At the same FLOPs an honest model that draws 3.3x the tokens costs 1.9x on the cpu track (compute_spread):
    only the per-token share of the baseline's cost grows with the tokens."""
    records = baseline(entry(10.0))
    allowed = COMPUTE_TOLERANCE * 10.0 * (1 + TOKEN_COST_SHARE * 2)
    assert over_compute(run(cpu=allowed - 0.1, tokens=3 * 31 * 2048, steps="90"), records, STEPS, 2048) is None
    assert over_compute(run(cpu=allowed + 0.1, tokens=3 * 31 * 2048, steps="90"), records, STEPS, 2048)
    assert over_compute(run(cpu=COMPUTE_TOLERANCE * 10.0 + 0.1, tokens=31 * 1024), records, STEPS, 1024)  # fewer


def test_on_a_gpu_the_wall_seconds_to_the_seal_are_measured():
    records = baseline(entry(5.0, seal=100.0, device="cuda"))
    assert over_compute(run(cpu=5.0, seal=140.0, device="cuda"), records, STEPS, 2048) is None
    assert "wall seconds to its seal" in over_compute(run(cpu=5.0, seal=160.0, device="cuda"), records, STEPS, 2048)


def test_steps_that_needed_more_tokens_than_the_seal_counted_trained_batches_again():
    records = baseline(entry(10.0))
    assert over_compute(run(cpu=10.0, steps="30"), records, STEPS, 2048) is None
    over = over_compute(run(cpu=10.0, steps="120"), records, STEPS, 2048)
    assert over and "120 steps of 2,048 tokens" in over and "drew only 63,488" in over


def test_on_a_wall_clock_track_the_time_before_the_runs_clock_is_held_to_the_baselines():
    records = baseline(entry(0.0, seal=330.0), entry(0.0, seal=340.0))  # 30 s and 40 s before their clocks
    bound = 40 * (1 + UNCOUNTED_MARGIN) + max(UNCOUNTED_BUDGET_SHARE * 300, UNCOUNTED_FLOOR_S)
    assert over_compute(run(seal=300 + bound - 1), records, CLOCK, None) is None
    over = over_compute(run(seal=300 + bound + 1), records, CLOCK, None)
    assert over and "spent at most 40 s there" in over and f"may spend {bound:.0f} s" in over
    assert over_compute(run(seal=900.0), records, CLOCK.model_copy(update={"time_budget": 60, "budget_clock": "cpu"}),
                        None) is None


@pytest.fixture
def clock_workspace(test_track, tmp_path):
    import os
    from pathlib import Path

    from trainer.tracks.builder import prepare_track
    prepared = prepare_track("test-clock", cache=Path(os.environ["AUTORESEARCH_CACHE"]), show_progress=False)
    return Workspace.create("clock", prepared.spec, PROGRAM, root=tmp_path / "workspaces")


BACKWARD = "            (loss / grad_accum_steps).backward()\n"
# Four passes over every batch it draws, the steps it reports honest: the count sees one.
PASSES = BACKWARD + ("            for _again in range(3):\n                with autocast:\n"
                     "                    loss = train_model(x, y)\n"
                     "                (loss / grad_accum_steps).backward()\n")
DRAW = "            x, y, epoch = next(train_loader)\n"
PROGRESS = "        return min(step / STEP_BUDGET, 1.0)\n"
# The red team's epochs: a new batch every fourth step, the schedule stretched four times.
EPOCHS = [(DRAW, "            if step % 4 == 3:\n    " + DRAW),
          (PROGRESS, PROGRESS.replace("STEP_BUDGET", "(4 * STEP_BUDGET)"))]
HONEST = ("FINAL_LR_FRAC 0.0 -> 0.05", [("FINAL_LR_FRAC = 0.0\n", "FINAL_LR_FRAC = 0.05\n")])
UNCOUNTED = "WARMUP_STEPS_UNCOUNTED = 11 "
CLOCK_LINE = "            training_seconds += dt\n"
LYING_CLOCK = "            training_seconds += 0.25 * dt\n"


def test_batches_trained_again_on_a_step_track_are_over_budget_and_nothing_is_kept(workspace):
    proposer = ScriptedChanges(("four passes over every batch", [(BACKWARD, PASSES)]),
                               ("epochs over the same batches", EPOCHS), HONEST)
    run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=4, noise_seeds=0, overlap=False),
             say=lambda _: None)
    base, passes, epochs, honest = Ledger(workspace.dir).records
    assert base.runs[0].cpu_seconds > 0
    assert passes.status == "crash" and passes.triage == "over_budget", passes.reason
    assert "where the baseline's runs used" in passes.reason
    assert passes.runs[0].cpu_seconds > COMPUTE_TOLERANCE * base.runs[0].cpu_seconds
    assert epochs.status == "crash" and epochs.triage == "over_budget", epochs.reason
    assert "steps of 2,048 tokens (TOTAL_BATCH_SIZE), but drew only" in epochs.reason
    assert honest.triage == "ok" and honest.status in ("keep", "discard"), honest.reason
    assert workspace.head() in (base.commit, honest.commit)
    shown = write_report(workspace).read_text()  # each run's CPU seconds and its share of the baseline's
    assert "<th>x the baseline's cost here</th>" in shown and f"<tr><td>{passes.id}</td>" in shown


def test_training_before_the_clock_starts_on_a_wall_clock_track_is_over_budget(clock_workspace):
    workspace = clock_workspace
    # 150 steps: well past the bound, and on a loaded machine still short of the seal's own limit (65 s here)
    proposer = ScriptedChanges(("150 uncounted warm-up steps", [(UNCOUNTED, "WARMUP_STEPS_UNCOUNTED = 150 ")]),
                               ("a clock that counts a quarter of each step", [(CLOCK_LINE, LYING_CLOCK)]), HONEST)
    run_loop(workspace, proposer, LocalRunner(), LoopSettings(max_experiments=4, noise_seeds=2, overlap=False),
             say=lambda _: None)
    base, _floor, warm, lying, honest = Ledger(workspace.dir).records
    assert base.triage == "ok" and base.runs[0].seal_seconds > 5
    assert warm.status == "crash" and warm.triage == "over_budget", warm.reason
    assert "before its clock starts trains outside the budget" in warm.reason
    assert lying.status == "crash" and lying.triage == "over_budget", lying.reason  # the red team's kept one
    assert honest.triage == "ok" and honest.status in ("keep", "discard"), honest.reason
    shown = write_report(workspace).read_text()
    assert "<th>uncounted (before its clock)</th>" in shown and f"<tr><td>{warm.id}</td>" in shown
