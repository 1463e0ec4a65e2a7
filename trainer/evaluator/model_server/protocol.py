"""The model server's protocol (server.py): JSON header lines read a byte at a time, payloads of
exact sizes, and the one header each answer may have."""

from __future__ import annotations

import contextlib
import json
import os

HEADER_LIMIT = 1000        # bytes of a JSON line, requests and answers alike
MAX_ROWS = 1 << 16
MAX_COLS = 1 << 20
MAX_VOCAB = 1 << 20
CHUNK = 1 << 20            # bytes moved by one splice at most
OPS = ("losses", "picked")


class Refused(Exception):
    """A request or answer outside the protocol, or a model process that left something behind."""


def read_line(read, limit: int = HEADER_LIMIT) -> bytes | None:
    """One line, byte by byte from read(1) (nothing read ahead); None at the end of the stream before any byte."""
    line = bytearray()
    while (byte := read(1)) != b"\n":
        if not byte:
            if line:
                raise Refused(f"the stream ended inside a line: {bytes(line[:80])!r}")
            return None
        line += byte
        if len(line) > limit:
            raise Refused(f"a line longer than {limit} bytes: {bytes(line[:80])!r}")
    return bytes(line)


def read_exact(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left:
        if not (part := os.read(fd, min(left, CHUNK))):
            raise Refused(f"the stream ended {left} bytes short")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def parse_request(header: bytes) -> tuple[str, int, int]:
    try:
        request = json.loads(header)
        op, rows, cols = request["op"], request["rows"], request["cols"]
    except (ValueError, KeyError, TypeError) as err:
        raise Refused(f"not a request: {header[:200]!r}") from err
    if op not in OPS or type(rows) is not int or type(cols) is not int or not (
            1 <= rows <= MAX_ROWS and 1 <= cols <= MAX_COLS) or (op != "picked" and cols < 2):
        raise Refused(f"not a request: {header[:200]!r}")
    return op, rows, cols


def request_header(op: str, rows: int, cols: int) -> bytes:
    return json.dumps(dict(op=op, rows=rows, cols=cols)).encode()


def answer_header(shape: list[int]) -> bytes:
    """The one header an answer of this shape may have (what the model process writes, byte for byte)."""
    return json.dumps({"shape": shape}).encode()


def write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_request(fd: int) -> tuple[str, int, int, bytes] | None:
    if (header := read_line(lambda n: os.read(fd, n))) is None:
        return None
    op, rows, cols = parse_request(header)
    return op, rows, cols, read_exact(fd, 4 * rows * cols)


def say(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"{text}\n".encode(errors="replace"))
