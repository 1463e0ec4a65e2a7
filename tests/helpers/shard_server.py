"""A loopback stand-in for the Hugging Face hub serving climbmix parquet shards.

``ShardServer`` answers ``/datasets/<DATASET>/resolve/main/<name>`` with HTTP Range
support and can be scripted per file to fail: answer 503 a few times, cut the body
short a few times, fail for good, or publish a (possibly wrong) sha256 ETag. Every
request is logged so that tests can check what the client asked for.
"""

from __future__ import annotations

import hashlib
import io
import random
import re
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from trainer.tracks.download import DATASET

PREFIX = f"/datasets/{DATASET}/resolve/main/"
RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


def parquet_shard(seed: int, docs: int = 300, chars: tuple[int, int] = (300, 700)) -> bytes:
    """A parquet file with a ``text`` column of random words: varied, barely compressible."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choices(letters, k=rng.randint(1, 9))) for _ in range(5000)]
    texts = []
    for _ in range(docs):
        words, size = [], rng.randint(*chars)
        while size > 0:
            words.append(rng.choice(vocab))
            size -= len(words[-1]) + 1
        texts.append(" ".join(words).capitalize() + ".")
    buffer = io.BytesIO()
    pq.write_table(pa.table({"text": texts}), buffer)
    return buffer.getvalue()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Shard:
    """One served file and how it misbehaves: 503s first, then dropped bodies, then ``broken`` or success."""
    data: bytes
    unavailable: int = 0
    drops: int = 0
    broken: bool = False
    etag: str | None = None
    requests: int = 0


@dataclass
class Request:
    """One answered request: ``start`` is the first byte asked for, ``sent`` the body bytes written."""
    name: str
    range: str | None
    start: int
    status: int
    sent: int = 0
    dropped: bool = False


class ShardServer:
    """Context manager running a scriptable shard server on 127.0.0.1 in a background thread."""

    def __init__(self) -> None:
        self.shards: dict[str, Shard] = {}
        self.log: list[Request] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    def add(self, name: str, data: bytes, *, unavailable: int = 0, drops: int = 0, broken: bool = False,
            etag: bool | str = False) -> None:
        """Serve ``data`` as ``name``; ``etag=True`` publishes its sha256, a string publishes that instead."""
        published = sha256_hex(data) if etag is True else etag or None
        self.shards[name] = Shard(data, unavailable, drops, broken, published)

    def requests(self, name: str) -> list[Request]:
        with self._lock:
            return [r for r in self.log if r.name == name]

    @property
    def endpoint(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ShardServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _record(self, request: Request) -> None:
        """Called before the answer is sent, so the log is complete once the client has it."""
        with self._lock:
            self.log.append(request)


def _handler(server: ShardServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args) -> None:
            pass

        def do_GET(self) -> None:
            name = self.path.removeprefix(PREFIX) if self.path.startswith(PREFIX) else self.path
            range_header = self.headers.get("Range")
            shard = server.shards.get(name)
            if shard is None:
                return self._status(name, range_header, 404)
            with server._lock:
                shard.requests += 1
                count = shard.requests
            if count <= shard.unavailable or (shard.broken and count > shard.unavailable + shard.drops):
                return self._status(name, range_header, 503)

            size, start = len(shard.data), 0
            if range_header:
                match = RANGE.match(range_header)
                start = int(match.group(1)) if match else size
                if start >= size:
                    return self._status(name, range_header, 416, {"Content-Range": f"bytes */{size}"}, start)
            body = shard.data[start:]
            self.send_response(206 if range_header else 200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            if range_header:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            if shard.etag:
                self.send_header("ETag", f'"{shard.etag}"')
            self.end_headers()

            dropped = count <= shard.unavailable + shard.drops
            if dropped:
                body = body[:len(body) // 2]
            server._record(Request(name, range_header, start, 206 if range_header else 200, len(body), dropped))
            self.wfile.write(body)
            if dropped:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

        def _status(self, name: str, range_header: str | None, status: int, headers: dict | None = None,
                    start: int = 0) -> None:
            server._record(Request(name, range_header, start, status))
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler
