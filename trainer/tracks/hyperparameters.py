"""The per-track values of train.py's hyperparameter block, and the edit that writes them.

train.py is written with the gpu track's reference values. A workspace on another track
gets the same file with the assignments below replaced inside the delimited block:
only the value of each named top-level assignment changes, and the result must parse.
"""

from __future__ import annotations

import ast
import json
import math
import re

from trainer.files import parsing

BLOCK_START = re.compile(r"^# === HYPERPARAMETERS \(track: ([\w-]+)\) =*$", re.MULTILINE)
BLOCK_END = "# === END HYPERPARAMETERS"

TRACK_HYPERPARAMETERS: dict[str, dict[str, object]] = {
    "gpu": {},  # the reference model, as written in train.py
    # ~2.9M parameters (0.8M in the blocks), 4k tokens a step: ~100 steps in 60 s on 2 cores.
    "cpu": {"DEPTH": 4, "ASPECT_RATIO": 32, "HEAD_DIM": 64,
            "TOTAL_BATCH_SIZE": 2**12, "DEVICE_BATCH_SIZE": 16},
    # ~0.3M parameters, 2k tokens a step: a few seconds of training shows a clear drop in loss.
    "test": {"DEPTH": 2, "ASPECT_RATIO": 32, "HEAD_DIM": 32,
             "TOTAL_BATCH_SIZE": 2**11, "DEVICE_BATCH_SIZE": 16},
}
TRACK_HYPERPARAMETERS["gpu-flops"] = TRACK_HYPERPARAMETERS["gpu"]  # the same models, held to FLOPs not seconds
TRACK_HYPERPARAMETERS["test-flops"] = TRACK_HYPERPARAMETERS["test-clock"] = TRACK_HYPERPARAMETERS["test"]


class BlockError(ValueError):
    """train.py's hyperparameter block is missing, malformed, or lacks a name to set."""


def literal(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def set_hyperparameters(source: str, values: dict[str, object], track: str | None = None) -> str:
    """source with each NAME = value replaced inside the block (and the block's track label)."""
    start = BLOCK_START.search(source)
    end = source.find(BLOCK_END)
    if not start or end < start.end():
        raise BlockError("train.py has no '# === HYPERPARAMETERS (track: ...) ===' ... "
                         "'# === END HYPERPARAMETERS' block")
    first_line = source.count("\n", 0, start.start()) + 1
    last_line = source.count("\n", 0, end) + 1
    lines = source.splitlines(keepends=True)
    spans: dict[str, list[ast.expr]] = {}
    for node in parsing.parse(source).body:
        if isinstance(node, ast.Assign) and first_line < node.lineno < last_line:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    spans.setdefault(target.id, []).append(node.value)
    for name, value in values.items():
        found = spans.get(name, [])
        if len(found) != 1:
            raise BlockError(f"{name} is assigned {len(found)} times in the hyperparameter block, expected once")
        node = found[0]
        if node.lineno != node.end_lineno:
            raise BlockError(f"{name}'s value spans several lines; write it on one line")
        line = lines[node.lineno - 1]
        head, rest = line[:node.col_offset] + literal(value), line[node.end_col_offset:]
        if comment := re.match(r"[ \t]+(#.*)", rest, re.DOTALL):  # keep the comment column where there is room
            column = node.end_col_offset + comment.start(1)
            rest = " " * max(2, column - len(head)) + comment.group(1)
        lines[node.lineno - 1] = head + rest
    result = "".join(lines)
    if track is not None:
        result = BLOCK_START.sub(lambda m: m.group(0).replace(f"(track: {m.group(1)})", f"(track: {track})"),
                                 result, count=1)
    parsing.parse(result)
    return result


def train_source_for_track(source: str, track: str, profile: dict[str, object] | None = None) -> str:
    """train.py for a track, with a hardware profile's values (trainer/tracks/profiles.py) over the track's."""
    if track not in TRACK_HYPERPARAMETERS:
        raise BlockError(f"no hyperparameters for track {track!r}: choose one of {', '.join(TRACK_HYPERPARAMETERS)}")
    return set_hyperparameters(source, {**TRACK_HYPERPARAMETERS[track], **(profile or {})}, track)
