"""Downloading the climbmix parquet shards: parallel, resumable, retried, verified.

A shard is fetched into ``<name>.part``; a dropped connection resumes from the bytes
already there (HTTP Range), transient answers (429, 5xx, connection errors) are
retried with capped exponential backoff. Only a file whose length matches the server's,
whose sha256 matches the server's ETag when it publishes one, and whose parquet footer
reads with a ``text`` column is renamed to its final name, so a file under its final
name is complete. A shard that still fails after the last attempt leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from trainer.files.hashing import file_sha256
from trainer.prepare import PrepareError

DATASET = "karpathy/climbmix-400b-shuffle"
VAL_SHARD = "shard_06542.parquet"       # pinned: the last shard of the dataset
HOLDOUT_SHARD = "shard_06541.parquet"   # the one before it, never used for decisions
DEFAULT_ENDPOINT = "https://huggingface.co"
TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}
SHA256_HEX = re.compile(r'^(?:W/)?"?([0-9a-f]{64})"?$')


class TransientDownloadError(Exception):
    """Worth another attempt: the server or the connection failed, not the request."""


def shard_name(index: int) -> str:
    return f"shard_{index:05d}.parquet"


def shard_url(name: str, endpoint: str) -> str:
    return f"{endpoint}/datasets/{DATASET}/resolve/main/{name}"


def is_complete_shard(path: Path) -> bool:
    import pyarrow.parquet as pq
    with contextlib.suppress(Exception):
        return path.is_file() and "text" in pq.read_schema(path).names
    return False


def download_shards(names: list[str], dest: Path, *, endpoint: str | None = None, workers: int = 8,
                    attempts: int = 6, backoff_seconds: float = 1.0, show_progress: bool = True) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    endpoint = endpoint or os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    retrying = dict(stop=stop_after_attempt(attempts), reraise=True,
                    wait=wait_exponential(multiplier=backoff_seconds, max=30 * backoff_seconds),
                    retry=retry_if_exception_type((TransientDownloadError, httpx.TransportError)))
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with httpx.Client(follow_redirects=True, timeout=httpx.Timeout(30.0, read=120.0)) as client, \
            Progress(*columns, disable=not show_progress) as progress:

        def fetch(name: str) -> Path:
            target = dest / name
            if is_complete_shard(target):
                return target
            task = progress.add_task(name, total=None)
            part = target.with_name(name + ".part")
            try:
                for attempt in Retrying(**retrying):
                    with attempt:
                        _fetch_once(client, shard_url(name, endpoint), part,
                                    lambda done, total: progress.update(task, completed=done, total=total))
            except PrepareError:
                part.unlink(missing_ok=True)
                raise
            except Exception as err:
                part.unlink(missing_ok=True)
                raise PrepareError(f"could not download {shard_url(name, endpoint)} after {attempts} attempts "
                                   f"({type(err).__name__}: {err}); check the network or set HF_ENDPOINT "
                                   "to a reachable mirror, then run prepare again") from err
            os.replace(part, target)
            return target

        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names)))) as pool:
            futures = [pool.submit(fetch, name) for name in names]
            results, errors = [], []
            for future in futures:
                try:
                    results.append(future.result())
                except PrepareError as err:
                    errors.append(str(err))
    if errors:
        raise PrepareError("; ".join(errors))
    return results


def _fetch_once(client: httpx.Client, url: str, part: Path, report) -> None:
    offset = part.stat().st_size if part.exists() else 0
    # Byte offsets and lengths must count the file itself, never a compressed transfer of it.
    headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={offset}-"} if offset else {})}
    with client.stream("GET", url, headers=headers) as response:
        if response.status_code in TRANSIENT_STATUS:
            raise TransientDownloadError(f"HTTP {response.status_code}")
        if response.status_code == 416:   # our partial file is not a prefix of theirs: start over
            part.unlink(missing_ok=True)
            raise TransientDownloadError("HTTP 416 on resume")
        if response.status_code >= 400:
            raise PrepareError(f"{url} answered HTTP {response.status_code}: check the shard name "
                               "and HF_ENDPOINT")
        resumed = response.status_code == 206 and offset > 0
        if resumed and not response.headers.get("content-range", "").startswith(f"bytes {offset}-"):
            part.unlink(missing_ok=True)
            raise TransientDownloadError("the server resumed at another offset")
        length = response.headers.get("content-length")
        total = (offset if resumed else 0) + int(length) if length is not None else None
        done = offset if resumed else 0
        with open(part, "ab" if resumed else "wb") as f:
            for chunk in response.iter_bytes():
                f.write(chunk)
                done += len(chunk)
                report(done, total)
            f.flush()
            os.fsync(f.fileno())
        expected_sha = _published_sha256(response)
    if total is not None and part.stat().st_size != total:
        raise TransientDownloadError(f"got {part.stat().st_size} of {total} bytes")
    if expected_sha and file_sha256(part) != expected_sha:
        part.unlink()
        raise TransientDownloadError("sha256 differs from the server's ETag")
    if not is_complete_shard(part):
        part.unlink()
        raise TransientDownloadError("the file is not a parquet file with a 'text' column")


def _published_sha256(response: httpx.Response) -> str | None:
    """The sha256 the hub publishes for LFS files (X-Linked-Etag on the redirect, or ETag)."""
    for r in (*response.history, response):
        for header in ("x-linked-etag", "etag"):
            if match := SHA256_HEX.match(r.headers.get(header, "")):
                return match.group(1)
    return None
