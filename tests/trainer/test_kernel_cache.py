"""A sandboxed run finds the attention kernels pre-fetched into the machine's hub cache: the run path shows the
cache read-only at its own path, names it in the run's environment and keeps the hub offline, so the real
`kernels` loader resolves version 1 from it with no network (trainer/tracks/kernel_cache.py)."""

from pathlib import Path

from tests.helpers.kernel_hub import kernel_repository
from tests.trainer.test_run_path import commit_files, run
from trainer.runs.triage import Triage
from trainer.sandbox.untrusted import isolation_available
from trainer.tracks.hyperparameters import train_source_for_track

TRAIN_PY = Path(__file__).resolve().parents[2] / "trainer" / "train.py"
# The one change: choose the kernel as on a Hopper GPU, so that the CPU run asks the hub for FlashAttention-3.
AS_ON_HOPPER = ("wanted=ATTENTION)", "wanted=ATTENTION, capability=(9, 0))")


def test_a_sandboxed_run_loads_its_kernel_from_an_offline_hub_cache(test_track, place, tmp_path, monkeypatch):
    hub = tmp_path / "home" / ".cache" / "huggingface" / "hub"
    kernel_repository(hub, "kernels-community/flash-attn3")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the default cache, in a home the run never sees
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    source = train_source_for_track(TRAIN_PY.read_text(), "test")
    assert AS_ON_HOPPER[0] in source
    train_py = source.replace(*AS_ON_HOPPER)
    train_py += "\nimport os\nprint('hub seen as', os.environ.get('HF_HUB_CACHE'), os.environ.get('HF_HUB_OFFLINE'))\n"
    result = run(commit_files(test_track, train_py.encode()), place)
    assert result.verdict.triage == Triage.OK, result.tail
    assert result.summary["attention"] == "fa3 kernels-community/flash-attn3", result.tail
    # The other Hopper build is not in the cache: passed over, said, and the run went on.
    assert "varunneal/flash-attention-3" in result.summary["attention_skipped"]
    assert result.isolated == isolation_available()
    log = place["log_path"].read_text()
    assert f"hub seen as {hub.resolve()} 1" in log
    # The cache is the machine's: the run could read it and wrote nothing into it.
    assert sorted(p.name for p in hub.rglob("*") if p.is_file()) == ["__init__.py", "metadata.json", "v1"]

