"""How long a run may take before it is killed, and the threads a track's runs compute on."""

from agent.settings import LoopSettings
from agent.steps.training import hard_timeout
from trainer.prepare import TRACKS
from trainer.runs.training_run import threads_env
from trainer.tracks.spec import TrackConstants

# The cpu track's constants as a workspace made before it counted FLOPs froze them.
CPU_SECONDS_TRACK = dict(max_seq_len=256, time_budget=60, eval_tokens=1024 * 256, vocab_size=4096, source="stdlib",
                         doc_chars=384, budget_clock="cpu")


def test_a_budget_the_load_does_not_change_gets_ten_times_the_wall_clock_before_the_hard_timeout():
    """Steps, FLOPs and CPU seconds buy the same training on a busy machine, only later: the timeout only catches
    hangs."""
    settings = LoopSettings()
    assert hard_timeout(TrackConstants.of_track("gpu"), settings) == 2 * 300 + 120
    assert TRACKS["cpu"].get("flops_budget") and not TRACKS["cpu"].get("budget_clock")
    assert hard_timeout(TrackConstants.of_track("cpu"), settings) == 2 * 10 * 60 + 120
    assert hard_timeout(TrackConstants(**CPU_SECONDS_TRACK), settings) == 2 * 10 * 60 + 120
    assert hard_timeout(TrackConstants.of_track("test"), settings) == 2 * 10 * 5 + 120
    assert hard_timeout(TrackConstants.of_track("cpu"), LoopSettings(timeout_seconds=50)) == 50


def test_the_cpu_track_computes_on_one_thread_before_and_after_it_counted_flops():
    one = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert threads_env(TrackConstants(**TRACKS["cpu"])) == one
    assert threads_env(TrackConstants(**CPU_SECONDS_TRACK)) == one
    assert threads_env(TrackConstants(**TRACKS["gpu"])) == {}
    assert threads_env(TrackConstants(**TRACKS["test"])) == one  # the harness reads its CPU seconds
    assert threads_env(TrackConstants(**TRACKS["test-flops"]), gpu=True) == {}  # it reads a GPU run's wall clock
    assert threads_env(TrackConstants(**TRACKS["test-clock"])) == {}
    assert threads_env(TrackConstants(**{**TRACKS["gpu"], "threads": 4})) == {"OMP_NUM_THREADS": "4",
                                                                             "MKL_NUM_THREADS": "4"}
