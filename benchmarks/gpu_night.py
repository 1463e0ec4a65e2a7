"""The GPU check's night: a short night through `autoresearch run`, the path a user's night takes.

The check makes the tag's workspace first, with the track's train.py under this machine's profile and a frozen
prepare.py whose TIME_BUDGET is shortened (the only difference from a user's night), then runs `autoresearch run`
on it as a user would: every run in the sandbox with a compile cache of its own (so every run compiles cold), the
baseline scored by the trusted evaluator on a slot of its own, which measures the night's tolerances, one
experiment from the offline proposer, its landing, and the closing holdout confirmation. What each phase cost is
read back from the night's own records: the ledger, run.json, the confirmation.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[1]
TAG = "gpu-check"
SUMMARY_PHASES = ("startup_seconds", "warmup_seconds", "training_seconds", "eval_seconds")
STOP_SECONDS = 30  # after SIGTERM, how long the night has to record what is in flight before it is killed


class NightRun(BaseModel):
    """One run of the night, as its record says."""
    experiment: str
    description: str
    status: str
    wall_seconds: float | None
    phases: dict[str, str]          # train.py's own seconds per phase (warm-up: the model's and optimizer's compile)
    attention: str | None
    verify_seconds: float | None    # the trusted evaluator on its sealed weights, where it was scored
    check: dict | None


class Night(BaseModel):
    command: list[str]
    returncode: int | None
    wall_seconds: float
    runs: list[NightRun] = []
    tolerances: dict | None = None
    confirmed: bool = False  # the closing holdout confirmation was written
    log_tail: str = ""


def short_prepare(budget: int) -> str:
    """The project's prepare.py with TIME_BUDGET shortened to budget seconds (train.py may not redefine it)."""
    source = (REPO / "trainer" / "prepare.py").read_text()
    line = re.compile(r'^TIME_BUDGET: int = _constants\["time_budget"\].*$', re.MULTILINE)
    if len(line.findall(source)) != 1:
        raise SystemExit(f"prepare.py no longer sets the budget as `{line.pattern}`: update {__file__}")
    return line.sub(f"TIME_BUDGET: int = {budget}  # the GPU check's shortened budget", source)


def run_night(root: Path, spec: dict, track: str, budget: int, timeout: float, experiments: int = 2) -> Night:
    """`autoresearch run` on a workspace made here, stopped (as Ctrl-C or compose stop would) at timeout."""
    from agent.workspace import Workspace
    from trainer.tracks.profiles import profile_for
    profile = profile_for(track)
    workspaces = root / "workspaces"
    baseline = None
    if track == "test":  # on CPU too every run then compiles, cold, as on a GPU
        from trainer.tracks.hyperparameters import set_hyperparameters, train_source_for_track
        source = train_source_for_track((REPO / "trainer" / "train.py").read_text(), track, profile.hyperparameters)
        baseline = (set_hyperparameters(source, {"COMPILE_ON_CPU": True}),
                    "baseline: train.py for track test, compiled on CPU (the GPU check's walk-through)")
    Workspace.create(TAG, spec, REPO / "prompts" / "program.md", workspaces, profile, baseline=baseline,
                     prepare_source=short_prepare(budget))
    command = [sys.executable, "-m", "agent.cli", "run", "--tag", TAG, "--workspaces",
               str(workspaces), "--max-experiments", str(experiments), "--noise-seeds", "0"]
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}  # the offline proposer
    started = time.monotonic()
    log_path = root / "night.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            returncode = process.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)
            try:
                returncode = process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                returncode = process.wait()
    night = Night(command=command, returncode=returncode, wall_seconds=time.monotonic() - started,
                  log_tail=log_path.read_text(errors="replace")[-3000:])
    read_back(workspaces / TAG, night)
    return night


def read_back(workspace: Path, night: Night) -> None:
    """What each run cost, the tolerances and whether the confirmation was written, from the night's own files."""
    from agent.recording.ledger import read_records
    for record in read_records(workspace):
        for run in record.runs:
            night.runs.append(NightRun(
                experiment=record.id, description=record.description, status=record.status.value,
                wall_seconds=run.seconds, phases={k: str(record.summary.get(k)) for k in SUMMARY_PHASES},
                attention=record.summary.get("attention"),
                verify_seconds=run.check.seconds if run.check else None,
                check=run.check.model_dump(exclude_none=True) if run.check else None))
    settings = json.loads((workspace / "run.json").read_text()) if (workspace / "run.json").exists() else {}
    night.tolerances = settings.get("tolerances")
    night.confirmed = (workspace / "confirmation.json").exists()


def night_lines(night: Night) -> list[str]:
    """The night in lines: each run's phases, its verification, the tolerances measured, the confirmation."""
    lines = [f"`autoresearch {' '.join(night.command[3:])}`: exit {night.returncode} after {night.wall_seconds:.0f} s"]
    for run in night.runs:
        phases = ", ".join(f"{k.removesuffix('_seconds')} {v} s" for k, v in run.phases.items())
        verified = f"; verified in {run.verify_seconds:.1f} s" if run.verify_seconds is not None else ""
        lines.append(f"{run.experiment} {run.status} ({run.description}): wall {run.wall_seconds} s; {phases}; "
                     f"attention {run.attention}{verified}")
        if run.check:
            lines.append(f"  check: {json.dumps(run.check)}")
    if night.tolerances:
        from agent.judging.tolerances import Tolerances
        lines.append(f"tolerances: {Tolerances.model_validate(night.tolerances).words()}")
    else:
        lines.append("tolerances: not measured (the baseline was not scored)")
    lines.append("holdout confirmation: " + ("written" if night.confirmed else "not reached"))
    if not night.runs:
        lines.append("no run was recorded; the night's log ends:\n" + night.log_tail)
    return lines
