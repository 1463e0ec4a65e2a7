"""Finding processes by their working directory (Linux /proc), to show that none survived; children that a test
stops with SIGINT."""

import os
import signal
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


def sigint_interrupts() -> None:
    """preexec_fn for a child the test stops with SIGINT: a test run started as a background job inherits SIGINT
    ignored, and a Python started that way never turns SIGINT into KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
