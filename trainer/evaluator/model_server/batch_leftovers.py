"""What the zygote (zygote.py) and clears between batches, so that nothing of one model
process reaches the next: processes, SysV IPC objects, keyrings, files in writable mounts, the zygote's own
attributes a same-uid process may change."""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import re
import resource
import shutil
import signal
import stat
import time
from pathlib import Path

from trainer.evaluator.model_server.protocol import Refused

CLEAR_SECONDS = 30.0       # to see every process of a batch gone
PSEUDO_FILESYSTEMS = {"proc", "sysfs", "devpts", "devtmpfs", "mqueue", "cgroup", "cgroup2", "securityfs", "debugfs",
                      "tracefs", "bpf", "configfs", "fusectl", "pstore", "binfmt_misc"}
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_GET_TIMERSLACK, PR_SET_CHILD_SUBREAPER = 1, 4, 30, 36
IPC_RMID = 0
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_CLEAR, KEYCTL_GET_PERSISTENT = 1, 7, 22
KEY_SPEC_PROCESS_KEYRING, KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -2, -4, -5
SYSCALLS = {"x86_64": dict(keyctl=250, ioprio_get=252, sched_getattr=315),
            "aarch64": dict(keyctl=219, ioprio_get=31, sched_getattr=275)}
SCHED_ATTR_SIZE = 56  # struct sched_attr, with the utilization clamps (SCHED_ATTR_SIZE_VER1)
IOPRIO_WHO_PROCESS = 1
libc = ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int) -> None:
    libc.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def syscall_number(name: str) -> int | None:
    return SYSCALLS.get(platform.machine(), {}).get(name)


def keyctl(*args: int) -> int:
    number = syscall_number("keyctl")
    return -1 if number is None else libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in args))


def clear_keyrings() -> None:
    """Empties the keyrings a process of this user can reach beyond its own: the user's, the user session's and
    the user's persistent keyring (a model process's session keyring dies with it)."""
    for ring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING):
        keyctl(KEYCTL_CLEAR, ring)
    persistent = keyctl(KEYCTL_GET_PERSISTENT, -1, KEY_SPEC_PROCESS_KEYRING)
    if persistent >= 0:
        keyctl(KEYCTL_CLEAR, persistent)


def process_attributes() -> dict:
    """What another process of this uid may change in this one (or its session) and a fork inherits."""
    found = dict(limits=[resource.getrlimit(getattr(resource, name)) for name in sorted(dir(resource))
                         if name.startswith("RLIMIT_")],
                 nice=os.getpriority(os.PRIO_PROCESS, 0), affinity=sorted(os.sched_getaffinity(0)),
                 policy=os.sched_getscheduler(0), timerslack=libc.prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0))
    if (number := syscall_number("ioprio_get")) is not None:
        found["ioprio"] = libc.syscall(ctypes.c_long(number), ctypes.c_long(IOPRIO_WHO_PROCESS), ctypes.c_long(0))
    if (number := syscall_number("sched_getattr")) is not None:  # utilization clamps beside policy and nice
        attr = ctypes.create_string_buffer(SCHED_ATTR_SIZE)
        if libc.syscall(ctypes.c_long(number), ctypes.c_long(0), attr, ctypes.c_long(SCHED_ATTR_SIZE),
                        ctypes.c_long(0)) == 0:
            found["sched_attr"] = attr.raw
    for name in ("oom_score_adj", "autogroup"):  # the autogroup's nice is the whole session's
        with contextlib.suppress(OSError):
            found[name] = Path(f"/proc/self/{name}").read_text().strip()
    return found


def reachable_ancestors(ancestors: set[int]) -> list[int]:
    """Ancestors whose memory a process of this uid could write (/proc/<pid>/mem), so a model process too."""
    found = []
    for pid in sorted(ancestors - {os.getpid()}):
        with contextlib.suppress(OSError):
            os.close(os.open(f"/proc/{pid}/mem", os.O_RDWR))
            found.append(pid)
    return found


def writable_shared_mappings() -> list[str]:
    """This process's mappings that are both shared and writable: a fork would share them with the zygote."""
    return [line for line in Path("/proc/self/maps").read_text().splitlines()
            if len(fields := line.split()) >= 2 and fields[1][1] == "w" and fields[1][3] == "s"]


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) of every process in sight."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):  # gone meanwhile
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            found[int(entry)] = (int(fields[1]), fields[0])
    return found


def ancestors() -> set[int]:
    table = processes()
    found, pid = set(), os.getpid()
    while pid in table and pid not in found:
        found.add(pid)
        pid = table[pid][0]
    return found


def strays(keep: set[int], sandboxed: bool) -> list[int]:
    """Live processes to kill: sandboxed, every one in sight but keep (this one and its ancestors); else this
    one's descendants."""
    table = processes()
    if sandboxed:
        return [pid for pid, (_, state) in table.items() if pid not in keep and state not in "ZX"]
    me, found = os.getpid(), set()
    while more := {pid for pid, (parent, _) in table.items() if (parent == me or parent in found) and pid not in found}:
        found |= more
    return [pid for pid in found if table[pid][1] not in "ZX"]


def kill_strays(keep: set[int], sandboxed: bool) -> None:
    deadline = time.monotonic() + CLEAR_SECONDS
    while True:
        reap()
        if not (left := strays(keep, sandboxed)):
            reap()
            return
        if time.monotonic() > deadline:
            raise Refused(f"processes of a model process still alive after {CLEAR_SECONDS:.0f} s: {left[:10]}")
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.001)


def reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def remove_sysv_ipc() -> None:
    for kind, remove in dict(shm=lambda i: libc.shmctl(i, IPC_RMID, None), msg=lambda i: libc.msgctl(i, IPC_RMID, None),
                             sem=lambda i: libc.semctl(i, 0, IPC_RMID, 0)).items():
        for ident in sysv_ids(kind):
            if remove(ident) != 0:
                raise Refused(f"cannot remove the SysV {kind} {ident} a model process left: "
                              f"{os.strerror(ctypes.get_errno())}")
        if left := sysv_ids(kind):
            raise Refused(f"SysV {kind} {left[:10]} still there")


def sysv_ids(kind: str) -> list[int]:
    with contextlib.suppress(OSError):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        return [int(line.split()[1]) for line in lines[1:] if line.strip()]
    return []


def mounts() -> list[tuple[str, str]]:
    """(mount point, filesystem type) of every mount in sight."""
    return [(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]),  # spaces etc. octal-escaped
             fields[fields.index("-") + 1])
            for fields in map(str.split, Path("/proc/self/mountinfo").read_text().splitlines())]


class Scratch:
    """Every place a model process could write in (under bwrap: the tmpfs mounts it makes, such as /tmp and
    /dev/shm on CUDA, or its root and /dev where they belong to the server's own uid), as it was before any
    model process ran: `restore` removes what appeared since and fails if anything that was there changed."""

    def __init__(self):
        table = mounts()
        self.points = {point for point, _ in table}
        self.roots = [point for point, kind in table if kind not in PSEUDO_FILESYSTEMS and os.path.isdir(point)
                      and not os.path.islink(point) and writable_mount(point)]
        self.before = self.listing()

    def listing(self) -> dict[str, tuple]:
        """path -> what it is (mode, inode, owner and, but for directories, size and mtime), not crossing into
        other mounts."""
        found: dict[str, tuple] = {}

        def walk(folder: str) -> None:
            try:
                entries = os.listdir(folder)
            except PermissionError:  # a model process's directory with its permissions taken away
                try:
                    os.chmod(folder, 0o700)
                except PermissionError:  # not this uid's (nor a model process's)
                    return
                entries = os.listdir(folder)
            for name in entries:
                path = os.path.join(folder, name)
                if path in self.points:
                    found[path] = ("mount",)
                    continue
                info = os.lstat(path)
                found[path] = (info.st_mode, info.st_ino, info.st_uid, info.st_gid) + (
                    () if stat.S_ISDIR(info.st_mode) else (info.st_size, info.st_mtime_ns))
                if stat.S_ISDIR(info.st_mode):
                    walk(path)

        for root in self.roots:
            walk(root)
        return found

    def restore(self) -> None:
        try:
            now = self.listing()
            new = sorted(set(now) - set(self.before))
            for path in new:
                if os.path.dirname(path) in now and os.path.dirname(path) not in self.before:
                    continue  # inside a new directory, removed with it
                if stat.S_ISDIR(now[path][0]):
                    shutil.rmtree(path, onerror=_unlock_and_retry)
                else:
                    os.unlink(path)
            now = self.listing()
        except OSError as err:
            raise Refused(f"cannot remove what a model process left: {err}") from err
        if now != self.before:
            changed = sorted(p for p in set(now) | set(self.before) if now.get(p) != self.before.get(p))
            raise Refused(f"a model process changed {changed[:5]}")


def writable_mount(point: str) -> bool:
    with contextlib.suppress(OSError):
        return not os.statvfs(point).f_flag & os.ST_RDONLY
    return False


def _unlock_and_retry(function, path, _):
    """shutil.rmtree's error handler: a directory a model process made unreadable or unwritable is its own."""
    os.chmod(os.path.dirname(path), 0o700)
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, 0o700)
        shutil.rmtree(path, onerror=_unlock_and_retry)
    else:
        function(path)
