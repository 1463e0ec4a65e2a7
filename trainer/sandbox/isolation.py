"""Whether and how this machine can run untrusted code as a stranger (bubblewrap's namespaces).

As root, bwrap makes the mounts and the command then drops for good to a uid of its own, one per
run (``run_uid``), so that no two runs, and no run and model server, share a uid and its process
limit; without root, a user namespace does it without privileges. Where neither works, untrusted
code runs as the caller and ``isolation().note`` says so plainly.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass

STRANGER_UID = 65534            # nobody: what the probe drops to
RUN_UIDS = (1_500_000_000, 500_000_000)  # (first, count): uids no account uses, drawn per run as root
NOT_ISOLATED = "train.py runs as this user with the network open and can read and write what this user can"


@dataclass(frozen=True)
class Isolation:
    """How untrusted processes run here: bwrap with `namespaces`, dropping to a uid of their own when as_root."""
    available: bool
    note: str
    namespaces: tuple[str, ...] = ()
    as_root: bool = False
    sized_tmpfs: bool = False  # bwrap can cap the size of the tmpfs it mounts (--size)

    def drop_to(self, uid: int | None) -> list[str]:
        """What the command runs under inside the namespaces: as root, setpriv to uid with no capabilities."""
        return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--bounding-set=-all",
                "--inh-caps=-all", "--no-new-privs", "--"] if self.as_root and uid is not None else []


def run_uid() -> int | None:
    """A fresh uid for one run (or model server) where runs drop to one; None where they keep the caller's."""
    return RUN_UIDS[0] + secrets.randbelow(RUN_UIDS[1]) if isolation().as_root else None


def _bwrap_probe(namespaces: list[str], inner: list[str]) -> str | None:
    """None if bwrap runs a process in new namespaces here, else why not."""
    try:
        probe = subprocess.run(["bwrap", *namespaces, "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
                                "--dev", "/dev", "--", *inner, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    return None if probe.returncode == 0 else (probe.stderr.strip() or f"exit {probe.returncode}")


def _sizes_tmpfs() -> bool:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        return "--size" in subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=30).stdout
    return False


@functools.cache
def isolation() -> Isolation:
    if sys.platform == "darwin":
        return Isolation(False, "runs are NOT isolated: macOS has no Linux namespaces, so bubblewrap does not "
                                "exist there; " + NOT_ISOLATED)
    if shutil.which("bwrap") is None:
        return Isolation(False, "runs are NOT isolated: bubblewrap is not installed (`apt-get install bubblewrap`); "
                                + NOT_ISOLATED)
    as_root = os.geteuid() == 0
    namespaces = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                  "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"] if as_root else ["--unshare-all"]
    if (why := _bwrap_probe(namespaces, Isolation(True, "", (), as_root).drop_to(STRANGER_UID))) is None:
        who = "a uid of their own" if as_root else "this user, without privileges"
        return Isolation(True, f"runs are isolated (bubblewrap): {who} in their own pid, mount, network and IPC "
                               "namespaces, seeing only the Python installation, their track's training data and "
                               "their own run directory, with limits on processes, memory and disk",
                         tuple(namespaces), as_root, _sizes_tmpfs())
    return Isolation(False, f"runs are NOT isolated: bubblewrap cannot create namespaces here ({why[:200]}); "
                            + NOT_ISOLATED)


def isolation_available() -> bool:
    return isolation().available
