"""Running untrusted code (train.py, and the model server that imports it) as a stranger.

Where bubblewrap can make namespaces here (trainer/sandbox/isolation.py), the process runs in its own user
or a uid of its own, pid, mount, network, IPC, UTS and cgroup namespaces, with no capabilities, seeing
only what trainer/sandbox/view.py allows (its own run directory writable). Its pid namespace dies with it,
so nothing it started outlives it, whatever it did to escape (setsid, execve with an empty environment,
...). Every run is held to its limits (trainer/sandbox/limits.py: tasks, memory, disk), and its caller may
end it early (`Ending`): a training run is stopped shortly after its weights are sealed and its evaluation
handed over (trainer/sandbox/seal.py), since nothing it does after that can matter.

Without bwrap or user namespaces the process runs as the caller, in its own session with an
allowlisted environment and a hard timeout that kills its group and every process carrying its
token; `isolation().note` says so plainly. In both cases its output goes through a pipe into a
log that is capped while written (head and tail kept, the cut said), the caller's memory is
not readable by it through /proc (not dumpable), and it dies if its caller dies (setpriv).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from trainer.sandbox.isolation import isolation, isolation_available, run_uid
from trainer.sandbox.limits import DiskWatch, RunLimits, limit_prefix
from trainer.sandbox.view import View, bwrap_command, default_hidden, isolated_command

__all__ = ["View", "isolated_command", "isolation", "isolation_available", "private_directory", "run_untrusted",
           "runs_root"]

ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "VIRTUAL_ENV",
                 "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "NVIDIA_VISIBLE_DEVICES",
                 "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                 "TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE",
                 "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF", "AUTORESEARCH_CACHE")
ENV_PREFIXES = ("LC_",)
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.IGNORECASE)
RUN_TOKEN_VAR = "AUTORESEARCH_RUN_TOKEN"
LOG_HEAD_BYTES = 4 << 20   # a log keeps its first 4 MiB ...
LOG_TAIL_BYTES = 1 << 20   # ... and its last 1 MiB; what lies between is counted, not kept
CUT_MARK = "[runner] cut "


@dataclass(frozen=True)
class Ending:
    """When the caller ends a run that is still going (time.monotonic()), and why; with `result_kept`, what it
    printed until then is its result (exit 0), else it is a run that did not finish (timed out)."""
    at: float
    why: str
    result_kept: bool


def runs_root() -> Path:
    """Where run directories are made: outside every workspace, one tree per user."""
    import tempfile
    return Path(tempfile.gettempdir()) / f"autoresearch-runs-{os.geteuid()}"


def scrubbed_environment(extra: dict[str, str]) -> dict[str, str]:
    env = {**{k: v for k, v in os.environ.items() if k in ENV_ALLOWLIST or k.startswith(ENV_PREFIXES)}, **extra,
           "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return {k: v for k, v in env.items() if not SECRET_NAME.search(k) or k == RUN_TOKEN_VAR}


def not_dumpable() -> None:
    """This process's memory, and so its /proc/<pid>/environ (API keys), cannot be read by processes of the same
    user without CAP_SYS_PTRACE: the runs it starts. Children get their own flag back at exec."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(4, 0)  # PR_SET_DUMPABLE


def processes_with_token(token: str) -> list[int]:
    needle = f"{RUN_TOKEN_VAR}={token}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def kill_run(process: subprocess.Popen, token: str) -> None:
    for _ in range(50):
        kill_group(process.pid)
        stragglers = [pid for pid in processes_with_token(token) if pid != os.getpid()]
        for pid in stragglers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            try:
                process.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue
        if not stragglers:
            return
        time.sleep(0.05)


def _parent(pid: str) -> str | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return line.split()[1]
    return None


def adopted_strays(before: set[int], token: str) -> list[int]:
    """Children of this process, outside its session, that it did not start as another run: what an unisolated
    run left behind by leaving its session and the run's environment (setsid, execve with an empty environment),
    then orphaned."""
    me, session = str(os.getpid()), os.getsid(0)
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid in before or _parent(entry.name) != me:
            continue
        with contextlib.suppress(OSError):
            other_run = any(v.startswith(RUN_TOKEN_VAR.encode() + b"=") and v != f"{RUN_TOKEN_VAR}={token}".encode()
                            for v in (entry / "environ").read_bytes().split(b"\0"))
            if os.getsid(pid) != session and not other_run:
                found.append(pid)
    return found


def kill_strays(before: set[int], token: str) -> None:
    for pid in adopted_strays(before, token):
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


class CappedLog:
    """Copies a stream into a file, keeping the first LOG_HEAD_BYTES as they come and only the last
    LOG_TAIL_BYTES after that; `close` appends the tail behind a line saying how much was cut.

    mark_seal() notes how much of the stream had arrived when the run asked for its validation seal: everything
    before was printed before any validation text could exist in the run. shown_bytes() says how much of the
    file that is, the part a proposer may read (agent/proposers/logview.py)."""

    def __init__(self, source, path: Path, head: int = LOG_HEAD_BYTES, tail: int = LOG_TAIL_BYTES):
        self.source, self.path, self.head, self.tail_limit = source, path, head, tail
        self.written, self.cut = 0, 0
        self.failed: str | None = None  # writing the log failed (a full disk): the output is drained, not kept
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.received = 0                 # bytes of the stream read so far
        self.sealed_at: int | None = None  # bytes of the stream read when the run asked for its seal
        self._kept: tuple[int, int, int] | None = None  # at close: (received, bytes of the cut line, tail kept)
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._copy, name=f"log-{path.name}", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        try:
            with open(self.path, "ab") as out:
                while chunk := self.source.read1(1 << 16):
                    with self._lock:
                        self._take(out, chunk)
        except OSError as err:  # the run must not block on a full pipe because the log cannot grow
            self.failed = f"writing {self.path} failed: {err}"
            while self.source.read1(1 << 16):
                pass

    def mark_seal(self) -> None:
        with self._lock:
            if self.sealed_at is None:
                self.sealed_at = self.received

    def _take(self, out, chunk: bytes) -> None:
        self.received += len(chunk)
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
        with self._lock:  # a writer that outlived the run may still be read: its later output is not kept
            kept, received = b"".join(self.tail), self.received
        cut = self.cut + max(0, len(kept) - self.tail_limit)
        kept = kept[-self.tail_limit:]
        if self.failed:
            return
        line = (f"\n{CUT_MARK}{cut} bytes of output here (kept the first {self.head} and the last "
                f"{self.tail_limit})\n".encode()) if cut else b""
        self._kept = (received, len(line), len(kept))
        try:
            with open(self.path, "ab") as out:
                out.write(line)
                out.write(kept)
                if self.thread.is_alive():
                    out.write(b"\n[runner] a process of the run still held its output; stopped reading it\n")
        except OSError as err:
            self.failed = f"writing {self.path} failed: {err}"

    def shown_bytes(self) -> int:
        """After close: how many bytes at the start of the file the run printed before it asked for its seal (the
        whole file where it never asked), 0 where the log could not be written."""
        if self.failed or self._kept is None:
            return 0
        if self.sealed_at is None:
            with contextlib.suppress(OSError):
                return self.path.stat().st_size
            return 0
        received, line, kept = self._kept
        if self.sealed_at <= self.written:
            return self.sealed_at
        first_kept = received - kept  # where in the stream the kept tail starts
        return self.written if self.sealed_at < first_kept else self.written + line + self.sealed_at - first_kept


def private_directory(path: Path) -> Path:
    """A fresh, empty directory for one run that a run as a stranger can write in but whose entries made by
    the caller it cannot rename or remove (root-owned, sticky), inside a root only the caller can list."""
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o711)
    path.mkdir()
    if isolation().as_root:
        path.parent.chmod(0o711)
        path.chmod(0o1777)
    return path


@dataclass
class ProcessOutcome:
    returncode: int | None
    timed_out: bool
    seconds: float
    isolated: bool = False
    limits: RunLimits | None = None
    limit_hit: str | None = None   # why the harness stopped it: a limit it went past
    ended: Ending | None = None    # the caller ended it before it exited
    disk_full: str | None = None   # the harness could not write its log: this machine's disk is full
    log_shown_bytes: int = 0       # the start of its log printed before it asked for its seal (CappedLog)


@functools.cache
def dies_with_caller() -> list[str]:
    """The prefix that makes a command die by SIGKILL when the thread that started it dies (Linux setpriv),
    or nothing where setpriv is missing. Set by exec'ing through setpriv rather than by Python code run
    between fork and exec (preexec_fn): with other threads running, such a child can deadlock on a lock
    one of them held at the fork, and Popen then waits for it for ever."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def run_untrusted(command: list[str], cwd: Path, log_path: Path, timeout: float, extra_env: dict[str, str],
                  view: View | None = None, pass_fds: tuple[int, ...] = (), on_start=None,
                  limits: RunLimits | None = None, ending=None, on_log=None) -> ProcessOutcome:
    """Runs command in cwd with its output in log_path (capped), held to limits; nothing it starts outlives it
    (nor its parent). With a view and isolation available, it runs as a stranger seeing what the view says (cwd
    writable). ending() says when the caller ends it early (an Ending, or None while it need not); on_log gets
    the CappedLog its output goes to before it can ask for anything (the seal marks it)."""
    not_dumpable()
    token = secrets.token_hex(8)
    env = scrubbed_environment({**extra_env, RUN_TOKEN_VAR: token})
    limits = (limits or RunLimits.for_machine()).for_directory(cwd)
    isolated = view is not None and isolation().available
    uid = run_uid() if isolated else None
    prefix = limit_prefix(limits, own_uid=uid is not None)
    if isolated:
        env.update(HOME="/tmp", TMPDIR="/tmp")
        view = View([cwd, *view.writable], view.read_only, [*default_hidden(), *view.hidden], limits.tmp_bytes)
        command = bwrap_command(command, view, [*prefix, *isolation().drop_to(uid)])
    else:  # orphans of its descendants become this process's children, where adopted_strays finds them
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
        command = [*prefix, *command]
    command = [*dies_with_caller(), *command]
    children_before = {int(e.name) for e in Path("/proc").glob("[0-9]*") if _parent(e.name) == str(os.getpid())}
    log_path.write_bytes(b"")
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=pass_fds)
    log = CappedLog(process.stdout, log_path)
    if on_log is not None:
        on_log(log)
    watch = DiskWatch(cwd, limits.disk_bytes, lambda: kill_group(process.pid))
    outcome = ProcessOutcome(None, False, 0.0, isolated, limits)
    try:
        if on_start is not None:
            on_start(process)
        _wait(process, time.monotonic() + timeout, ending, outcome)
    finally:  # also on KeyboardInterrupt
        watch.close()
        kill_run(process, token)
        kill_strays(children_before, token)
        log.close()
    outcome.limit_hit, outcome.disk_full, outcome.log_shown_bytes = watch.exceeded, log.failed, log.shown_bytes()
    kept = outcome.ended is not None and outcome.ended.result_kept and not outcome.limit_hit
    outcome.returncode = 0 if kept else process.returncode
    outcome.timed_out = outcome.timed_out or (outcome.ended is not None and not outcome.ended.result_kept)
    outcome.seconds = time.perf_counter() - start
    note = (f"stopped: {outcome.limit_hit}" if outcome.limit_hit else outcome.ended.why if outcome.ended
            else f"killed at the hard timeout of {timeout:.0f} s" if outcome.timed_out else None)
    if note and not log.failed:
        with open(log_path, "a") as out:
            out.write(f"\n[runner] {note}\n")
    return outcome


def _wait(process: subprocess.Popen, deadline: float, ending, outcome: ProcessOutcome) -> None:
    """Until the process exits, the deadline passes (timed_out) or the caller's ending comes."""
    while process.poll() is None:
        now = time.monotonic()
        end = ending() if ending is not None else None
        if end is not None and now > end.at:
            outcome.ended = end
            return
        if now > deadline:
            outcome.timed_out = True
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.2)


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
