"""benchmarks/llm_caching.py in its smoke mode: two proposals per model through the real SDKs to the loopback
server, priced; the table prints and caching reads back what it wrote."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_caching_benchmark_runs_and_caching_pays():
    ran = subprocess.run([sys.executable, "benchmarks/llm_caching.py", "--smoke"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    rows = [line for line in ran.stdout.splitlines() if "claude-opus-5-5" in line or "gpt-5.6" in line]
    assert len(rows) == 2, ran.stdout
    for row in rows:
        cheaper = re.search(r"(\d+\.\d)x cheaper", row)
        assert cheaper and float(cheaper.group(1)) > 1.0, row  # the second proposal read the first's prefix
