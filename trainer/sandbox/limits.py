"""What one untrusted process may consume: tasks, memory, disk, and how the harness holds it to that.

- tasks (processes and threads): RLIMIT_NPROC, counted for the run's own uid where it has one (as root,
  trainer/sandbox/isolation.py), else on top of what the caller's uid already runs;
- memory: RLIMIT_AS where no GPU is in reach (a CUDA or ROCm process reserves far more address space than
  it uses, so there the limit is left to the device), and the run is the OOM killer's first choice;
- disk: every file at most `disk_bytes` (RLIMIT_FSIZE), its /tmp and /dev/shm tmpfs mounts of a fixed
  size, and its run directory watched (DiskWatch): a run that holds more there is stopped. `disk_bytes`
  is also held below the free space of the run directory's filesystem, less DISK_RESERVE for the agent,
  shared by the runs that train at once (`for_directory`), so that no run can fill the disk.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic.dataclasses import dataclass as typed_dataclass

GIB = 1 << 30
RUN_TASKS = 4096          # a torch run with its compile workers needs a few hundred
RUN_DISK = 32 * GIB       # the run directory: weights, compile cache, whatever it writes
RUN_TMP = 4 * GIB         # its /tmp (and 1/4 of it its /dev/shm), in memory
MEMORY_SHARE = 0.8        # of this machine's memory, split between the runs that train at once
DISK_RESERVE = 512 << 20  # free space no run may take: the agent's ledger, logs, commits and sealed weights
DISK_POLL_SECONDS = 0.01  # how often the free space is read (cheap); the run directory is measured (dear) only
                          # when it could be over: a run writing at 2 GB/s overshoots by ~20 MB


@typed_dataclass(frozen=True)
class RunLimits:
    tasks: int = RUN_TASKS
    memory_bytes: int | None = None   # None: no address-space limit (a GPU is in reach)
    disk_bytes: int = RUN_DISK
    tmp_bytes: int = RUN_TMP
    share: int = 1                    # runs that may train at once here: each gets this share of the free space

    @classmethod
    def for_machine(cls, slots: int = 1) -> RunLimits:
        memory = None if gpu_in_reach() else int(MEMORY_SHARE * physical_memory() / max(1, slots))
        return cls(memory_bytes=memory, share=max(1, slots))

    def for_directory(self, directory: Path) -> RunLimits:
        room = max(0, free_bytes(directory) - DISK_RESERVE) // self.share
        return replace(self, disk_bytes=min(self.disk_bytes, room))

    def describe(self) -> str:
        memory = f"{self.memory_bytes / GIB:.1f} GiB of memory" if self.memory_bytes else "memory: the device's"
        return (f"{self.tasks} tasks, {memory}, {self.disk_bytes / GIB:.2f} GiB of disk, "
                f"{self.tmp_bytes / GIB:.0f} GiB /tmp")


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding path."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def gpu_in_reach() -> bool:
    return any(Path("/dev").glob("nvidia[0-9]*")) or Path("/dev/kfd").exists()


def tasks_of_uid(uid: int) -> int:
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError, KeyError, ValueError):
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
    return count


def limit_prefix(limits: RunLimits, own_uid: bool) -> list[str]:
    """prlimit and choom (util-linux) around the command: nothing where they are missing."""
    import shutil
    prefix = []
    if shutil.which("prlimit"):
        tasks = limits.tasks if own_uid else tasks_of_uid(os.getuid()) + limits.tasks
        prefix += ["prlimit", f"--nproc={_below_hard(resource.RLIMIT_NPROC, tasks)}",
                   f"--fsize={_below_hard(resource.RLIMIT_FSIZE, limits.disk_bytes)}"]
        if limits.memory_bytes:
            prefix.append(f"--as={_below_hard(resource.RLIMIT_AS, limits.memory_bytes)}")
        prefix.append("--")
    if shutil.which("choom"):
        prefix += ["choom", "-n", "1000", "--"]
    return prefix


def _below_hard(which: int, value: int) -> int:
    """value, or the hard limit already in force if that is lower (raising it would need a privilege)."""
    hard = resource.getrlimit(which)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def bytes_written(directory: Path, ignored: frozenset[int] = frozenset()) -> int:
    """What the files under directory take on disk, each inode once, the inodes in ignored (links the harness
    made to files held elsewhere) aside."""
    total, seen = 0, set(ignored)
    for root, _, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                if (info := os.lstat(os.path.join(root, name))).st_ino not in seen:
                    seen.add(info.st_ino)
                    total += info.st_blocks * 512
    return total


def inodes_under(directory: Path) -> frozenset[int]:
    return frozenset(os.lstat(os.path.join(root, name)).st_ino for root, _, files in os.walk(directory)
                     for name in files)


@dataclass
class DiskWatch:
    """Watches a run directory while the run lives; past the limit it calls stop once and says why in `exceeded`.

    Walking the directory costs (a compile cache holds thousands of files), reading the free space does not: the
    directory is walked only once the filesystem lost more since the last walk than the run had left to write."""
    directory: Path
    limit: int
    stop: object  # a callable
    exceeded: str | None = None

    def __post_init__(self):
        self._ignored = inodes_under(self.directory)  # what the harness put there before the run
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"disk-{self.directory.name}", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        held, free_then = 0, free_bytes(self.directory)
        while not self._done.wait(DISK_POLL_SECONDS):
            try:
                free_now = free_bytes(self.directory)
            except OSError:
                return
            if free_then - free_now <= self.limit - held:
                continue
            held, free_then = bytes_written(self.directory, self._ignored), free_now
            if held > self.limit:
                self.exceeded = f"its run directory held {held >> 20} MiB, over its limit of {self.limit >> 20} MiB"
                self.stop()
                return

    def close(self) -> None:
        self._done.set()
        self._thread.join(timeout=5)
