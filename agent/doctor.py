"""`autoresearch doctor`: what a newcomer asks before the first night, each answer with what to do about it.

Nothing here is secret or costly: keys are said to be set or not (never shown), CLIs and Docker are looked up on
PATH, tracks are read from the cache, and nothing is contacted.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from agent.workspace import default_root
from trainer.prepare import TRACKS, cache_root, track_dir
from trainer.tracks.builder import prepared_spec
from trainer.tracks.profiles import default_track

KEYS = {"ANTHROPIC_API_KEY": "anthropic:...", "OPENAI_API_KEY": "openai:..."}
CODING_CLIS = {"claude": "claude-code", "codex": "codex"}
LOW_DISK_GB = 20  # the gpu track's shards, the checkpoints of a night and the compile caches


def answers() -> list[str]:
    return [*keys(), *clis(), *tracks(), *disks(), docker()]


def keys() -> list[str]:
    return [f"{name}: " + (f"set (--model {models})" if os.environ.get(name) else
                           f"not set: export {name}=... (docker/.env for compose) to use --model {models}")
            for name, models in KEYS.items()]


def clis() -> list[str]:
    return [f"{executable}: " + (f"{found} (--model {model})" if (found := shutil.which(executable)) else
                                 f"not on PATH: install it and log in to use --model {model}")
            for executable, model in CODING_CLIS.items()]


def tracks() -> list[str]:
    ready = [track for track in TRACKS if prepared_spec(track_dir(track)) is not None]
    missing = [track for track in TRACKS if track not in ready]
    line = (f"a new tag here takes the {default_track()} track; tracks prepared in {cache_root()}: "
            f"{', '.join(ready) or 'none'}")
    if missing:
        line += f"; the others are built by their first `run` or by `autoresearch prepare --track {missing[0]}`"
    return [line]


def disks() -> list[str]:
    said = []
    for what, path in (("cache", cache_root()), ("workspaces", default_root())):
        existing = next((p for p in [path, *path.parents] if p.exists()), Path("/"))
        free = shutil.disk_usage(existing).free / 1e9
        low = f": below {LOW_DISK_GB} GB, a gpu night may run out" if free < LOW_DISK_GB else ""
        said.append(f"free disk for the {what} ({path}): {free:.0f} GB{low}")
    return said


def docker() -> str:
    found = shutil.which("docker")
    return f"docker: {found} (docker/compose.yaml runs the night in containers)" if found else \
        "docker: not on PATH (only needed for docker/compose.yaml; bare metal needs none)"
