"""Writing a file so that readers see the old content or the new one, never a part of it."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: dict, indent: int | None = None) -> None:
    write_text_atomic(path, json.dumps(data, indent=indent, sort_keys=indent is not None) + "\n")
