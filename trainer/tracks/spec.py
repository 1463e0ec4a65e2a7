"""track.json as a typed record: what a prepared track (and every workspace's frozen copy) says it is.

The builder writes the file from a plain dict and a workspace commits it byte for byte (it is
hash-guarded), so the file's text is never re-rendered from this model: the model is how the
project's code reads it. The frozen prepare.py reads its own copy without it, as old workspaces'
copies do.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainer.prepare import SPLITS, TRACKS, PrepareError

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class TrackConstants(BaseModel):
    """prepare.TRACKS[track] as it was when the track was prepared (further constants are kept as they are)."""
    model_config = ConfigDict(extra="allow", frozen=True)
    max_seq_len: int
    time_budget: int | float  # as prepare.py wrote it: the proposer reads the constants in its words
    eval_tokens: int
    vocab_size: int
    source: str | None = None  # None (and doc_chars): a night imported from a prepare.py that names neither
    doc_chars: int | None = None
    step_budget: int | None = None
    # What time_budget counts: wall-clock seconds, or the run's CPU seconds ("cpu": the cpu track of workspaces made
    # before it counted FLOPs, whose frozen track.json and prepare.py still say so).
    budget_clock: Literal["wall", "cpu"] = "wall"
    flops_budget: float | None = None  # training FLOPs the harness allows (trainer/sandbox/seal.py), instead of seconds
    threads: int | None = Field(None, ge=1)  # torch's threads per run, set by the harness (None: torch's default)

    @classmethod
    def of_track(cls, track: str) -> TrackConstants:
        return cls.model_validate(TRACKS[track])

    @property
    def budget(self) -> Literal["flops", "steps", "cpu", "wall"]:
        """What a run is held to: FLOPs or steps the seal counts, or seconds of a clock the harness reads."""
        return "flops" if self.flops_budget else "steps" if self.step_budget else self.budget_clock

    @property
    def counted(self) -> bool:
        """Whether the budget is counted at the seal (the same training on any machine), not read off a clock."""
        return self.budget in ("flops", "steps")


class ClimbmixSource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["climbmix"]
    dataset: str
    num_shards: int
    val: str
    holdout: str


class StdlibSource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["stdlib"]
    python: str
    signature: Sha256


class FolderSource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["folder"]
    path: str
    signature: Sha256


class ShardEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    bytes: int
    sha256: Sha256
    docs: int


class TokenizerMeta(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    fingerprint: Sha256
    vocab_size: int
    pattern: str
    special_tokens: dict[str, int]
    bos_token_id: int
    sha256: Sha256


class TrackSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    format: int
    track: str
    fingerprint: Sha256
    constants: TrackConstants
    source: Annotated[ClimbmixSource | StdlibSource | FolderSource, Field(discriminator="kind")]
    files: dict[str, list[ShardEntry]]
    eval_rows: int
    tokenizer: TokenizerMeta
    created: str

    @field_validator("track")
    @classmethod
    def _known_track(cls, track: str) -> str:
        if track not in TRACKS:
            raise ValueError(f"unknown track {track!r} (known: {', '.join(TRACKS)})")
        return track

    @field_validator("files")
    @classmethod
    def _every_split(cls, files: dict[str, list[ShardEntry]]) -> dict[str, list[ShardEntry]]:
        if sorted(files) != sorted(SPLITS):
            raise ValueError(f"files must list exactly the splits {', '.join(SPLITS)}, not {', '.join(files)}")
        return files

    @classmethod
    def parse(cls, text: str | bytes, where: str | Path,
              remedy: str = "prepare the track again (`autoresearch prepare --track NAME`)") -> TrackSpec:
        """The track.json text read from where; PrepareError naming what is wrong (and the remedy) if it is not one."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'the file'}: {e['msg']}"
                                 for e in err.errors()[:5])
            raise PrepareError(f"{where} is not a track.json this version reads ({problems}): {remedy}") from None

    @classmethod
    def frozen(cls, text: str | bytes, where: str) -> TrackSpec | UnpreparedTrack:
        """A workspace's frozen track.json: a prepared track's, or an imported night's that was not prepared here."""
        try:
            return cls.parse(text, where, "a workspace's frozen copy never changes: read this tag with the version "
                                          "that made it")
        except PrepareError as refused:
            try:
                return UnpreparedTrack.model_validate_json(text)
            except ValidationError:
                raise refused from None

    @classmethod
    def read(cls, path: Path) -> TrackSpec | None:
        """The track.json at path, or None when there is none (or it cannot be opened: the caller builds one)."""
        with contextlib.suppress(OSError):
            return cls.parse(path.read_bytes(), path)
        return None


class UnpreparedTrack(BaseModel):
    """track.json of a night imported under a track not prepared here: its constants and no data (it cannot run)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    track: str
    constants: TrackConstants
    fingerprint: None
    prepared: Literal[False]


FrozenTrack = TrackSpec | UnpreparedTrack  # what a workspace's frozen track.json can be
