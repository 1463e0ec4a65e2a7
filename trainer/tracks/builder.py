"""Building a prepared track: data splits, manifest and fingerprint, tokenizer, track.json.

    python -m trainer.tracks.builder --track cpu [--source stdlib|climbmix|DIR] [--num-shards N] [--cache DIR]

(the same as `autoresearch prepare`). The frozen trainer/prepare.py reads what is built here and
imports nothing from this module, corpus.py or download.py.

Everything is built in a staging directory beside the track's and swapped in by rename
once complete, with track.json written last, so an interrupted prepare leaves the
previous state (or nothing) and never a half-written track. A track that is already
prepared from the same source is left as it is.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainer.files.atomic import read_json, write_json_atomic
from trainer.files.hashing import file_sha256
from trainer.prepare import (
    SPECIAL_TOKENS,
    SPLIT_PATTERN,
    SPLITS,
    TRACKS,
    BestFitPacker,
    PrepareError,
    Tokenizer,
    cache_root,
    iter_documents,
    track_constants,
)
from trainer.tracks import corpus, download
from trainer.tracks.spec import TrackSpec

FORMAT_VERSION = 1
TOKENIZER_DOC_CHARS = 10_000        # each training document is truncated to this for BPE
TOKENIZER_TOTAL_CHARS = 1_000_000_000
DEFAULT_NUM_SHARDS = 10
MAX_TRAIN_SHARDS = 6541             # shards 06541 and 06542 are holdout and val


@dataclass
class PreparedTrack:
    directory: Path
    spec: dict      # track.json as written: what a workspace commits, byte for byte, as its frozen copy
    reused: bool
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def track(self) -> TrackSpec:
        return TrackSpec.model_validate(self.spec)


def prepare_track(track: str, source: str | None = None, num_shards: int | None = None,
                  cache: Path | None = None, show_progress: bool = True) -> PreparedTrack:
    constants = track_constants(track)
    cache = (cache or cache_root()).expanduser().resolve()
    source_spec = _source_spec(source or constants["source"], num_shards)
    final = cache / track
    existing = _readable_track(final)
    if (existing and existing.source.model_dump() == source_spec
            and existing.constants.model_dump(exclude_unset=True) == constants and _intact(final, existing)):
        return PreparedTrack(final, read_json(final / "track.json"), reused=True)  # also from a read-only cache
    _ensure_writable(cache)

    for stale in [*cache.glob(f".staging-{track}-*"), *cache.glob(f".old-{track}-*")]:
        shutil.rmtree(stale, ignore_errors=True)
    staging = cache / f".staging-{track}-{os.getpid()}"
    seconds: dict[str, float] = {}
    try:
        start = time.perf_counter()
        files = _build_splits(source_spec, staging, cache, constants, show_progress)
        seconds["data"] = time.perf_counter() - start
        manifest = {split: [_file_entry(path) for path in files[split]] for split in SPLITS}
        fingerprint = _fingerprint(track, constants, manifest)

        start = time.perf_counter()
        if existing and existing.fingerprint == fingerprint and _tokenizer_ok(final, fingerprint):
            shutil.copytree(final / "tokenizer", staging / "tokenizer")
        else:
            train_tokenizer(files["train"], constants["vocab_size"], staging / "tokenizer", fingerprint)
        seconds["tokenizer"] = time.perf_counter() - start

        start = time.perf_counter()
        tokenizer = Tokenizer.from_files(staging / "tokenizer")
        for split in ("val", "holdout"):
            _check_enough_for_eval(tokenizer, files[split], constants, split)
        seconds["eval_check"] = time.perf_counter() - start

        spec = {
            "format": FORMAT_VERSION,
            "track": track,
            "fingerprint": fingerprint,
            "constants": constants,
            "source": source_spec,
            "files": manifest,
            "eval_rows": constants["eval_tokens"] // constants["max_seq_len"],
            "tokenizer": json.loads((staging / "tokenizer" / "meta.json").read_text()),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        write_json_atomic(staging / "track.json", spec, indent=2)
        old = final.with_name(f".old-{final.name}-{os.getpid()}")  # swapped in by renames: never half there
        if final.exists():
            os.replace(final, old)
        os.replace(staging, final)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return PreparedTrack(final, spec, reused=False, seconds=seconds)


def describe(prepared: PreparedTrack) -> str:
    spec = prepared.track
    lines = [f"track {spec.track} {'already prepared' if prepared.reused else 'prepared'} "
             f"in {prepared.directory}",
             f"  fingerprint {spec.fingerprint[:16]}  source {spec.source.kind}",
             f"  constants   {', '.join(f'{k}={v}' for k, v in prepared.spec['constants'].items())}"]
    for split in SPLITS:
        entries = spec.files[split]
        lines.append(f"  {split:<8}    {len(entries)} shard(s), {sum(e.docs for e in entries):,} documents, "
                     f"{sum(e.bytes for e in entries) / 1e6:.1f} MB")
    lines.append(f"  tokenizer   {spec.tokenizer.vocab_size} tokens; val scores {spec.eval_rows} rows "
                 f"of {spec.constants.max_seq_len} tokens")
    if prepared.seconds:
        lines.append("  seconds     " + ", ".join(f"{k} {v:.1f}" for k, v in prepared.seconds.items()))
    return "\n".join(lines)


def _source_spec(source: str, num_shards: int | None) -> dict:
    if num_shards is not None and source != "climbmix":
        raise PrepareError("--num-shards only applies to --source climbmix")
    if source == "climbmix":
        n = DEFAULT_NUM_SHARDS if num_shards is None else num_shards
        if not 1 <= n <= MAX_TRAIN_SHARDS:
            raise PrepareError(f"--num-shards must be between 1 and {MAX_TRAIN_SHARDS}, got {n}")
        return {"kind": "climbmix", "dataset": download.DATASET, "num_shards": n,
                "val": download.VAL_SHARD, "holdout": download.HOLDOUT_SHARD}
    if source == "stdlib":
        return {"kind": "stdlib", "python": platform.python_version(),
                "signature": _listing_signature(corpus.stdlib_root(), corpus.stdlib_files())}
    folder = Path(source).expanduser().resolve()
    if not folder.exists():
        raise PrepareError(f"unknown source {source!r}: use climbmix, stdlib, or an existing folder "
                           "of .txt/.jsonl/.parquet files")
    return {"kind": "folder", "path": str(folder),
            "signature": _listing_signature(folder, corpus.folder_files(folder))}


def _listing_signature(root: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _build_splits(source_spec: dict, staging: Path, cache: Path, constants: dict,
                  show_progress: bool) -> dict[str, list[Path]]:
    kind = source_spec["kind"]
    if kind == "stdlib":
        return corpus.write_splits(corpus.stdlib_units(), staging, constants["doc_chars"])
    if kind == "folder":
        return corpus.write_splits(corpus.folder_units(Path(source_spec["path"])), staging,
                                   constants["doc_chars"])
    names = {"train": [download.shard_name(i) for i in range(source_spec["num_shards"])],
             "val": [source_spec["val"]], "holdout": [source_spec["holdout"]]}
    downloads = cache / "downloads" / "climbmix"
    download.download_shards([n for split in SPLITS for n in names[split]], downloads,
                             show_progress=show_progress)
    return {split: [_link_or_copy(downloads / name, staging / split / name) for name in names[split]]
            for split in SPLITS}


def _link_or_copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _tokenizer_training_texts(train_files: list[Path]):
    budget = TOKENIZER_TOTAL_CHARS
    for texts, epoch in iter_documents(train_files):
        if epoch > 1:
            return
        for text in texts:
            text = text[:TOKENIZER_DOC_CHARS]
            budget -= len(text)
            yield text
            if budget <= 0:
                return


def train_tokenizer(train_files: list[Path], vocab_size: int, out_dir: Path, fingerprint: str) -> None:
    import pickle

    import rustbpe
    import tiktoken

    learned = vocab_size - len(SPECIAL_TOKENS)
    bpe = rustbpe.Tokenizer()
    bpe.train_from_iterator(_tokenizer_training_texts(train_files), learned, pattern=SPLIT_PATTERN)
    ranks = {bytes(token): rank for token, rank in bpe.get_mergeable_ranks()}
    if len(ranks) != learned:
        raise PrepareError(f"the training text yields only {len(ranks)} BPE tokens, fewer than the "
                           f"{learned} this track needs: prepare it from a larger source")
    specials = {name: learned + i for i, name in enumerate(SPECIAL_TOKENS)}
    encoding = tiktoken.Encoding(name=f"autoresearch-{fingerprint[:12]}", pat_str=bpe.get_pattern(),
                                 mergeable_ranks=ranks, special_tokens=specials)
    token_bytes = np.array([len(encoding.decode_single_token_bytes(i)) for i in range(learned)]
                           + [0] * len(SPECIAL_TOKENS), dtype=np.int32)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "tokenizer.pkl", "wb") as f:
        pickle.dump(encoding, f)
    np.save(out_dir / "token_bytes.npy", token_bytes)
    write_json_atomic(out_dir / "meta.json", indent=2, data={
        "fingerprint": fingerprint, "vocab_size": vocab_size, "pattern": SPLIT_PATTERN,
        "special_tokens": specials, "bos_token_id": specials[SPECIAL_TOKENS[0]],
        "sha256": file_sha256(out_dir / "tokenizer.pkl"),
    })


def _check_enough_for_eval(tokenizer: Tokenizer, files: list[Path], constants: dict, split: str) -> None:
    row_len = constants["max_seq_len"] + 1
    rows = constants["eval_tokens"] // constants["max_seq_len"]
    packer = BestFitPacker(tokenizer, iter_documents(files), row_len)
    packer.rows(rows)
    if packer.epoch > 1:
        raise PrepareError(f"the {split} split is too small: it runs out of documents before the {rows} rows "
                           f"of {row_len} tokens that evaluation scores (packing also holds "
                           f"{packer.buffer_size} documents in its buffer); prepare from a larger source")


def _ensure_writable(cache: Path) -> None:
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tempfile.NamedTemporaryFile(dir=cache).close()
    except OSError as err:
        raise PrepareError(f"cache dir {cache} is not writable ({err.strerror or err}): choose another "
                           "with --cache or AUTORESEARCH_CACHE") from err


def _readable_track(directory: Path) -> TrackSpec | None:
    """The prepared track's track.json, or None when there is none or it is not one (it is built again)."""
    try:
        return TrackSpec.read(directory / "track.json")
    except PrepareError:
        return None


def prepared_spec(directory: Path) -> TrackSpec | None:
    """The track prepared in directory when it is whole (every split file and the tokenizer there), else None."""
    spec = _readable_track(directory)
    return spec if spec is not None and _intact(directory, spec) else None


def _intact(directory: Path, spec: TrackSpec) -> bool:
    return all((path := directory / split / entry.name).is_file() and path.stat().st_size == entry.bytes
               for split in SPLITS for entry in spec.files[split]) and _tokenizer_ok(directory, spec.fingerprint)


def _tokenizer_ok(directory: Path, fingerprint: str) -> bool:
    meta = read_json(directory / "tokenizer" / "meta.json")
    files_there = all((directory / "tokenizer" / name).is_file() for name in ("tokenizer.pkl", "token_bytes.npy"))
    return bool(meta) and meta.get("fingerprint") == fingerprint and files_there


def _file_entry(path: Path) -> dict:
    import pyarrow.parquet as pq
    return {"name": path.name, "bytes": path.stat().st_size, "sha256": file_sha256(path),
            "docs": pq.read_metadata(path).num_rows}


def _fingerprint(track: str, constants: dict, manifest: dict) -> str:
    files = {split: [(e["name"], e["bytes"], e["sha256"]) for e in entries] for split, entries in manifest.items()}
    payload = json.dumps({"track": track, "constants": constants, "files": files}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Prepare a track: data, splits, tokenizer.")
    parser.add_argument("--track", required=True, help=f"one of {', '.join(TRACKS)}")
    parser.add_argument("--source", default=None,
                        help="climbmix, stdlib, or a folder of .txt/.jsonl/.parquet (default: the track's)")
    parser.add_argument("--num-shards", type=int, default=None, help="climbmix training shards (default 10)")
    parser.add_argument("--cache", type=Path, default=None, help="cache dir (default $AUTORESEARCH_CACHE)")
    args = parser.parse_args(argv)
    try:
        prepared = prepare_track(args.track, source=args.source, num_shards=args.num_shards, cache=args.cache)
    except PrepareError as err:
        print(f"error: {err}")
        return 2
    print(describe(prepared))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
