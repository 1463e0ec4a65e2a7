"""SIGTERM (`docker compose stop`, systemd, kill) stops `autoresearch run` the way Ctrl-C does."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sigterm_records_the_running_experiment_as_interrupted(test_track, tmp_path):
    workspaces, spool = tmp_path / "workspaces", tmp_path / "spool"
    # No trainer worker serves this spool: the baseline stays in flight until the signal.
    loop = subprocess.Popen([sys.executable, "-m", "agent.cli", "run", "--tag", "term", "--track", "test",
                             "--spool", str(spool), "--max-experiments", "1",
                             "--workspaces", str(workspaces)], cwd=ROOT, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    workspace = workspaces / "term"
    deadline = time.monotonic() + 120
    while not (list((workspace / "inflight").glob("*.json")) and list((spool / "jobs").glob("*.json"))):
        assert loop.poll() is None and time.monotonic() < deadline, loop.stdout.read() if loop.poll() else "timeout"
        time.sleep(0.2)
    started = time.monotonic()
    loop.send_signal(signal.SIGTERM)
    output, _ = loop.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert loop.returncode == 0, output
    assert "the experiments in flight were recorded as interrupted" in output
    assert "0000 training seed 42: starting" in output  # the live phase, as a plain line in a pipe
    report = workspace / "report" / "index.html"
    assert f"report: {report}" in output and report.is_file()
    records = [json.loads(line) for line in (workspace / "experiments.jsonl").read_text().splitlines()]
    assert [(r["id"], r["status"]) for r in records] == [("0000", "interrupted")]
    assert not list((workspace / "inflight").glob("*.json"))
    assert list((spool / "jobs").glob("*.json")) == []  # the job was withdrawn, not left for a worker
