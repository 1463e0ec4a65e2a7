"""What a Ray task does on its node before and after a run, without a cluster: the track made ready or
refused by fingerprint, and what tasks of dead workers left behind swept away."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.remote import ray_task
from trainer.remote.ray_task import NodePlace, TrackUnavailable, ensure_track, private_results
from trainer.sandbox.untrusted import runs_root

PLACE = NodePlace(ip="10.0.0.7", node_id="ab12cd34" * 7)


@pytest.fixture
def fresh_worker(monkeypatch):
    """As in a new worker process: no track found ready yet."""
    monkeypatch.setattr(ray_task, "_ready", set())


def test_a_prepared_track_with_the_commits_fingerprint_is_ready(test_track, fresh_worker):
    ensure_track(json.dumps(test_track.spec).encode(), PLACE)
    assert test_track.spec["fingerprint"] in ray_task._ready


def test_a_track_with_another_fingerprint_is_refused_naming_both(test_track, fresh_worker):
    other = dict(test_track.spec, fingerprint="f" * 64)
    with pytest.raises(TrackUnavailable) as refused:
        ensure_track(json.dumps(other).encode(), PLACE)
    message = str(refused.value)
    assert "ray node 10.0.0.7" in message and test_track.spec["fingerprint"][:12] in message
    assert "f" * 12 in message and "AUTORESEARCH_CACHE" in message
    assert "f" * 64 not in ray_task._ready


def test_a_track_json_that_is_not_one_is_refused(fresh_worker):
    with pytest.raises(TrackUnavailable, match="track.json"):
        ensure_track(b"{not json", PLACE)


def test_what_a_dead_workers_task_left_is_swept_and_a_live_ones_kept(test_track):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    results = runs_root() / "ray-results"
    abandoned = private_results("t-abandoned-0001")
    (abandoned / ray_task.OWNER).write_text(dead.stdout.strip())  # a worker that exited
    ray_task.run_dir_of(abandoned).mkdir(parents=True, exist_ok=True)
    left = ray_task.run_dir_of(abandoned)
    assert left.name.startswith("run-") and "abandoned" not in left.name
    mine = private_results("t-live-0002")
    assert (mine / ray_task.OWNER).read_text() == str(os.getpid())
    assert not abandoned.exists() and not left.exists()
    assert mine.exists() and mine.parent == results
    with pytest.raises(ValueError, match="one directory"):
        private_results("../escape")
    ray_task.shutil.rmtree(mine)


def test_a_worker_that_died_unreaped_counts_as_gone(test_track):
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # exits; not waited for, so it stays a zombie
    deadline = time.monotonic() + 30
    while not Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.05)
    assert ray_task.process_gone(zombie.pid) and not ray_task.process_gone(os.getpid())
    left = private_results("t-zombie-0003")
    (left / ray_task.OWNER).write_text(str(zombie.pid))
    ray_task.sweep_abandoned()
    assert not left.exists()
    zombie.wait()


def test_a_node_without_the_track_prepares_it_from_the_commits_source(test_track, fresh_worker, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_CACHE", str(tmp_path / "node-cache"))
    ensure_track(json.dumps(test_track.spec).encode(), PLACE)
    prepared = json.loads((tmp_path / "node-cache" / "test" / "track.json").read_text())
    assert prepared["fingerprint"] == test_track.spec["fingerprint"]
