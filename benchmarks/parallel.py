"""Experiments per hour with K experiments in flight: does the loop itself cap scaling?

1. simulation: the real loop (agent.loop.run_loop, a real Workspace on the test track, real git
   commits, ledger, decisions and verification) drives a runner with K slots whose runs sleep
   --sleep seconds and then answer as tests/helpers/synthetic_runner.py does (a summary block, a
   sealed weights file, the trusted evaluator agreeing with the printed number). Each proposal
   sets one hyperparameter to a random value on the best train.py; its val_bpb is a fixed
   function of train.py's hyperparameter lines (and of the seed, by at most SEED_NOISE), so some
   changes are kept (and verified), most are not, and keeps get rarer as the night goes on. No
   noise floor is measured; min_delta is set above the seed noise, as it would be without a
   floor, so a change that helps nothing is not kept on a lucky seed. Every K > 1 runs the same
   night, --experiments after the baseline, so that all meet the same keep rate (keeps get
   rarer as the night goes on, and how often a would-be keep must be re-based on a newer best
   depends on it); K=1 runs --single experiments (with one slot nothing is re-based). For each
   K: experiments finished after the baseline, their wall seconds, experiments/hour over that
   wall and in the steady state (between the end of the first round, when every slot is busy,
   and the start of the last, when slots go idle because the night is ending), speed-up of the
   steady rate over K=1 and efficiency = speed-up / K (the goal: >= 0.95 up to K=64); and how
   the slots spent the steady window: idle (the loop's own cost) and re-running would-be keeps
   on a newer best (the keep rule's). The baseline runs alone and is not counted.
2. a proposer that takes time (--latency P): the same simulation, but proposals come from the real LLM
   proposer talking to the loopback LLM server (tests/helpers/llm_server.py), which answers each request
   after P seconds with a change of one setting (tests/helpers/llm_responders.py), so one proposal takes
   about P. The loop chooses how many conversations to open at once (no --proposers). For each K in
   --latency-ks, --rounds x K experiments: steady experiments/hour, efficiency against the ideal K x 3600 / R
   (every slot always running), the slots' idle share, the most conversations open at once, proposals
   wasted (changes refused because another conversation had them, proposals made and never run) and the
   waits on the shared rate limiter.
3. real training: the local runner on the test track, K=1 and K=2, experiments per hour.

    .venv/bin/python benchmarks/parallel.py [--ks 1,8,32,64] [--sleep 20] [--experiments 768]
                                            [--single 12] [--real 6] [--profile K] [--cache DIR]
                                            [--latency 4 --latency-ks 8,16,32,64 --rounds 8]

--profile K runs the simulation once more at K with a profiler of each thread's CPU time (waiting
and sleeping count nothing) and prints where the loop's own time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import os
import pstats
import random
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agent.loop import LoopSettings, run_loop  # noqa: E402
from agent.proposers.base import Proposal, Proposer  # noqa: E402
from agent.proposers.edits import Edit  # noqa: E402
from agent.recording.ledger import read_records  # noqa: E402
from agent.workspace import Workspace  # noqa: E402
from tests.helpers.llm_responders import SETTINGS  # noqa: E402  # the float settings both proposers change
from tests.helpers.synthetic_runner import SyntheticRunner  # noqa: E402
from trainer.tracks.hyperparameters import set_hyperparameters  # noqa: E402

BASE_BPB = 1.5
SETTING_GAIN = 0.01  # the most one setting's value can lower val_bpb
HELPFUL = 0.1        # the share of random values of a setting that lower val_bpb at all: about one keep in ten
SEED_NOISE = 1e-6    # the most two seeds of one train.py differ by
MIN_DELTA = 1e-5     # the loop's min_delta: without a noise floor, a gain the size of the seed noise is no keep


def setting_lines(source: str) -> list[str]:
    return [line.split("#")[0].strip() for line in source.splitlines()
            if re.match(rf"^({'|'.join(SETTINGS)}) = ", line)]


class RandomSettings(Proposer):
    """Proposes one setting at a new random value on the best train.py (proposals may be made from several
    threads at once)."""

    name = "random settings"

    def __init__(self, seed: int = 0):
        self.random = random.Random(seed)
        self._lock = threading.Lock()

    def propose(self, context, transcript):
        lines = {line.split(" = ")[0]: line for line in context.train_source.splitlines()
                 if line.split(" = ")[0] in SETTINGS}
        with self._lock:
            name = self.random.choice(sorted(lines))
            factor = self.random.uniform(0.5, 2.0)
        current = float(lines[name].split(" = ")[1].split("#")[0])
        value = float(f"{current * factor:.4g}")
        if name == "NORMUON_BETA2":
            value = min(value, 0.999)
        if value == current:
            value = float(f"{current * 0.9:.4g}")
        changed = set_hyperparameters(context.train_source, {name: value})
        new = next(line for line in changed.splitlines() if line.startswith(f"{name} = "))
        return Proposal(f"{name} {current:g} -> {value:g}", [Edit(lines[name], new)])


class SleepingRunner(SyntheticRunner):
    """K slots; each run holds one for `sleep` seconds, then answers with a val_bpb that is a fixed function of the
    settings' lines (the synthetic runner's summary block, sealed weights and evaluator)."""

    name = "sleeping"
    isolation = "simulated runs: each sleeps, nothing is executed"

    def __init__(self, slots: int, sleep: float):
        super().__init__({}, slots=slots, delays={"": sleep})  # "" is in every train.py: every run lasts `sleep`

    def score(self, source: str, seed: int) -> float:
        gain = sum(max(0.0, int.from_bytes(hashlib.sha256(line.encode()).digest()[:4], "big") / 2**32 - 1 + HELPFUL)
                   / HELPFUL * SETTING_GAIN for line in setting_lines(source))
        return round(BASE_BPB - gain + ((seed * 7919) % 13 - 6) / 12 * SEED_NOISE, 6)


@dataclass
class Measured:
    k: int
    experiments: int        # finished after the baseline
    wall: float             # from the baseline's end to the loop's end
    runs: int               # every run, re-runs included
    kept: int
    decided: list[float]    # time.monotonic() of each decision after the baseline's, in order
    idle: float = 0.0       # share of the K slots' time in the steady window with no run
    rebased: float = 0.0    # share of it spent re-running would-be keeps on a newer best
    proposing: Proposing | None = None

    @property
    def per_hour(self) -> float:
        return 3600 * self.experiments / self.wall if self.wall > 0 else 0.0

    @property
    def steady_per_hour(self) -> float:
        """Experiments/hour between the end of the first round (every slot busy) and the start of the last (slots
        go idle as the night's last experiments end), over whole rounds: from the K-th decision to a decision a
        multiple of K after it. (With runs of one length, decisions come in rounds of K at once; a window ending
        on the first decision of a round would count one decision of that round's K and under-state the rate by
        up to (K - 1) / (K x rounds).)"""
        window = self.steady_window()
        if window is None:
            return self.per_hour
        first, last = window
        return 3600 * (last - first) / (self.decided[last] - self.decided[first])

    def steady_window(self) -> tuple[int, int] | None:
        """The indices in `decided` of the steady window's first and last decision."""
        first = self.k - 1
        last = first + self.k * ((len(self.decided) - self.k - first) // self.k)
        return (first, last) if last > first else None

    def share_slots(self, spans) -> None:
        """idle and rebased, from the runner's spans."""
        window = self.steady_window()
        if window is None:
            return
        start, end = self.decided[window[0]], self.decided[window[1]]

        def inside(span) -> float:
            return max(0.0, min(span.ended, end) - max(span.started, start))

        total = self.k * (end - start)
        self.idle = 1 - sum(inside(span) for span in spans) / total
        self.rebased = sum(inside(span) for span in spans if ".rebase" in span.name) / total


@dataclass
class Proposing:
    """How the proposals of a simulation with a slow proposer went."""
    most_at_once: int = 0     # conversations open at the same moment, at most
    refused: int = 0          # submissions refused because another conversation had the same change
    abandoned: int = 0        # proposals made that never ran
    failed: int = 0           # proposals that failed
    limiter_waits: int = 0    # requests that waited for the shared rate limiter
    limiter_wait_s: float = 0.0


def simulate(k: int, sleep: float, experiments: int, spec: dict, profile: bool = False,
             seed: int | None = None, latency: float = 0.0) -> Measured:
    settings = LoopSettings(max_experiments=experiments + 1, parallel=k, noise_seeds=0, min_delta=MIN_DELTA,
                            grace_seconds=60)
    root = Path(tempfile.mkdtemp(prefix=f"parallel-{k}-"))
    workspace = Workspace.create("sim", spec, REPO / "prompts" / "program.md", root=root)
    runner = SleepingRunner(k, sleep)
    decided: list[float] = []
    decision = re.compile(r"^\d{4} [a-z]+ ")

    def say(line: str) -> None:
        if decision.match(line) and not line.startswith("0000 "):
            decided.append(time.monotonic())

    profiles: list[cProfile.Profile] = []
    if profile:
        _profile_threads(profiles)
    started = time.monotonic()
    proposing = Proposing()
    try:
        if latency:
            proposing = _with_slow_proposer(workspace, runner, settings, say, latency, k if seed is None else seed)
        else:
            run_loop(workspace, RandomSettings(seed=k if seed is None else seed), runner, settings, say=say)
    finally:
        if profile:
            threading.Thread.run = _THREAD_RUN
    ended = time.monotonic()
    if profile:
        _print_profile(profiles)
    baseline_end = next((span.ended for span in runner.spans if span.name == "0000"), started)
    done = [r for r in read_records(workspace.dir) if r.is_experiment and r.id != "0000"]
    measured = Measured(k, len(done), ended - baseline_end, len(runner.spans), sum(r.status == "keep" for r in done),
                        decided)
    measured.share_slots(runner.spans)
    measured.proposing = proposing
    return measured


def _with_slow_proposer(workspace, runner, settings, say, latency: float, seed: int) -> Proposing:
    """run_loop with the real LLM proposer against the loopback server answering after `latency` seconds."""
    from agent.llm.pricing import PriceTable
    from agent.llm.select import conversation_factory
    from agent.proposers.llm import LLMProposer
    from agent.recording.proposal_failures import read_failures
    from tests.helpers.llm_responders import SettingChanges
    from tests.helpers.llm_server import LLMServer

    with LLMServer(latency=latency, responder=SettingChanges(seed=seed)) as server:
        os.environ.update(ANTHROPIC_API_KEY="sk-ant-benchmark", ANTHROPIC_BASE_URL=server.anthropic_base_url())
        proposer = LLMProposer(conversation_factory("anthropic:claude-opus-5-5"), workspace.dir, PriceTable())
        run_loop(workspace, proposer, runner, settings, say=say)
        most = server.most_at_once
    failures = read_failures(workspace.dir)
    refused = sum(1 for path in (workspace.dir / "transcripts").glob("*.jsonl")
                  for line in path.read_text().splitlines() if '"tool_result"' in line and "refused, nothing" in line)
    return Proposing(most, refused, sum(f.kind == "abandoned" for f in failures),
                     sum(f.kind != "abandoned" for f in failures), proposer.limits.waits, proposer.limits.waited_s)


_THREAD_RUN = threading.Thread.run


def _profile_threads(profiles: list[cProfile.Profile]) -> None:
    """Every thread started from now on runs under its own profiler (collected into profiles)."""
    def run(thread):
        profiler = cProfile.Profile(time.thread_time)
        profiles.append(profiler)
        profiler.enable()
        try:
            _THREAD_RUN(thread)
        finally:
            profiler.disable()
    threading.Thread.run = run
    main = cProfile.Profile(time.thread_time)
    profiles.append(main)
    main.enable()


def _print_profile(profiles: list[cProfile.Profile]) -> None:
    for profiler in profiles:
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiles[0], stream=out)
    for profiler in profiles[1:]:
        stats.add(profiler)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(r"agent|git/cmd", 40)
    print(out.getvalue())


def real_training(k: int, experiments: int, spec: dict) -> Measured:
    from agent.proposers.optuna_search import OptunaProposer
    from agent.running.runner import LocalRunner

    settings = LoopSettings(max_experiments=experiments + 1, parallel=k, noise_seeds=0)
    root = Path(tempfile.mkdtemp(prefix=f"parallel-real-{k}-"))
    workspace = Workspace.create("real", spec, REPO / "prompts" / "program.md", root=root)
    decided: list[float] = []

    def say(line: str) -> None:
        if re.match(r"^\d{4} [a-z]+ ", line):
            decided.append(time.monotonic())

    run_loop(workspace, OptunaProposer(workspace.dir / "optuna.journal", seed=k), LocalRunner(slots=k), settings,
             say=say)
    ended = time.monotonic()
    records = read_records(workspace.dir)
    done = [r for r in records if r.is_experiment and r.id != "0000"]
    runs = sum(len(r.runs) + sum(len(moved.runs) for moved in r.rebased_from) for r in records)
    return Measured(k, len(done), ended - decided[0], runs,
                    sum(r.status == "keep" for r in done), decided[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="1,8,32,64", help="slots of the simulation, comma-separated")
    parser.add_argument("--sleep", type=float, default=20.0, help="seconds a simulated run takes")
    parser.add_argument("--experiments", type=int, default=768, help="experiments after the baseline for every K > 1")
    parser.add_argument("--single", type=int, default=12, help="experiments after the baseline for K=1")
    parser.add_argument("--real", type=int, default=6, help="experiments after the baseline with real training "
                                                            "(0: skip)")
    parser.add_argument("--profile", type=int, default=0, help="profile the simulation at this K")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds the LLM proposer's model takes per "
                                                                   "request (0: skip that part)")
    parser.add_argument("--latency-ks", default="8,16,32,64", help="slots of the simulation with --latency")
    parser.add_argument("--latency-sleep", type=float, default=None, help="run seconds with --latency (default: "
                                                                          "--sleep)")
    parser.add_argument("--rounds", type=int, default=8, help="experiments per slot with --latency")
    args = parser.parse_args()
    from rich.console import Console
    from rich.table import Table

    from benchmarks.test_track import prepared_test_track

    console = Console(width=140)
    spec = prepared_test_track(args.cache)
    console.print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")

    table = Table(title=f"simulation: the real loop, runs that sleep {args.sleep:g} s")
    for column in ("K", "experiments", "kept", "runs", "wall s", "experiments/hour", "steady experiments/hour",
                   "speed-up", "efficiency", "idle", "re-based"):
        table.add_column(column, justify="right")
    single = None
    for k in (int(x) for x in args.ks.split(",") if x):
        measured = simulate(k, args.sleep, args.single if k == 1 else args.experiments, spec)
        single = single or measured.steady_per_hour / k
        speedup = measured.steady_per_hour / single
        table.add_row(str(k), str(measured.experiments), str(measured.kept), str(measured.runs),
                      f"{measured.wall:.1f}", f"{measured.per_hour:,.0f}", f"{measured.steady_per_hour:,.0f}",
                      f"{speedup:.2f}", f"{speedup / k:.2f}", f"{measured.idle:.1%}", f"{measured.rebased:.1%}")
        console.print(f"K={k}: {measured.experiments} experiments in {measured.wall:.1f} s "
                      f"(load average {os.getloadavg()[0]:.1f})")
    console.print(table)
    console.print("steady: between the first round's end and the last round's start; speed-up over the first K's "
                  "steady rate per slot; idle, re-based: shares of the slots' time in the steady window with no run, "
                  "and re-running would-be keeps on a newer best")

    if args.profile:
        simulate(args.profile, args.sleep, args.experiments, spec, profile=True)

    if args.latency:
        sleep = args.latency_sleep or args.sleep
        table = Table(title=f"a proposer of {args.latency:g} s: the real LLM proposer, the loopback server, runs "
                            f"of {sleep:g} s (R/P = {sleep / args.latency:g}), conversations chosen by the loop")
        for column in ("K", "experiments", "wall s", "steady experiments/hour", "ideal", "efficiency", "idle",
                       "re-based", "most conversations", "refused", "abandoned", "failed", "limiter waits"):
            table.add_column(column, justify="right")
        for k in (int(x) for x in args.latency_ks.split(",")):
            measured = simulate(k, sleep, args.rounds * k, spec, latency=args.latency)
            ideal = k * 3600 / sleep
            p = measured.proposing
            table.add_row(str(k), str(measured.experiments), f"{measured.wall:.0f}",
                          f"{measured.steady_per_hour:,.0f}", f"{ideal:,.0f}",
                          f"{measured.steady_per_hour / ideal:.2f}", f"{measured.idle:.1%}",
                          f"{measured.rebased:.1%}", str(p.most_at_once),
                          str(p.refused), str(p.abandoned), str(p.failed),
                          f"{p.limiter_waits} ({p.limiter_wait_s:.1f} s)")
            console.print(f"K={k}: {measured.experiments} experiments in {measured.wall:.1f} s "
                          f"(load average {os.getloadavg()[0]:.1f})")
        console.print(table)

    if args.real:
        table = Table(title=f"real training: test track, local runner, {args.real} experiments after the baseline")
        for column in ("K", "experiments", "kept", "runs", "wall s", "experiments/hour", "speed-up"):
            table.add_column(column, justify="right")
        single = None
        for k in (1, 2):
            measured = real_training(k, args.real, spec)
            single = single or measured.per_hour
            table.add_row(str(k), str(measured.experiments), str(measured.kept), str(measured.runs),
                          f"{measured.wall:.0f}", f"{measured.per_hour:.1f}", f"{measured.per_hour / single:.2f}")
        console.print(table)
        console.print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
