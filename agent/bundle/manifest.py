"""A bundle's manifest.json, and reading a bundle someone else made: every file in it is a stranger's, read as a
plain file under a size limit, and the manifest is validated before anything else is looked at."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from agent.recording.confirmation import Confirmation
from agent.untrusted import NotPlainFile, plain_file

FORMAT = 1
MANIFEST = "manifest.json"
BEST_TRAIN, BASELINE_TRAIN, PATCH = "train.py", "baseline_train.py", "best.patch"
MAX_MANIFEST_BYTES = 4 << 20
MAX_TRAIN_BYTES = 1 << 20
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]  # a tag or an experiment id


class BundleRun(BaseModel):
    seed: int | None
    val_bpb: float | None           # the number of record (the trusted evaluator's, where it scored the run)
    trusted: bool | None
    holdout_bpb: float | None = None
    log: str | None = None          # its log up to its seal, in the bundle


class BundleKeep(BaseModel):
    id: Name
    description: str
    gain: float | None              # what its keep rule compared: its runs' mean against the best's mean then
    implausible_fall: str | None = None
    diff: str                       # its diff against its parent, in the bundle
    runs: list[BundleRun]


class Bundle(BaseModel):
    format: int = Field(default=FORMAT, strict=True)
    tag: Name
    track: Name
    data: str                       # the track's data fingerprint
    frozen: dict[str, str]          # FROZEN file -> sha256, as the night's workspace froze them
    baseline_id: Name
    best_id: Name
    baseline_val_bpb: float
    best_val_bpb: float
    gain: float                     # the baseline's val_bpb less the best's, each the mean of its runs
    keeps: list[BundleKeep]
    baseline_runs: list[BundleRun] = Field(default_factory=list)   # the baseline's, its noise floor's included
    confirmation: Confirmation | None = None   # `confirm`'s scores of every keep on val and holdout, and warnings
    models: dict[str, int] = Field(default_factory=dict)  # model id as the service named it -> replies
    llm_usd: float
    device_hours: float
    device: str
    hardware: list[str]
    tolerances: str | None          # the trusted evaluator's tolerances, in words
    keep_rule: str
    exported: str


class BundleRefused(Exception):
    """A bundle that cannot be checked here; the message says why and what to do."""


def read_bundle(directory: Path) -> tuple[Bundle, str, str]:
    """(its manifest, the baseline's train.py, the best's train.py), or BundleRefused."""
    if not directory.is_dir():
        raise BundleRefused(f"{directory} is not a directory: give the folder `autoresearch export` wrote")
    try:
        raw = plain_file(directory / MANIFEST, MAX_MANIFEST_BYTES)
        if raw is None:
            raise BundleRefused(f"{directory} has no {MANIFEST}: it is not a bundle `autoresearch export` wrote")
        bundle = Bundle.model_validate(json.loads(raw))
        sources = [plain_file(directory / name, MAX_TRAIN_BYTES) for name in (BASELINE_TRAIN, BEST_TRAIN)]
    except NotPlainFile as err:
        raise BundleRefused(f"the bundle's {err}") from None
    except (ValueError, RecursionError) as err:  # bad JSON or UTF-8, a number past the digit limit, deep nesting
        first = str(err).splitlines()[0]
        raise BundleRefused(f"{directory / MANIFEST} is not a bundle's manifest ({first})") from None
    if bundle.format != FORMAT:
        raise BundleRefused(f"the bundle is of format {bundle.format}; this version reads format {FORMAT}")
    if any(source is None for source in sources):
        raise BundleRefused(f"the bundle lacks {BASELINE_TRAIN} or {BEST_TRAIN}")
    try:
        baseline, best = (source.decode("utf-8") for source in sources)
    except UnicodeDecodeError:
        raise BundleRefused("the bundle's train.py files are not UTF-8 text") from None
    return bundle, baseline, best
