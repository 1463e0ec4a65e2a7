"""Throughput of track preparation, tokenizer training and the training dataloader on this machine.

Without --cache the track is prepared from scratch into a temporary cache, so nothing is reused.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

GPU_TRACK_TOKENS_PER_S = 1.7e6  # what one H100/H200 trains through on the gpu track
LOADER_SHAPES = {"cpu": (32, 256), "gpu": (128, 2048), "test": (16, 128)}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--track", default="cpu", choices=sorted(LOADER_SHAPES))
    parser.add_argument("--cache", type=Path, default=None, help="cache dir (default: a fresh temporary one)")
    parser.add_argument("--batch-size", type=int, default=None, help="dataloader batch size (default: per track)")
    parser.add_argument("--batches", type=int, default=20, help="minimum timed dataloader batches")
    parser.add_argument("--min-seconds", type=float, default=3.0, help="minimum timed dataloader seconds")
    return parser.parse_args()


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def repeat_timed(step, min_count: int, min_seconds: float) -> tuple[int, float]:
    count, start = 0, time.perf_counter()
    while count < min_count or time.perf_counter() - start < min_seconds:
        step()
        count += 1
    return count, time.perf_counter() - start


def main() -> None:
    args = parse_args()
    os.environ["AUTORESEARCH_TRACK"] = args.track
    import torch
    from rich.console import Console
    from rich.table import Table

    from trainer.prepare import ENCODE_THREADS, BestFitPacker, Tokenizer, iter_documents, make_dataloader, split_files
    from trainer.tracks.builder import _tokenizer_training_texts, prepare_track, train_tokenizer

    console = Console(width=120)
    cores = os.cpu_count() or 1
    console.print(f"machine: {cpu_model()}, {cores} cores; torch {torch.__version__}; "
                  f"python {platform.python_version()}")
    batch, seq_len = args.batch_size or LOADER_SHAPES[args.track][0], LOADER_SHAPES[args.track][1]
    table = Table(title=f"track {args.track}: preparation and dataloader throughput")
    for name, justify in (("measure", "left"), ("value", "right"), ("unit", "left"), ("detail", "left")):
        table.add_column(name, justify=justify)

    with tempfile.TemporaryDirectory(prefix="prepare-bench-") as tmp:
        start = time.perf_counter()
        prepared = prepare_track(args.track, cache=args.cache or Path(tmp) / "cache", show_progress=False)
        total = time.perf_counter() - start
        data_dir, spec = prepared.directory, prepared.spec
        table.add_row("prepare: total", f"{total:.1f}", "s", "reused an existing track (pass a fresh --cache)"
                      if prepared.reused else f"from scratch into {args.cache or 'a temporary cache'}")
        for phase, seconds in prepared.seconds.items():
            table.add_row(f"  {phase}", f"{seconds:.1f}", "s", "")

        train_files = split_files("train", data_dir)
        texts = list(_tokenizer_training_texts(train_files))
        chars, megabytes = sum(map(len, texts)), sum(len(t.encode("utf-8")) for t in texts) / 1e6
        start = time.perf_counter()
        train_tokenizer(train_files, spec["constants"]["vocab_size"], Path(tmp) / "tok", spec["fingerprint"])
        seconds = time.perf_counter() - start
        table.add_row("tokenizer training", f"{megabytes / seconds:.2f}", "MB/s",
                      f"{megabytes:.1f} MB UTF-8 ({chars / 1e6:.1f}M chars) in {seconds:.1f} s, "
                      f"vocab {spec['constants']['vocab_size']}")

        tokenizer = Tokenizer.from_directory(data_dir)
        loader = make_dataloader(tokenizer, batch, seq_len, "train", device="cpu", data_dir=data_dir)
        next(loader)
        batches, seconds = repeat_timed(lambda: next(loader), args.batches, args.min_seconds)
        loader_rate = batches * batch * seq_len / seconds
        table.add_row("dataloader", f"{loader_rate:,.0f}", "tok/s",
                      f"B={batch} T={seq_len}: {batches} batches, {1e3 * seconds / batches:.1f} ms/batch")

        needed_tokens = 2 * (batches + 1) * batch * (seq_len + 1) + 1000 * 2 * seq_len
        chunks, encoded, produced = [], [], 0
        for texts, epoch in iter_documents(train_files):
            if epoch > 1 or produced >= needed_tokens:
                break
            chunks.append(texts)
            encoded.append(tokenizer.encoding.encode_ordinary_batch(texts, num_threads=ENCODE_THREADS))
            produced += sum(len(ids) for ids in encoded[-1])
        docs = sum(len(texts) for texts in chunks)
        encode_rates = {}
        for threads in sorted({1, cores, 8}):
            def encode_all(threads=threads):
                for texts in chunks:
                    tokenizer.encoding.encode_ordinary_batch(texts, num_threads=threads)
            passes, seconds = repeat_timed(encode_all, 1, args.min_seconds)
            rate = encode_rates[threads] = passes * produced / seconds
            table.add_row(f"  tokenization, {threads} thread{'s' * (threads > 1)}", f"{rate:,.0f}", "tok/s",
                          f"encode_ordinary_batch on {docs:,} docs; {1e3 * batch * seq_len / rate:.1f} ms"
                          " per B×T tokens")

        with_bos = [[[tokenizer.bos_token_id, *ids] for ids in chunk] for chunk in encoded]
        fed = [0]

        def documents():
            for chunk in itertools.cycle(with_bos):
                fed[0] += sum(len(ids) for ids in chunk)
                yield chunk, 1

        pretokenized = SimpleNamespace(bos_token_id=tokenizer.bos_token_id, encode=lambda ids, prepend: ids)
        packer = BestFitPacker(pretokenized, documents(), seq_len + 1)
        packer.rows(batch)
        start = time.perf_counter()
        for _ in range(batches):
            packer.rows(batch)
        pack_rate = batches * batch * seq_len / (time.perf_counter() - start)
        consumed = fed[0] - sum(len(doc) for doc in packer.docs.values())
        table.add_row("  BestFitPacker rows only", f"{pack_rate:,.0f}", "tok/s",
                      f"pre-tokenized docs; {1e3 * batch * seq_len / pack_rate:.1f} ms/batch; rows keep "
                      f"{(batches + 1) * batch * (seq_len + 1) / consumed:.0%} of tokens fed")
    console.print(table)

    ratio = loader_rate / GPU_TRACK_TOKENS_PER_S
    verdict = "keeps up with" if ratio >= 1 else "would be a bottleneck for"
    shape = "" if args.track == "gpu" else f" (measured at this track's B={batch}, T={seq_len})"
    console.print(
        f"dataloader {loader_rate / 1e6:.2f}M tok/s vs ~{GPU_TRACK_TOKENS_PER_S / 1e6:.1f}M tok/s the gpu track "
        f"consumes on an H100/H200: ratio {ratio:.2f}, so on {cores} cores it {verdict} the GPU{shape}.")
    console.print(
        f"tokenization: tiktoken with num_threads={ENCODE_THREADS} (Tokenizer.encode here) gave "
        f"{encode_rates[ENCODE_THREADS] / 1e6:.2f}M tok/s vs {encode_rates[1] / 1e6:.2f}M on 1 thread; it uses "
        f"up to 8 threads on a machine with 8 cores or more. Packing is single-threaded Python: "
        f"{pack_rate / 1e6:.2f}M tok/s ({pack_rate / GPU_TRACK_TOKENS_PER_S:.2f}x the GPU) whatever the core "
        "count. make_dataloader runs inline in the training loop, overlapping the GPU's asynchronous work.")


if __name__ == "__main__":
    main()
