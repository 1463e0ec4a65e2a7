"""The sigma of val_bpb between seeds each track usually shows, as benchmarks/noise.py measured it.

The measurements live in usual_sigma.json beside this file (value, seeds, date, machine, how it was measured);
`benchmarks/noise.py --track TRACK --write` replaces a track's entry with a new measurement, so the figure the
noise rule compares a floor with is always one somebody measured, and says where it came from.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, TypeAdapter

from trainer.files.atomic import write_text_atomic
from trainer.prepare import TRACKS

TABLE = Path(__file__).with_name("usual_sigma.json")


class UsualSigma(BaseModel):
    model_config = ConfigDict(frozen=True)
    sigma: float
    seeds: list[int]
    date: str | None = None
    machine: str
    source: str

    def describe(self) -> str:
        return f"{self.sigma:g} over {self.seeds_words()}" + (f", {self.date}" if self.date else "") + \
            f" on {self.machine}"

    def seeds_words(self) -> str:
        if not self.seeds:
            return "no seeds of ours"
        if len(self.seeds) > 1 and self.seeds == list(range(self.seeds[0], self.seeds[-1] + 1)):
            return f"seeds {self.seeds[0]}-{self.seeds[-1]}"
        return "seeds " + ", ".join(map(str, self.seeds))


_TABLE_TYPE = TypeAdapter(dict[str, UsualSigma])


def usual_sigmas(table: Path = TABLE) -> dict[str, UsualSigma]:
    return _TABLE_TYPE.validate_json(table.read_text())


def record_measurement(track: str, measured: UsualSigma, table: Path = TABLE) -> None:
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}: choose one of {', '.join(TRACKS)}")
    entries = {**usual_sigmas(table), track: measured}
    write_text_atomic(table, json.dumps({k: v.model_dump() for k, v in sorted(entries.items())}, indent=2,
                                        ensure_ascii=False) + "\n")


