"""How long a run may take before it is killed, and the environment a CPU-clock track's runs get."""

from agent.settings import LoopSettings
from agent.steps.training import hard_timeout
from trainer.prepare import TRACKS
from trainer.track_spec import TrackConstants
from trainer.training_run import cpu_clock_env


def test_a_budget_the_load_does_not_change_gets_ten_times_the_wall_clock_before_the_hard_timeout():
    """CPU seconds and steps buy the same training on a busy machine, only later: the timeout only catches hangs."""
    settings = LoopSettings()
    assert hard_timeout(TRACKS["gpu"], settings) == 2 * 300 + 120
    assert hard_timeout(TRACKS["cpu"], settings) == 2 * 10 * 60 + 120
    assert hard_timeout(TRACKS["test"], settings) == 2 * 10 * 5 + 120
    assert hard_timeout(TRACKS["cpu"], LoopSettings(timeout_seconds=50)) == 50


def test_only_a_cpu_clock_track_computes_on_one_thread():
    assert cpu_clock_env(TrackConstants(**TRACKS["cpu"])) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert cpu_clock_env(TrackConstants(**TRACKS["gpu"])) == {}
    assert cpu_clock_env(TrackConstants(**TRACKS["test"])) == {}
