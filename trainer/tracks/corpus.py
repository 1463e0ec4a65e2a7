"""Local corpora for a track: the standard library's sources, or a user folder.

Each source yields *units* (a whole file, or one row of a .jsonl/.parquet file). A unit
goes to train, val or holdout by the hash of its text, so the split is pinned by the
data alone and a unit never straddles two splits. Whole files are cut into documents of
at most ``doc_chars`` characters at blank lines, so that documents fit the track's rows
instead of being cropped to their first lines. Exact duplicate documents are kept once,
in whichever split meets them first, so no document is shared between splits.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from trainer.prepare import SPLITS, PrepareError

VAL_PER_MILLE = 100       # 10% of units
HOLDOUT_PER_MILLE = 100   # another, disjoint 10%
SHARD_CHARS = 64_000_000  # text per parquet shard
ROW_GROUP_DOCS = 1024
FOLDER_SUFFIXES = (".txt", ".jsonl", ".parquet")


def split_of(text: str) -> str:
    bucket = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") % 1000
    if bucket < VAL_PER_MILLE:
        return "val"
    if bucket < VAL_PER_MILLE + HOLDOUT_PER_MILLE:
        return "holdout"
    return "train"


def chunk_text(text: str, doc_chars: int) -> list[str]:
    """Cut text into pieces of at most doc_chars at blank lines (or line ends if needed)."""
    pieces: list[str] = []
    current = ""
    for paragraph in _paragraphs(text, doc_chars):
        if current and len(current) + len(paragraph) > doc_chars:
            pieces.append(current)
            current = ""
        current += paragraph
    return [p for p in [*pieces, current] if p.strip()]


def _paragraphs(text: str, limit: int) -> Iterator[str]:
    paragraph = ""
    for line in text.splitlines(keepends=True):
        if len(paragraph) + len(line) > limit and paragraph:
            yield paragraph
            paragraph = ""
        paragraph += line
        if not line.strip():
            yield paragraph
            paragraph = ""
    if paragraph:
        yield paragraph


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files() -> list[Path]:
    root = stdlib_root()
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts)


def stdlib_units() -> Iterator[tuple[str, bool]]:
    for path in stdlib_files():
        with contextlib.suppress(UnicodeDecodeError, OSError):  # a handful of test fixtures are deliberately not UTF-8
            yield path.read_bytes().decode("utf-8"), True


def folder_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise PrepareError(f"source folder {folder} does not exist or is not a directory")
    try:
        files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in FOLDER_SUFFIXES)
    except OSError as err:
        raise PrepareError(f"cannot read source folder {folder}: {err}") from err
    if not files:
        raise PrepareError(f"source folder {folder} holds no .txt, .jsonl or .parquet files: "
                           "add some, or choose --source stdlib")
    return files


def folder_units(folder: Path) -> Iterator[tuple[str, bool]]:
    for path in folder_files(folder):
        if path.suffix.lower() == ".txt":
            yield _read_text(path), True
        else:
            texts = _jsonl_texts(path) if path.suffix.lower() == ".jsonl" else parquet_texts(path)
            yield from ((text, False) for text in texts)


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as err:
        raise PrepareError(f"cannot read {path}: {err}") from err
    except UnicodeDecodeError as err:
        raise PrepareError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}): "
                           "convert it to UTF-8 or remove it") from err


def _jsonl_texts(path: Path) -> Iterator[str]:
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise PrepareError(f"{path}:{number} is not valid JSON ({err.msg}): fix or remove that line") from err
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise PrepareError(f"{path}:{number} has no string field \"text\": "
                               "each line must be an object like {\"text\": \"...\"}")
        yield record["text"]


def parquet_texts(path: Path) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise PrepareError(f"{path} is not a readable parquet file ({err}): replace or remove it") from err
    columns = parquet.schema_arrow.names
    if "text" not in columns:
        raise PrepareError(f"{path} has no 'text' column (columns: {', '.join(columns)}): "
                           "rename the column holding the documents to 'text'")
    for group in range(parquet.num_row_groups):
        for text in parquet.read_row_group(group, columns=["text"]).column("text").to_pylist():
            if text:
                yield text


class ShardWriter:
    def __init__(self, directory: Path):
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.docs: list[str] = []
        self.chars = 0
        self.written: list[Path] = []

    def add(self, doc: str) -> None:
        self.docs.append(doc)
        self.chars += len(doc)
        if self.chars >= SHARD_CHARS:
            self.flush()

    def flush(self) -> None:
        if not self.docs:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq
        path = self.directory / f"shard_{len(self.written):05d}.parquet"
        pq.write_table(pa.table({"text": self.docs}), path, row_group_size=ROW_GROUP_DOCS)
        self.written.append(path)
        self.docs, self.chars = [], 0


def write_splits(units: Iterator[tuple[str, bool]], out_dir: Path, doc_chars: int) -> dict[str, list[Path]]:
    writers = {split: ShardWriter(out_dir / split) for split in SPLITS}
    seen: set[bytes] = set()
    for text, whole_file in units:
        writer = writers[split_of(text)]
        for doc in chunk_text(text, doc_chars) if whole_file else [text]:
            digest = hashlib.blake2b(doc.encode("utf-8"), digest_size=16).digest()
            if digest not in seen:
                seen.add(digest)
                writer.add(doc)
    for split, writer in writers.items():
        writer.flush()
        if not writer.written:
            raise PrepareError(f"the source gave no {split} documents: it is too small to split "
                               "into train, val and holdout; add more text")
    return {split: writer.written for split, writer in writers.items()}
