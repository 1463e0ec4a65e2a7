"""The prepared test track for a benchmark, in --cache or AUTORESEARCH_CACHE (default ~/.cache/autoresearch)."""

from __future__ import annotations

import os
from pathlib import Path


def prepared_test_track(cache: Path | None) -> dict:
    """The test track's spec, prepared once in the cache, which the runs then read (AUTORESEARCH_CACHE)."""
    from trainer.tracks.builder import prepare_track

    cache = (cache or Path(os.environ.get("AUTORESEARCH_CACHE", "~/.cache/autoresearch"))).expanduser()
    os.environ["AUTORESEARCH_CACHE"] = str(cache)
    return prepare_track("test", cache=cache, show_progress=False).spec
