"""A machine's calibrated baseline: the unmodified train.py of a track trained here over several seeds.

`autoresearch calibrate` writes it into the cache, one file per track and machine; a workspace keeps a copy
(calibration.json) of the one its night's runs match, so that its report shows the best as an offset from
its own machine's baseline wherever the report is read, and two machines compare by their offsets.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from trainer.files.atomic import write_text_atomic
from trainer.tracks.hardware import Hardware
from trainer.tracks.spec import FrozenTrack

CALIBRATION_DIR = "calibration"      # under the cache
WORKSPACE_FILE = "calibration.json"  # in a workspace: the calibration its report uses


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    track: str
    data: str                        # the track's fingerprint: another dataset is another baseline
    hardware: Hardware
    profile: str
    seeds: list[int]
    val_bpb: list[float]
    tokens_per_second: float | None
    created: str

    @property
    def mean(self) -> float:
        return statistics.fmean(self.val_bpb)

    @property
    def sigma(self) -> float | None:
        return statistics.stdev(self.val_bpb) if len(self.val_bpb) > 1 else None

    def describe(self) -> str:
        spread = f" ± {self.sigma:.6f}" if self.sigma is not None else ""
        speed = f", {self.tokens_per_second:,.0f} tokens/s" if self.tokens_per_second else ""
        return (f"{self.mean:.6f}{spread} over {len(self.val_bpb)} seed(s){speed} on {self.hardware.describe()} "
                f"(profile {self.profile}, {self.created[:10]})")


def calibration_path(cache: Path, track: str, hardware: Hardware) -> Path:
    return cache / CALIBRATION_DIR / f"{track}-{hardware.key}.json"


def read_calibration(path: Path) -> Calibration | None:
    """The calibration at path; None when there is none or it is not one (a report never fails on it)."""
    try:
        return Calibration.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None


def store_calibration(path: Path, calibration: Calibration) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, calibration.model_dump_json(indent=2) + "\n")


def calibration_for(workspace_dir: Path, cache: Path, track: FrozenTrack,
                    hardware: Hardware | None) -> Calibration | None:
    """The cache's calibration for the workspace's track, data and the machine its runs trained on (which the
    workspace then keeps a copy of), else the copy it kept (its report read on another machine)."""
    own = read_calibration(workspace_dir / WORKSPACE_FILE)
    found = read_calibration(calibration_path(cache, track.track, hardware)) if hardware else None
    if found is None or found.data != track.fingerprint:
        return own
    if found != own:
        store_calibration(workspace_dir / WORKSPACE_FILE, found)
    return found
