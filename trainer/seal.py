"""The validation seal: a training process reads validation text only after its weights are out of its reach.

A run is given a data directory with the track's training split and tokenizer only
(``training_view``), and one end of a socket pair whose number is in ``AUTORESEARCH_SEAL_FD``.
prepare.evaluate_bpb saves the weights, then sends ``seal val``; the harness (``Seal``) moves
the weights out of the run directory, hashes them, copies the val files into the run directory
and answers ``open <dir>``. The weights of record are fixed before any validation text exists in
the process, so nothing learnt from it can reach the number the verifier re-computes. A run
seals once; the holdout split never opens. Where runs are isolated (trainer/sandbox.py) the
cache's own val and holdout directories are hidden as well.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from trainer.download import file_sha256
from trainer.prepare import SEAL_FD_VAR

SEALED_SPLITS = ("val", "holdout")
OPENED_DIR = "opened"   # in the run directory: the val files, copied there at the seal
VIEW_DIR = "data"       # in the run directory: what the run sees as its cache


def training_view(track_dir: Path, run_dir: Path) -> Path:
    """A cache root for the run holding <track>/{track.json, tokenizer/, train/} and no other split.

    The tokenizer and track.json are copied; the training shards are hard-linked (symlinked across
    file systems), so the view does not name where the rest of the cache is."""
    view = run_dir / VIEW_DIR / track_dir.name
    (view / "train").mkdir(parents=True)
    if not (track_dir / "track.json").is_file():
        return view.parent  # not prepared: the run says so, as it would on the cache itself
    shutil.copy2(track_dir / "track.json", view / "track.json")
    shutil.copytree(track_dir / "tokenizer", view / "tokenizer")
    for shard in (track_dir / "train").iterdir():
        try:
            os.link(shard, view / "train" / shard.name)
        except OSError:
            (view / "train" / shard.name).symlink_to(shard)
    return view.parent


def data_paths(cache: Path) -> list[Path]:
    """The prepared tracks of a cache: read-only for an isolated run (the compile cache beside them is not)."""
    return sorted(d for d in cache.iterdir() if (d / "track.json").is_file()) if cache.is_dir() else []


def hidden_paths(cache: Path) -> list[Path]:
    """What an isolated run must not see of the real cache: every track's sealed splits, the raw downloads."""
    found = [d for track in cache.iterdir() if track.is_dir() for d in (track / s for s in SEALED_SPLITS)
             if d.is_dir()] if cache.is_dir() else []
    downloads = cache / "downloads"
    return found + ([downloads] if downloads.is_dir() else [])


@dataclass
class Sealed:
    checkpoint: Path | None = None   # where the weights were moved at the seal
    sha256: str | None = None
    problem: str | None = None       # a refused request, for the run's record


class Seal:
    """The harness's side of one run's seal, served from a thread while the run lives."""

    def __init__(self, run_dir: Path, track_dir: Path, checkpoint_name: str, destination: Path):
        self.run_dir, self.track_dir = run_dir, track_dir
        self.checkpoint, self.destination = run_dir / checkpoint_name, destination
        self.result = Sealed()
        self._ours, self._theirs = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name=f"seal-{run_dir.name}", daemon=True)
        self._serving = False

    def env(self) -> dict[str, str]:
        return {SEAL_FD_VAR: str(self._theirs.fileno())}

    @property
    def child_fd(self) -> int:
        return self._theirs.fileno()

    def started(self) -> None:
        """Call once the run's process holds its end: from then on, EOF means the run has exited."""
        self._theirs.close()
        self._thread.start()
        self._serving = True

    def finish(self) -> Sealed:
        self._theirs.close()
        if self._serving:
            self._thread.join(timeout=30)
        self._ours.close()
        return self.result

    def _serve(self) -> None:
        with self._ours.makefile("rw", encoding="utf-8", newline="\n") as channel:
            for line in channel:
                channel.write(self._answer(line.strip()) + "\n")
                channel.flush()

    def _answer(self, request: str) -> str:
        verb, _, split = request.partition(" ")
        if verb != "seal" or split != "val":
            return self._refuse(f"only `seal val` is served, not {request[:60]!r}")
        if self.result.checkpoint is not None:
            return self._refuse("the run already sealed its weights once; evaluate_bpb runs once per run")
        if self.checkpoint.is_symlink() or not self.checkpoint.is_file():
            return self._refuse("no weights were saved before the seal (AUTORESEARCH_CHECKPOINT)")
        self.destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(self.checkpoint, self.destination)
        self.result.checkpoint, self.result.sha256 = self.destination, file_sha256(self.destination)
        opened = self.run_dir / OPENED_DIR / self.track_dir.name
        opened.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.track_dir / "track.json", opened / "track.json")
        shutil.copytree(self.track_dir / "val", opened / "val")
        return f"open {opened}"

    def _refuse(self, why: str) -> str:
        self.result.problem = self.result.problem or why
        return f"refused {why}"

