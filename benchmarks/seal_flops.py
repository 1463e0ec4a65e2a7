"""What counting a FLOPs budget adds to the seal: loading the sealed weights lazily and counting their tensors.

    .venv/bin/python benchmarks/seal_flops.py

Saves the untrained test-track model and the gpu track's reference model (50.3M parameters, ~200 MB in fp32)
as prepare.save_checkpoint does, then times trainer.sandbox.seal.sealed_flops_per_token on each (cold: the file just
written, so in the page cache; the seal reads a file the run wrote moments before, too) and prints a table.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "trainer"))


def sealed_model(track: str, vocab: int, directory: Path) -> tuple[Path, int]:
    """The track's baseline model, untrained, saved as a run's checkpoint; (path, its parameters)."""
    import dataclasses

    import torch
    import train

    from trainer.tracks.hyperparameters import TRACK_HYPERPARAMETERS
    saved = {name: getattr(train, name) for name in TRACK_HYPERPARAMETERS[track]}
    for name, value in TRACK_HYPERPARAMETERS[track].items():
        setattr(train, name, value)
    try:
        config = train.config_from_hyperparameters(vocab)
        config.sequence_len = {"gpu": 2048, "test": 128}[track]
        model = train.build_model(config)
    finally:
        for name, value in saved.items():
            setattr(train, name, value)
    path = directory / f"{track}.pt"
    torch.save(dict(state_dict=model.state_dict(), config=dataclasses.asdict(config)), path)
    return path, sum(p.numel() for p in model.parameters())


def main() -> None:
    os.environ.setdefault("AUTORESEARCH_TRACK", "test")
    from rich.console import Console
    from rich.table import Table

    from trainer.sandbox.seal import sealed_flops_per_token
    table = Table(title="FLOPs counted at the seal (trainer.sandbox.seal.sealed_flops_per_token)")
    for column in ("model", "parameters", "file MB", "FLOPs/token", "ms (median of 5)"):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as scratch:
        for track, vocab, seq_len in (("test", 1024, 128), ("gpu", 8192, 2048)):
            path, params = sealed_model(track, vocab, Path(scratch))
            times, counted = [], 0
            for _ in range(5):
                start = time.perf_counter()
                counted = sealed_flops_per_token(path, seq_len)
                times.append(1000 * (time.perf_counter() - start))
            table.add_row(f"{track} baseline", f"{params:,}", f"{path.stat().st_size / 1e6:.1f}", f"{counted:,}",
                          f"{statistics.median(times):.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
