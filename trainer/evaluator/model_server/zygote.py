"""The trusted zygote of the model server (server.py): a fresh model process per batch, and
nothing of one batch left for the next."""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import resource
import select
import signal
import sys
import time
import traceback

from trainer.evaluator.model_server.batch_leftovers import (
    KEYCTL_JOIN_SESSION_KEYRING,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    Scratch,
    ancestors,
    clear_keyrings,
    keyctl,
    kill_strays,
    prctl,
    process_attributes,
    reachable_ancestors,
    remove_sysv_ipc,
    writable_shared_mappings,
)
from trainer.evaluator.model_server.model_process import become_model_process, serve_batch
from trainer.evaluator.model_server.protocol import (
    CHUNK,
    MAX_VOCAB,
    Refused,
    answer_header,
    parse_request,
    read_line,
    request_header,
    say,
    write_all,
)

OUTPUT_LIMIT = 1 << 20     # bytes of one model process's output that reach the log; the rest is dropped


class Zygote:
    """Holds the checkpoint, forks one model process per batch and clears what it leaves before the next."""

    def __init__(self, state: dict, device: str, sandboxed: bool):
        self.state, self.device, self.sandboxed = state, device, sandboxed
        self.batches = 0
        self.vocab: int | None = None  # of the first answer with logits, which every later one must have
        self.child: Child | None = None
        prctl(PR_SET_DUMPABLE, 0)         # no process of this uid may read or write this one's memory
        prctl(PR_SET_CHILD_SUBREAPER, 1)  # what a model process orphans becomes this one's child
        keyctl(KEYCTL_JOIN_SESSION_KEYRING, 0)  # a session keyring of its own, which no model process holds
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # no POSIX message queue, for it or a fork
        self.ancestors = ancestors()
        if sandboxed and (reachable := reachable_ancestors(self.ancestors)):
            say(f"[model server] WARNING: a model process could write the memory of pid {reachable} (bwrap's own "
                "process, as bwrap runs without root): it could keep something there from one batch for the next")
        self.scratch = Scratch() if sandboxed else None
        self.attributes = process_attributes()
        self.devnull = os.open(os.devnull, os.O_WRONLY)

    def serve(self) -> None:
        while (header := read_line(lambda n: os.read(0, n))) is not None:
            op, rows, cols = parse_request(header)
            if op == "picked":
                if self.child is None:
                    raise Refused("picked, with no batch to pick from")
            else:
                self.end_child()
                self.child = self.fork()
            self.child.forward(request_header(op, rows, cols), 4 * rows * cols)
            self.vocab = self.child.relay(op, rows, cols, self.vocab)
            if op == "picked":
                self.end_child()

    def fork(self) -> Child:
        if (now := process_attributes()) != self.attributes:
            raise Refused("a model process changed the server's "
                          + ", ".join(k for k in now if now[k] != self.attributes.get(k)))
        if shared := writable_shared_mappings():
            raise Refused(f"the server holds writable shared mappings a fork would share: {shared[:3]}")
        (requests_r, requests_w), (answers_r, answers_w), (output_r, output_w) = os.pipe(), os.pipe(), os.pipe()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the model process: it never returns
            status = 1
            try:
                become_model_process(requests_r, answers_w, output_w, self.batches == 0)
                serve_batch(self.state, self.device, requests_r, answers_w)
                status = 0
            except BaseException:
                traceback.print_exc()
            finally:
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(Exception):
                        stream.flush()
                os._exit(status)
        for fd in (requests_r, answers_w, output_w):
            os.close(fd)
        self.batches += 1
        return Child(pid, requests_w, answers_r, output_r, self.devnull)

    def end_child(self) -> None:
        if self.child is None:
            return
        child, self.child = self.child, None
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child.pid, 0)
        self.clear()
        child.close()  # after clear: no writer of its output is left, what it printed is all there

    def clear(self) -> None:
        kill_strays(self.ancestors, self.sandboxed)
        if self.sandboxed:  # the keyrings, IPC objects and writable mounts are the server's own
            clear_keyrings()
            remove_sysv_ipc()
            self.scratch.restore()

    def close(self) -> None:
        try:
            self.end_child()
        except Refused as err:
            say(f"model server: {err}")


class Child:
    """The zygote's side of one model process: its request and answer pipes, and its output, copied to the log.
    Bytes move between descriptors by splice, never through this process's memory."""

    def __init__(self, pid: int, requests: int, answers: int, output: int, devnull: int):
        self.pid, self.requests, self.answers, self.output, self.devnull = pid, requests, answers, output, devnull
        self.printed = self.dropped = 0
        for fd in (requests, answers, output):
            os.set_blocking(fd, False)

    def forward(self, header: bytes, size: int) -> None:
        """A request: its header, then its size bytes of values straight from stdin."""
        try:
            data = memoryview(header + b"\n")
            while data:
                try:
                    data = data[os.write(self.requests, data):]
                except BlockingIOError:
                    self._wait(self.requests, select.POLLOUT)
            self._move(0, self.requests, size, "the request")
        except BrokenPipeError as err:
            raise Refused(f"the model process stopped reading its requests{self._status()}") from err

    def relay(self, op: str, rows: int, cols: int, vocab: int | None) -> int | None:
        """Its answer to (op, rows, cols), to stdout once its header is the one expected; returns the vocabulary
        size the answer has (fixed by the first answer that has one)."""
        if (header := read_line(self._read)) is None:
            raise Refused(f"the model process ended before answering {op}{self._status()}")
        shape = [rows, cols - 1] if op == "losses" else [rows, cols]
        if op == "picked":
            if vocab is None:
                found = re.fullmatch(rb'\{"shape": \[\d+, \d+, (\d{1,7})\]\}', header)
                vocab = int(found[1]) if found else None
                if vocab is None or not 1 <= vocab <= MAX_VOCAB:
                    raise Refused(f"answered {op} with {header[:200]!r}, expected {answer_header(shape)!r}"
                                  " with a vocabulary")
            shape.append(vocab)
        if header != answer_header(shape):
            raise Refused(f"answered {op} with {header[:200]!r}, expected {answer_header(shape)!r}")
        write_all(1, header + b"\n")
        self._move(self.answers, 1, 4 * math.prod(shape), f"its answer to {op}")
        return vocab

    def _read(self, size: int) -> bytes:
        while True:
            try:
                return os.read(self.answers, size)
            except BlockingIOError:
                self._wait(self.answers, select.POLLIN)

    def _move(self, source: int, target: int, size: int, what: str) -> None:
        while size:
            try:
                moved = os.splice(source, target, min(size, CHUNK), flags=os.SPLICE_F_NONBLOCK)
            except BlockingIOError:
                poll = select.poll()
                poll.register(source, select.POLLIN)
                blocked = target if poll.poll(0) else source
                self._wait(blocked, select.POLLIN if blocked == source else select.POLLOUT)
                continue
            if not moved:
                raise Refused(f"{what} ended {size} bytes short{self._status() if source == self.answers else ''}")
            size -= moved

    def _wait(self, fd: int, event: int) -> None:
        """Until fd is ready (or closed at the other end), copying what the process prints meanwhile."""
        poll = select.poll()
        poll.register(fd, event)
        if self.output is not None:
            poll.register(self.output, select.POLLIN)
        while True:
            ready_now = dict(poll.poll())
            output = self.output
            if output is not None and output in ready_now:
                self._copy_output()
                if self.output is None:
                    poll.unregister(output)
            if fd in ready_now:
                return

    def _copy_output(self) -> None:
        """What the process printed so far: its first OUTPUT_LIMIT bytes to the log, the rest to /dev/null."""
        while self.output is not None:
            room = OUTPUT_LIMIT - self.printed
            try:
                moved = os.splice(self.output, 2 if room > 0 else self.devnull, room if room > 0 else CHUNK,
                                  flags=os.SPLICE_F_NONBLOCK)
            except BlockingIOError:
                return
            except OSError as err:  # a log splice cannot write (O_APPEND, a terminal), full, or past its size limit
                if room <= 0 or err.errno not in (errno.EINVAL, errno.EFBIG, errno.ENOSPC):
                    raise
                self.printed = OUTPUT_LIMIT
                say("[model server] the rest of the model processes' output is dropped: "
                    f"the log takes no more ({err.strerror})")
                continue
            if not moved:
                os.close(self.output)
                self.output = None
                return
            if room > 0:
                self.printed += moved
            else:
                self.dropped += moved

    def _status(self) -> str:
        """How the process ended, if it has (waited for a moment)."""
        for _ in range(100):
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return ""
            if pid:
                code = os.waitstatus_to_exitcode(status)
                return f" (killed by signal {-code})" if code < 0 else f" (exit status {code})"
            time.sleep(0.01)
        return ""

    def close(self) -> None:
        self._copy_output()
        if self.output is not None:
            os.close(self.output)
        if self.dropped:
            say(f"[model server] dropped {self.dropped} bytes of a model process's output past {OUTPUT_LIMIT}")
        for fd in (self.requests, self.answers):
            os.close(fd)

