"""The GPU check's night (benchmarks/gpu_night.py) walked on CPU, as `scripts/gpu_check.sh -- --smoke` walks it:
`autoresearch run` on a workspace with a shortened budget, every run compiled cold in the sandbox, the baseline
verified on a slot of its own and the night's tolerances measured from it, one experiment from the offline
proposer, the confirmation; each phase's seconds read back from the night's records."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from benchmarks.gpu_night import night_lines, run_night, short_prepare  # noqa: E402


def test_the_check_walks_a_short_night_through_autoresearch_run(test_track, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    night = run_night(tmp_path, test_track.spec, "test", budget=17, timeout=600)
    assert night.returncode == 0, night.log_tail
    baseline, experiment = night.runs[0], night.runs[-1]
    assert [baseline.experiment, experiment.experiment] == ["0000", "0001"], night.runs
    assert baseline.check and baseline.check["device"] == "cpu" and baseline.verify_seconds > 0
    assert night.tolerances["measured"]["agreement"] == baseline.check["gap"]
    assert float(baseline.phases["warmup_seconds"]) > 0 and baseline.attention == "sdpa-banded"
    assert night.confirmed
    said = "\n".join(night_lines(night))
    assert "0000 keep (baseline)" in said and "tolerances: measured on this machine's baseline" in said
    prepare = (tmp_path / "workspaces" / "gpu-check" / "prepare.py").read_text()
    assert prepare == short_prepare(17) and "TIME_BUDGET: int = 17  # the GPU check's shortened budget" in prepare
    train = (tmp_path / "workspaces" / "gpu-check" / "train.py").read_text()
    assert "COMPILE_ON_CPU = True" in train  # every run of the walk-through compiles, as on a GPU
    assert not [line for line in train.splitlines() if line.startswith("TIME_BUDGET")]  # train.py may not set it
