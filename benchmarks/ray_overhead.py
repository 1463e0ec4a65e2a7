"""What a run costs through Ray against the local runner, on the test track: a local cluster on the loopback
address (a head without GPUs, two nodes with one logical GPU each), the same commit run one at a time by each
runner; the agent's wall-clock seconds per run against the run's own (train.py's process), median of N.

    python benchmarks/ray_overhead.py [--runs 3]

Prints a table; numbers go into BENCHMARKS.md with the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ["AUTORESEARCH_TRACK"] = "test"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read by ray at import: every address it picks is 127.0.0.1

REPO = Path(__file__).resolve().parents[1]


def timed_runs(runner, workspace, runs: int, label: str) -> tuple[list[float], list[float], object]:
    walls, own, result = [], [], None
    from trainer.runs.jobs import Job
    from trainer.runs.run_id import RunId

    for number in range(runs):
        started = time.perf_counter()
        result = runner.run(workspace, Job(run=RunId.train(f"{label}{number:02d}"), commit=workspace.head(),
                                           seed=42 + number, timeout=600.0))
        walls.append(time.perf_counter() - started)
        own.append(result.seconds)
        assert result.verdict.triage.value == "ok", result.tail
    return walls, own, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    from agent.running.ray_runner import RayRunner
    from agent.running.runner import LocalRunner
    from agent.workspace import Workspace
    from trainer.runs.jobs import EvaluationJob
    from trainer.runs.run_id import RunId
    from trainer.tracks.builder import prepare_track

    root = Path(tempfile.mkdtemp(prefix="ray-overhead-"))
    os.environ["AUTORESEARCH_CACHE"] = str(root / "cache")
    track = prepare_track("test", cache=root / "cache", show_progress=False)
    workspace = Workspace.create("bench", track.spec, REPO / "prompts" / "program.md", root=root / "workspaces")

    started = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=1, num_gpus=0, object_store_memory=200 << 20, include_dashboard=False, node_ip_address="127.0.0.1"))
    for _ in range(2):
        cluster.add_node(num_cpus=1, num_gpus=1, object_store_memory=200 << 20, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    ray_runner = RayRunner(cluster.address)
    start_seconds = time.perf_counter() - started
    try:
        rows = {}
        for name, runner in (("local", LocalRunner()), ("ray", ray_runner)):
            timed_runs(runner, workspace, 1, f"{name}-warm")  # compile caches and, for Ray, its worker processes
            walls, own, result = timed_runs(runner, workspace, args.runs, name)
            started = time.perf_counter()
            runner.evaluate(workspace, EvaluationJob(run=RunId.train(f"{name}-eval"), commit=workspace.head(),
                                                     checkpoint=result.checkpoint))
            rows[name] = (statistics.median(walls), statistics.median(own), time.perf_counter() - started,
                          result.checkpoint.stat().st_size)
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(f"cluster start (3 nodes) and connect: {start_seconds:.1f} s")
    print("| runner | wall per run | run's own | overhead | evaluate (val) | weights sent back |")
    print("|---|---|---|---|---|---|")
    for name, (wall, own, evaluate, size) in rows.items():
        print(f"| {name} | {wall:.2f} s | {own:.2f} s | {wall - own:.2f} s | {evaluate:.2f} s | "
              f"{size / 2**20:.1f} MiB |")


if __name__ == "__main__":
    main()
