"""Where a night's time went, as its report tells it: the wall clock from the first stamped event to the last,
each phase's seconds (at least one of it open) and share, the seconds nothing ran, and each training slot's busy
seconds; then what each keep cost. Reads a workspace through the report's own read model (agent/report/night.py).

    .venv/bin/python benchmarks/time_went.py --tag demo [--workspaces DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.report.night import Night  # noqa: E402
from agent.report.timeline import union_seconds  # noqa: E402
from agent.workspace import Workspace  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", required=True)
    parser.add_argument("--workspaces", type=Path, default=None)
    args = parser.parse_args()
    night = Night(Workspace.open(args.tag, args.workspaces))
    went = night.time_went
    if went is None:
        sys.exit(f"{args.tag}: no stamped event")
    print(f"{args.tag}: wall clock {went.wall_s:,.0f} s, first stamped event to last")
    print("| phase | seconds | share of the wall clock |\n|---|---|---|")
    for phase, seconds in [*went.phases.items(), ("nothing running", went.idle_s)]:
        print(f"| {phase} | {seconds:,.0f} | {100 * went.share(seconds):.0f}% |")
    for lane in sorted({s.lane for s in night.spans if s.phase == "training"}):
        busy = union_seconds([(s.start, s.end) for s in night.spans if s.lane == lane])
        print(f"| {lane}, training | {busy:,.0f} | {100 * went.share(busy):.0f}% |")
    print(f"\n{night.headline.device}-hours {night.headline.gpu_hours:.3f}, duty cycle {night.headline.duty_cycle:.0%}")
    for keep in night.returns.keeps:
        per = keep.device_hours_per_gain
        print(f"keep {keep.id}: moved the best {keep.moved:.6f} after {keep.device_hours_since:.3f} "
              f"{night.headline.device}-hours" + (f" ({per:.3g} per unit of val_bpb)" if per else ""))
    print(night.returns.why_not or f"projection: {night.returns.projection}")


if __name__ == "__main__":
    main()
