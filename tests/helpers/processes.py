"""Finding processes by their working directory (Linux /proc), to show that none survived."""

import os
from pathlib import Path


def processes_under(directory: Path) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(entry / "cwd")).is_relative_to(directory):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
