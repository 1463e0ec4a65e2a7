"""`autoresearch verify BUNDLE`: whether a bundle's gain reproduces on this machine.

The bundle is a stranger's code. Its two train.py files pass the sandbox policy an edit must pass (the best's
against the baseline's, so that it cannot reseed), they run only as any run of a night runs (the runner's sandbox,
the frozen prepare.py and track of this machine, every number scored from the sealed weights by the trusted
evaluator, the best's runs held to the compute the baseline used here), and a bundle made on another track, other
data or other frozen files is refused before anything trains. Each side trains `runs` times with fresh seeds,
interleaved so that a machine that slows down slows both; the gain reproduces when Welch's t-test (one-sided) says
the best is lower at ALPHA.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import math
import os
import secrets
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel
from scipy import stats

from agent.bundle.manifest import Bundle, BundleRefused
from agent.judging.compute import over_compute
from agent.judging.verify import Untrusted, score_runs
from agent.proposers.edits import EditRejected
from agent.proposers.policy import check_policy
from agent.recording.record import ExperimentRecord, ExperimentStatus, RunEntry
from agent.running.runner import Runner
from agent.settings import LoopSettings
from agent.steps.training import hard_timeout
from agent.workspace import TRAINER_DIR, Workspace
from trainer.runs.jobs import Job
from trainer.runs.run_id import RunId
from trainer.runs.triage import Triage
from trainer.sandbox.seal import declared_batch_tokens
from trainer.tracks.builder import PreparedTrack
from trainer.tracks.hardware import this_machine
from trainer.tracks.hyperparameters import train_source_for_track
from trainer.tracks.profiles import KNOWN_DEVICES, ProfileError, profile_for

ALPHA = 0.05


class Reproduction(BaseModel):
    bundle_tag: str
    baseline_changed: int         # lines the bundle's baseline differs by from this track's own train.py
    track: str
    baseline: list[float]         # the trusted evaluator's val_bpb of each run, this machine, fresh seeds
    best: list[float]
    claimed_gain: float           # the bundle's
    gain: float                   # here: the baseline's mean less the best's
    p: float | None               # Welch's t-test, one-sided (None: no spread in either side's runs)
    df: float | None
    low: float | None             # the gain's 95% confidence interval (Welch)
    high: float | None
    reproduces: bool

    def words(self) -> str:
        test = (f"Welch's t-test, one-sided: p {self.p:.3g} on {self.df:.1f} df, gain 95% CI [{self.low:+.6f}, "
                f"{self.high:+.6f}]" if self.p is not None else "no spread between seeds on either side: the "
                "difference is exact")
        verdict = ("does not reproduce" if not self.reproduces else "reproduces" if not self.baseline_changed
                   else "reproduces against the bundle's own baseline only")
        against = ("the track's own baseline" if not self.baseline_changed else
                   f"the bundle's own baseline, which differs from this track's train.py in {self.baseline_changed} "
                   "line(s): read baseline_train.py before trusting the gain")
        return (f"the gain {verdict}: {self.gain:+.6f} here ({len(self.baseline)} runs a side) against "
                f"{self.claimed_gain:+.6f} claimed; {test}; measured against {against}")


def reproduce(bundle: Bundle, baseline_source: str, best_source: str, prepared: PreparedTrack, runs: int,
              runner: Runner, say: Callable[[str], None] = print) -> Reproduction:
    """Trains both sides here; raises BundleRefused where the bundle cannot be checked or its best cannot stand."""
    track = prepared.track
    if bundle.track != track.track or bundle.data != track.fingerprint:
        raise BundleRefused(f"the bundle was made on track {bundle.track} with data {bundle.data[:12]}; this "
                            f"machine's {track.track} track has data {track.fingerprint[:12]}: "
                            f"verify it where `autoresearch prepare --track {bundle.track}` made the same data")
    screen(baseline_source, best_source)
    with tempfile.TemporaryDirectory(prefix="autoresearch-verify-") as scratch:
        workspace = Workspace.create("verify", prepared.spec, Path(os.devnull), Path(scratch),
                                     baseline=(baseline_source, f"baseline of bundle {bundle.tag}"))
        if (here := workspace.frozen_hashes()) != bundle.frozen:
            differ = sorted(k for k in set(bundle.frozen) | set(here) if bundle.frozen.get(k) != here.get(k))
            raise BundleRefused(f"the bundle's frozen files differ from this machine's ({', '.join(differ)}): its "
                                "numbers were measured against another metric or track; verify it with the same "
                                "version of autoresearch")
        commits = {"baseline": workspace.head(), "best": workspace.commit_train(best_source, f"best of {bundle.tag}")}
        timeout = hard_timeout(track.constants, LoopSettings())
        measured: dict[str, list[RunEntry]] = {"baseline": [], "best": []}
        for n in range(runs):
            for side in ("baseline", "best"):
                entry = _run(workspace, runner, side, n, commits[side], timeout, measured, best_source)
                measured[side].append(entry)
                say(f"{side} seed {entry.seed}: val_bpb {entry.val_bpb:.6f} (trusted)")
    return _tested(bundle, [e.val_bpb for e in measured["baseline"]], [e.val_bpb for e in measured["best"]],
                   changed_from_stock(baseline_source, track.track))


def changed_from_stock(source: str, track: str) -> int:
    """0 where source is, as Python reads it (comments and layout aside), the track's own train.py with one of its
    hardware profiles' values; else the lines it differs by from the nearest of them (at least 1)."""
    stock = (TRAINER_DIR / "train.py").read_text()
    candidates: list[dict | None] = [None]
    for hardware in [this_machine(), *KNOWN_DEVICES.values()]:
        try:
            candidates.append(profile_for(track, hardware).hyperparameters)
        except ProfileError:
            continue
    own = ast.dump(ast.parse(source))
    stocks = [train_source_for_track(stock, track, values) for values in candidates]
    if any(ast.dump(ast.parse(candidate)) == own for candidate in stocks):
        return 0
    return max(1, min(sum(1 for line in difflib.ndiff(candidate.split("\n"), source.split("\n")) if line[:1] in "+-")
                      for candidate in stocks))


def screen(baseline_source: str, best_source: str) -> None:
    """The bundle's two train.py files through the sandbox policy, as an edit's (BundleRefused where refused)."""
    try:
        check_policy(baseline_source)
        check_policy(best_source, parent=baseline_source)
    except EditRejected as err:
        raise BundleRefused(f"the bundle's train.py is refused as an edit would be: {err}") from None
    except (SyntaxError, ValueError, MemoryError, RecursionError) as err:  # what Python's parser raises
        raise BundleRefused(f"the bundle's train.py files do not parse as Python: {type(err).__name__}") from None


def _run(workspace: Workspace, runner: Runner, side: str, n: int, commit: str, timeout: float,
         measured: dict[str, list[RunEntry]], best_source: str) -> RunEntry:
    seed = secrets.randbelow(2**31 - 1) + 1
    run = RunId.noise(side, n)
    result = dataclasses.replace(runner.run(workspace, Job(run=run, commit=commit, seed=seed, timeout=timeout)),
                                 run=run)
    if result.verdict.triage != Triage.OK:
        raise BundleRefused(f"the {side}'s run with seed {seed} ended {result.verdict.triage.value}: "
                            f"{result.verdict.reason}")
    entry = RunEntry.of(result, seed, workspace.dir)
    if side == "best":
        baseline = ExperimentRecord(id="baseline", status=ExperimentStatus.KEEP, commit=workspace.root_commit(),
                                    runs=measured["baseline"])
        if why := over_compute(result, [baseline], workspace.track.constants, declared_batch_tokens(best_source)):
            raise BundleRefused(f"the best's run with seed {seed} is over the budget's compute here: {why}")
    try:
        score_runs(workspace, runner, commit, [entry], baseline=side == "baseline" and n == 0)
    except Untrusted as err:
        raise BundleRefused(f"the {side}'s run with seed {seed} cannot stand: {err}") from None
    return entry


def _tested(bundle: Bundle, baseline: list[float], best: list[float], baseline_changed: int = 0) -> Reproduction:
    gain = statistics.fmean(baseline) - statistics.fmean(best)
    va, vb = (statistics.variance(x) / len(x) if len(x) > 1 else 0.0 for x in (baseline, best))
    test: dict = dict(p=None, df=None, low=None, high=None, reproduces=gain > 0)
    if va + vb:
        p = float(stats.ttest_ind(baseline, best, equal_var=False, alternative="greater").pvalue)
        df = (va + vb) ** 2 / ((va ** 2 / (len(baseline) - 1) if va else 0) + (vb ** 2 / (len(best) - 1) if vb else 0))
        half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
        test = dict(p=p, df=float(df), low=gain - half, high=gain + half, reproduces=gain > 0 and p < ALPHA)
    return Reproduction(bundle_tag=bundle.tag, baseline_changed=baseline_changed, track=bundle.track,
                        baseline=baseline, best=best, claimed_gain=bundle.gain, gain=gain, **test)
