"""Finding processes by their working directory and telling whether one still runs (Linux /proc), to show that
none survived; children that a test stops with SIGINT."""

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


def alive(pid: int) -> bool:
    """Running: not gone, and not a zombie left to a subreaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def interruptible(command: list[str]) -> list[str]:
    """command with SIGINT back at its default (coreutils env): a test run started as a background job inherits
    SIGINT ignored, and a Python started that way never turns SIGINT into KeyboardInterrupt. Not a preexec_fn:
    Python code between fork and exec can deadlock in a process with threads."""
    return ["env", "--default-signal=INT", *command]
