"""Each track's usual sigma is a measurement benchmarks/noise.py wrote (value, seeds, date, machine), and the
warning about a noise floor far above it blames a busy machine only where a busy machine could move the runs."""

import json

import pytest

from agent.judging.noise import USUAL_SIGMA, inflated_floor
from agent.judging.usual_sigma import TABLE, UsualSigma, record_measurement, usual_sigmas
from agent.loop import LoopSettings, run_loop
from agent.recording.ledger import Ledger
from tests.helpers.scripted import ScriptedEdits
from tests.helpers.synthetic_runner import SyntheticRunner
from trainer.prepare import TRACKS
from trainer.tracks.spec import TrackConstants


def test_the_rule_reads_the_measured_table():
    table = json.loads(TABLE.read_text())
    assert USUAL_SIGMA == {track: entry["sigma"] for track, entry in table.items()}
    assert set(USUAL_SIGMA) <= set(TRACKS)
    test = usual_sigmas()["test"]
    assert test.seeds and test.date and test.machine  # a measurement says what it was measured on


def test_a_measurement_replaces_the_tracks_entry_and_keeps_the_others(tmp_path):
    table = tmp_path / "usual_sigma.json"
    table.write_text(TABLE.read_text())
    measured = UsualSigma(sigma=0.0123, seeds=[42, 43, 44], date="2026-12-05", machine="a box", source="a bench")
    record_measurement("test", measured, table)
    after = usual_sigmas(table)
    assert after["test"] == measured and after["cpu"] == usual_sigmas()["cpu"]
    assert "0.0123 over seeds 42-44, 2026-12-05 on a box" == measured.describe()
    with pytest.raises(ValueError, match="unknown track 'nope'"):
        record_measurement("nope", measured, table)


def test_only_a_track_budgeted_in_time_blames_a_busy_machine():
    assert not TrackConstants.of_track("gpu").counted
    assert all(TrackConstants.of_track(track).counted for track in ("cpu", "test", "gpu-flops"))  # FLOPs or steps
    on_gpu = inflated_floor(10 * USUAL_SIGMA["gpu"], "gpu")
    on_test = inflated_floor(10 * USUAL_SIGMA["test"], "test")
    assert "is the machine busy?" in on_gpu
    assert "is the machine busy?" not in on_test and "the seeds alone move it that much" in on_test
    assert inflated_floor(USUAL_SIGMA["test"] * 1.1, "test") is None  # the measured spread itself is no warning


def test_a_night_on_the_step_budgeted_track_does_not_call_its_seed_spread_a_busy_machine(workspace):
    said = []
    runner = SyntheticRunner({"WARMDOWN_RATIO = 0.3": 0.5}, noise=0.3)  # seeds alone spread it widely
    run_loop(workspace, ScriptedEdits(("warmdown 0.3", "WARMDOWN_RATIO = 0.5", "WARMDOWN_RATIO = 0.3")), runner,
             LoopSettings(max_experiments=2, noise_seeds=2, counted_seeds=True), say=said.append)
    floor = next(r for r in Ledger(workspace.dir).records if not r.is_experiment)
    assert floor.sigma > 3 * USUAL_SIGMA["test"]  # counted seeds: three different wobbles
    warning = next(line for line in said if "this track's usual" in line)
    assert "seeds alone" in warning and "is the machine busy?" not in warning
