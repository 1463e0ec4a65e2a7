"""Calibrating a machine: the track's unmodified train.py (with this machine's profile) trained over several
seeds through the one run path, its val_bpb mean, sigma and tokens/s kept as agent/recording/calibration.py
says. The baseline is the project's own code, so the runs' printed numbers are taken as they are."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from agent.recording.calibration import Calibration
from agent.recording.record import summary_number
from agent.running.runner import Runner
from agent.settings import LoopSettings
from agent.steps.training import hard_timeout
from agent.workspace import Workspace
from trainer.runs.jobs import Job
from trainer.runs.run_id import RunId
from trainer.runs.triage import Triage
from trainer.tracks.profiles import Profile


class CalibrationError(Exception):
    """A calibration run did not finish; the message carries its reason and the end of its log."""


def calibrate(track_spec: dict, profile: Profile, seeds: list[int], runner: Runner,
              say=print) -> Calibration:
    """Trains the baseline once per seed in a scratch workspace, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="autoresearch-calibrate-") as scratch:
        workspace = Workspace.create("calibrate", track_spec, Path(os.devnull), Path(scratch), profile)
        track = workspace.track
        timeout = hard_timeout(track.constants, LoopSettings())
        values, speeds, hardware = [], [], None
        for n, seed in enumerate(seeds):
            result = runner.run(workspace, Job(run=RunId.noise(workspace.head(), n), commit=workspace.head(),
                                               seed=seed, timeout=timeout))
            value = summary_number(result.summary.get("val_bpb"))
            if result.verdict.triage != Triage.OK or value is None:
                raise CalibrationError(f"the baseline's run with seed {seed} ended {result.verdict.triage.value}: "
                                       f"{result.verdict.reason}\n{result.tail[-1500:]}")
            values.append(value)
            if speed := summary_number(result.summary.get("tokens_per_second")):
                speeds.append(speed)
            hardware = hardware or result.hardware
            say(f"seed {seed}: val_bpb {value:.6f}" + (f", {speeds[-1]:,.0f} tokens/s" if speeds else ""))
    if hardware is None:
        raise CalibrationError(f"the runner {runner.name} did not say what machine its runs trained on")
    return Calibration(track=track.track, data=track.fingerprint, hardware=hardware,
                       profile=profile.name, seeds=seeds, val_bpb=values,
                       tokens_per_second=sum(speeds) / len(speeds) if speeds else None,
                       created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
