"""How long the demo takes a newcomer, and where its time goes: `make run` on a fresh clone of this checkout's
HEAD, as the README gives it, every output line stamped with the seconds since the command started.

Prints the install's and the loop's wall time, each milestone of the loop (when it was said, since the loop
started), the decisions, and the sums of what the transcripts record: training (each run's own seconds),
verification by the trusted evaluator, and the held-out confirmation.

    .venv/bin/python benchmarks/demo_time.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MILESTONE = re.compile(r"^(\d{4}(?:-noise)?) (keep|discard|crash|verifying|re-running|confirming|sigma|deciding)"
                       r"|^(holdout confirmation|report:|stopped:|created )")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="clone into this directory and leave it there")
    args = parser.parse_args()
    where = args.keep or Path(tempfile.mkdtemp(prefix="demo-time-")) / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(where)], check=True)
    env = {name: value for name, value in os.environ.items() if not name.endswith("_API_KEY")}
    env.pop("AUTORESEARCH_WORKSPACES", None)
    started = time.monotonic()
    lines: list[tuple[float, str]] = []
    with subprocess.Popen(["make", "run"], cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as make:
        for line in make.stdout:
            lines.append((time.monotonic() - started, line.rstrip("\n")))
    wall = time.monotonic() - started
    loop_start = next((t for t, line in lines if "autoresearch run" in line), 0.0)
    print(f"make run on a fresh clone ({where}), exit {make.returncode}, {time.strftime('%Y-%m-%d %H:%M')} UTC, "
          f"{os.cpu_count()} cores, load average at the end {os.getloadavg()[0]:.1f}")
    print(f"install {loop_start / 60:.1f} min, the loop {(wall - loop_start) / 60:.1f} min, in all {wall / 60:.1f} min")
    print("\n| since the loop started | said |\n|---|---|")
    for t, line in lines:
        if t >= loop_start and MILESTONE.search(line):
            print(f"| {(t - loop_start) / 60:5.1f} min | {line[:110]} |")
    print_phases(where / "workspace" / "demo")
    if make.returncode != 0:
        print("\n".join(line for _, line in lines[-30:]), file=sys.stderr)
    if args.keep is None:
        shutil.rmtree(where.parent, ignore_errors=True)


def print_phases(workspace: Path) -> None:
    """Training, verification and confirmation seconds as the transcripts and confirmation.json record them."""
    training = verifying = 0.0
    runs = verifications = 0
    for path in sorted((workspace / "transcripts").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("type") == "run_finished" and event.get("seconds"):
                training, runs = training + event["seconds"], runs + 1
            elif event.get("type") == "verification" and event.get("verify_s"):
                verifying, verifications = verifying + event["verify_s"], verifications + 1
    print(f"\nruns: {runs}, {training / 60:.1f} run-minutes; verifications: {verifications}, "
          f"{verifying / 60:.1f} minutes (runs and verifications overlap: two slots on two cores)")
    results = (workspace / "results.tsv").read_text().splitlines()[1:] if (workspace / "results.tsv").exists() else []
    print("decisions: " + "; ".join(" ".join(row.split("\t")[i] for i in (3, 1, 4)) for row in results))


if __name__ == "__main__":
    main()
