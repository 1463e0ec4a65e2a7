"""What running train.py as a stranger costs: the start of an isolated process against a plain one, and the
agent's memory and the log's size when a run floods its output.

    python benchmarks/stranger_costs.py [--flood-mb 1536]

Prints a table; numbers go into BENCHMARKS.md with the machine.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from trainer.sandbox.untrusted import View, isolation, run_untrusted

FLOOD = """
import sys
block = (("x" * 1023 + "\\n") * 1024).encode()
for _ in range({mb}):
    sys.stdout.buffer.write(block)
"""


def start_seconds(directory: Path, view: View | None, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run_untrusted([sys.executable, "-c", "pass"], directory, directory / "start.log", 60, {}, view=view)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood-mb", type=int, default=1536)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="stranger-costs-"))
    directory.chmod(0o1777)
    print(isolation().note)
    print("| what | value |\n|---|---|")
    print(f"| start + exit of `python -c pass`, plain | {start_seconds(directory, None):.2f} s |")
    if isolation().available:
        print(f"| start + exit of `python -c pass`, isolated | {start_seconds(directory, View()):.2f} s |")
    (directory / "flood.py").write_text(FLOOD.format(mb=args.flood_mb))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    run_untrusted([sys.executable, "flood.py"], directory, directory / "flood.log", 600, {})
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"| {args.flood_mb} MiB printed: seconds | {seconds:.1f} s |")
    print(f"| {args.flood_mb} MiB printed: log size | {(directory / 'flood.log').stat().st_size / 2**20:.2f} MiB |")
    print(f"| {args.flood_mb} MiB printed: agent peak RSS, before -> after | {before / 1024:.0f} -> "
          f"{after / 1024:.0f} MiB |")


if __name__ == "__main__":
    main()
