"""Running untrusted code (train.py, and the model server that imports it) as a stranger.

Where bubblewrap (`bwrap`) can make namespaces here, the process runs as an unprivileged uid
(nobody when started by root) in its own user, pid, mount, network, IPC, UTS and cgroup
namespaces, with no capabilities. It sees the machine read-only, with these differences: the
project's code, the caller's home, the workspaces and every other run directory are covered by
empty mounts; the sealed splits of the cache are hidden; /tmp and /dev/shm are private and empty;
only its own directory (and what the caller names as writable) can be written. Its pid namespace
dies with it, so nothing it started outlives it, whatever it did to escape (setsid, execve with an
empty environment, ...).

Without bwrap or user namespaces the process runs as the caller, in its own session with an
allowlisted environment and a hard timeout that kills its group and every process carrying its
token; `isolation().note` says so plainly. In both cases its output goes through a pipe into a
log that is capped while written (head and tail kept, the cut said), the caller's memory is
not readable by it through /proc (not dumpable), and it dies if its caller dies (setpriv).
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from trainer.prepare import cache_root

ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "VIRTUAL_ENV",
                 "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "NVIDIA_VISIBLE_DEVICES",
                 "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                 "TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE",
                 "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF", "AUTORESEARCH_CACHE")
ENV_PREFIXES = ("LC_",)
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.IGNORECASE)
RUN_TOKEN_VAR = "AUTORESEARCH_RUN_TOKEN"
STRANGER_UID = 65534  # nobody: the uid a root caller's runs get
PROJECT_ROOT = Path(__file__).resolve().parents[1]
LOG_HEAD_BYTES = 4 << 20   # a log keeps its first 4 MiB ...
LOG_TAIL_BYTES = 1 << 20   # ... and its last 1 MiB; what lies between is counted, not kept
CUT_MARK = "[runner] cut "
SERVER_FILE_LIMIT = 64 << 20  # the largest file (its log) a model server may write


@dataclass(frozen=True)
class Isolation:
    """How untrusted processes run on this machine: `prefix` + bwrap, or (available False) as the caller."""
    available: bool
    note: str
    namespaces: tuple[str, ...] = ()  # bwrap's options that make the namespaces
    inner: tuple[str, ...] = ()       # what the command runs under inside them
    uid: int | None = None            # the real uid of the stranger, when it differs from the caller's


@dataclass
class View:
    """What an isolated process sees beyond the read-only machine (all absolute paths)."""
    writable: list[Path] = field(default_factory=list)   # its own directory first: bound read-write
    read_only: list[Path] = field(default_factory=list)  # shown read-only, also inside hidden trees
    hidden: list[Path] = field(default_factory=list)     # covered by an empty mount


def _bwrap_probe(namespaces: list[str], inner: list[str]) -> str | None:
    """None if bwrap runs a process in new namespaces here, else why not."""
    try:
        probe = subprocess.run(["bwrap", *namespaces, "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
                                "--dev", "/dev", "--", *inner, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    return None if probe.returncode == 0 else (probe.stderr.strip() or f"exit {probe.returncode}")


@functools.cache
def isolation() -> Isolation:
    if shutil.which("bwrap") is None:
        return Isolation(False, "runs are NOT isolated: bubblewrap is not installed (`apt-get install bubblewrap`); "
                                "train.py runs as this user with the network open and can read and write what "
                                "this user can")
    if os.geteuid() == 0:  # root makes the mounts, then the command drops to the stranger for good
        namespaces = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                      "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        inner = ["setpriv", f"--reuid={STRANGER_UID}", f"--regid={STRANGER_UID}", "--clear-groups",
                 "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"]
    else:  # a user namespace does it without privileges
        namespaces, inner = ["--unshare-all"], []
    why = _bwrap_probe(namespaces, inner)
    if why is None:
        who = f"uid {STRANGER_UID}" if inner else "this user, without privileges"
        return Isolation(True, f"runs are isolated (bubblewrap): {who} in their own pid, mount, network and IPC "
                               "namespaces, seeing only their own run directory writable",
                         tuple(namespaces), tuple(inner), STRANGER_UID if inner else None)
    return Isolation(False, f"runs are NOT isolated: bubblewrap cannot create namespaces here ({why[:200]}); "
                            "train.py runs as this user with the network open and can read and write what this "
                            "user can")


def isolation_available() -> bool:
    return isolation().available


def runs_root() -> Path:
    """Where run directories are made: outside every workspace, one tree per user."""
    import tempfile
    return Path(tempfile.gettempdir()) / f"autoresearch-runs-{os.geteuid()}"


def python_paths() -> list[Path]:
    """The interpreter and its libraries (a virtual environment and the Python it was made from)."""
    return sorted({Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent.parent})


def default_hidden() -> list[Path]:
    """What no untrusted process sees: the project (its code, any .env), the caller's home, the workspaces."""
    found = [PROJECT_ROOT, Path.home(), Path(os.environ.get("AUTORESEARCH_WORKSPACES", "workspace")).resolve()]
    return [p for p in found if p != Path("/")]


def bwrap_command(command: list[str], view: View) -> list[str]:
    """command under bwrap as `isolation()` says, seeing what view says (mounts applied shallowest first,
    so a path shown read-only or writable inside a hidden tree stays shown, and a hidden one inside a
    shown tree stays hidden)."""
    args = ["bwrap", *isolation().namespaces, "--die-with-parent", "--new-session",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/dev/shm"]
    for device in sorted(Path("/dev").glob("nvidia*")):
        args += ["--dev-bind", str(device), str(device)]
    # (mount point, made empty here): the directories on the way to a mount inside an empty one are bwrap's
    # own, made walkable for the stranger; inside a bound tree they are the machine's
    mounted = [(Path("/"), False), (Path("/tmp"), True), (Path("/dev/shm"), True)]
    mounts = [(p, "hidden") for p in view.hidden] + [(p, "ro") for p in view.read_only] \
        + [(p, "rw") for p in view.writable]
    for path, how in sorted(mounts, key=lambda m: len(m[0].parts)):
        if not path.exists():
            continue
        if how == "hidden" and not path.is_dir():
            args += ["--ro-bind", "/dev/null", str(path)]
            continue
        under, empty = max(((m, e) for m, e in mounted if path.is_relative_to(m) and path != m),
                           key=lambda m: len(m[0].parts))
        if how == "ro" and not empty:  # already shown read-only (or writable, as the caller asked)
            continue
        if empty:
            for step in reversed(path.parents[:len(path.parts) - len(under.parts) - 1]):
                args += ["--perms", "0755", "--dir", str(step)]
        if how == "hidden":
            args += ["--perms", "0755", "--tmpfs", str(path)]
        else:
            args += ["--ro-bind" if how == "ro" else "--bind", str(path), str(path)]
        mounted.append((path, how == "hidden"))
    if view.writable:
        args += ["--chdir", str(view.writable[0])]
    return [*args, "--", *isolation().inner, *command]


def isolated_command(command: list[str], read_only: list[Path], hidden: list[Path] | None = None) -> list[str]:
    """A model server's command: the project's trainer package, the working directory and the files the
    command names are shown read-only; nothing is writable but its private /tmp."""
    named = [Path(a) for a in command if a.startswith("/") and Path(a).exists()]
    shown = [*python_paths(), PROJECT_ROOT / "trainer", Path.cwd(), *named, *read_only]
    compile_cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    unseen = [*default_hidden(), runs_root(), cache_root(), *([Path(compile_cache)] if compile_cache else []),
              *(hidden or [])]
    # its log is a file the evaluator opened: a file size limit keeps a flood of output from filling the disk
    limit = ["prlimit", f"--fsize={SERVER_FILE_LIMIT}", "--"] if shutil.which("prlimit") else []
    return bwrap_command([*limit, "env", "HOME=/tmp", "TMPDIR=/tmp", "TORCHINDUCTOR_CACHE_DIR=/tmp/inductor",
                          *command], View(read_only=shown, hidden=unseen))


def scrubbed_environment(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWLIST or k.startswith(ENV_PREFIXES)}
    env.update(extra)
    env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
    return {k: v for k, v in env.items() if not SECRET_NAME.search(k) or k == RUN_TOKEN_VAR}


def not_dumpable() -> None:
    """This process's memory, and so its /proc/<pid>/environ (API keys), cannot be read by processes of the same
    user without CAP_SYS_PTRACE: the runs it starts. Children get their own flag back at exec."""
    import ctypes
    try:
        ctypes.CDLL(None).prctl(4, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


def processes_with_token(token: str) -> list[int]:
    """Pids whose environment carries this run's token (Linux /proc; empty elsewhere)."""
    needle = f"{RUN_TOKEN_VAR}={token}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_run(process: subprocess.Popen, token: str) -> None:
    """SIGKILL the run's process group and every process still carrying its token."""
    for _ in range(50):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stragglers = [pid for pid in processes_with_token(token) if pid != os.getpid()]
        for pid in stragglers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if process.poll() is None:
            try:
                process.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue
        if not stragglers:
            return
        time.sleep(0.05)


def become_subreaper() -> None:
    """Orphans of this process's descendants become its children (not init's), where adopted_strays finds them."""
    import ctypes
    try:
        ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _status_field(pid: str, name: str) -> str | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return line.split()[1]
    except OSError:
        return None
    return None


def adopted_strays(before: set[int], token: str) -> list[int]:
    """Children of this process, outside its session, that it did not start as another run: what an unisolated
    run left behind by leaving its session and the run's environment (setsid, execve with an empty environment),
    then orphaned."""
    me, session = str(os.getpid()), os.getsid(0)
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid in before or _status_field(entry.name, "PPid") != me:
            continue
        try:
            other_run = any(v.startswith(RUN_TOKEN_VAR.encode() + b"=") and v != f"{RUN_TOKEN_VAR}={token}".encode()
                            for v in (entry / "environ").read_bytes().split(b"\0"))
            if os.getsid(pid) != session and not other_run:
                found.append(pid)
        except OSError:
            continue
    return found


def own_children() -> set[int]:
    me = str(os.getpid())
    return {int(e.name) for e in Path("/proc").glob("[0-9]*") if _status_field(e.name, "PPid") == me}


def kill_strays(before: set[int], token: str) -> None:
    for pid in adopted_strays(before, token):
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


class CappedLog:
    """Copies a stream into a file, keeping the first LOG_HEAD_BYTES as they come and only the last
    LOG_TAIL_BYTES after that; `close` appends the tail behind a line saying how much was cut."""

    def __init__(self, source, path: Path, head: int = LOG_HEAD_BYTES, tail: int = LOG_TAIL_BYTES):
        self.source, self.path, self.head, self.tail_limit = source, path, head, tail
        self.written, self.cut = 0, 0
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.thread = threading.Thread(target=self._copy, name=f"log-{path.name}", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        with open(self.path, "ab") as out:
            while chunk := self.source.read1(1 << 16):
                room = self.head - self.written
                if room > 0:
                    out.write(chunk[:room])
                    out.flush()
                    self.written += min(room, len(chunk))
                    chunk = chunk[room:]
                if chunk:
                    self.tail.append(chunk)
                    self.tail_size += len(chunk)
                    while self.tail_size - len(self.tail[0]) >= self.tail_limit:
                        self.cut += len(self.tail[0])
                        self.tail_size -= len(self.tail.popleft())

    def close(self, timeout: float = 10.0) -> None:
        """Waits for the end of the output; a writer that outlived the run and still holds the pipe is given
        timeout seconds, then left to the reader thread (a daemon), and what came so far is written."""
        self.thread.join(timeout)
        try:
            chunks = list(self.tail)
        except RuntimeError:  # changed by the reader while copied: that writer is still going
            chunks = []
        kept = b"".join(chunks)
        cut = self.cut + max(0, len(kept) - self.tail_limit)
        kept = kept[-self.tail_limit:]
        with open(self.path, "ab") as out:
            if cut:
                out.write(f"\n{CUT_MARK}{cut} bytes of output here (kept the first {self.head} and the "
                          f"last {self.tail_limit})\n".encode())
            out.write(kept)
            if self.thread.is_alive():
                out.write(b"\n[runner] a process of the run still held its output; stopped reading it\n")


def private_directory(path: Path) -> Path:
    """A fresh, empty directory for one run that a run as the stranger can write in but whose entries made by
    the caller it cannot rename or remove (root-owned, sticky), inside a root only the caller can list."""
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o711)
    path.mkdir()
    if isolation().uid is not None:
        path.parent.chmod(0o711)
        path.chmod(0o1777)
    return path


def writable_by_stranger(path: Path) -> Path:
    """A directory shared by runs (the compile cache) made writable by the stranger's uid."""
    path.mkdir(parents=True, exist_ok=True)
    uid = isolation().uid
    if uid is not None and path.stat().st_uid != uid:  # once: what earlier runs as the caller left there too
        for entry in [path, *path.rglob("*")]:
            os.lchown(entry, uid, uid)
    return path


@dataclass
class ProcessOutcome:
    returncode: int | None
    timed_out: bool
    seconds: float
    isolated: bool = False


@functools.cache
def dies_with_caller() -> list[str]:
    """The prefix that makes a command die by SIGKILL when the thread that started it dies (Linux setpriv),
    or nothing where setpriv is missing. Set by exec'ing through setpriv rather than by Python code run
    between fork and exec (preexec_fn): with other threads running, such a child can deadlock on a lock
    one of them held at the fork, and Popen then waits for it for ever."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def run_untrusted(command: list[str], cwd: Path, log_path: Path, timeout: float, extra_env: dict[str, str],
                  view: View | None = None, pass_fds: tuple[int, ...] = (), on_start=None) -> ProcessOutcome:
    """Runs command in cwd with its output in log_path (capped); nothing it starts outlives it (nor its parent).
    With a view and isolation available, it runs as a stranger seeing what the view says (cwd writable)."""
    not_dumpable()
    token = secrets.token_hex(8)
    env = scrubbed_environment({**extra_env, RUN_TOKEN_VAR: token})
    isolated = view is not None and isolation().available
    if isolated:
        env.update(HOME="/tmp", TMPDIR="/tmp")
        view = View([cwd, *view.writable], [*python_paths(), *view.read_only], [*default_hidden(), *view.hidden])
        command = bwrap_command(command, view)
    else:
        become_subreaper()
    command = [*dies_with_caller(), *command]
    children_before = own_children()
    log_path.write_bytes(b"")
    start = time.perf_counter()
    timed_out = False
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=pass_fds)
    log = CappedLog(process.stdout, log_path)
    try:
        if on_start is not None:
            on_start(process)
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:  # also on KeyboardInterrupt
        kill_run(process, token)
        kill_strays(children_before, token)
        log.close()
    if timed_out:
        with open(log_path, "a") as out:
            out.write(f"\n[runner] killed at the hard timeout of {timeout:.0f} s\n")
    return ProcessOutcome(process.returncode, timed_out, time.perf_counter() - start, isolated)
