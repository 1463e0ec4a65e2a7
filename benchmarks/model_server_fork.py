"""What a fresh model process per batch costs the trusted evaluator, against the old single-process server.

    python benchmarks/model_server_fork.py [--tracks test,cpu] [--repeats 3] [--cache DIR] [--old-ref REF]

For each track: its data prepared (in --cache, default $AUTORESEARCH_CACHE, else a temporary one), the track's
train.py exported beside the frozen prepare.py and track.json as a commit is, and a checkpoint of its untrained
model (the time of a forward pass does not depend on the weights). Then the evaluator on `CHECKPOINT --splits val`
is timed, wall clock, with this checkout's zygote server and with the last committed single-process server
(--old-ref, by default the newest commit whose trainer/model_server.py, as the file was named before trainer/ had
wings, has no zygote), that commit's trainer package unpacked in a temporary directory: a warm-up round, then
--repeats rounds, the two servers taking turns (the median is shown). The model process's startup (fork, import
train, build, load the weights) is timed on its own, from a process that holds the checkpoint as the zygote
does. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STARTUP = '''
import os, statistics, sys, time
import numpy, torch
from trainer.evaluator.model_server import model_process
from trainer.evaluator.model_server import server as model_server
model_server.warm_torch()
state = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        model_process.build(state, torch.device("cpu"))
        os._exit(0)
    os.waitpid(pid, 0)
    times.append(time.perf_counter() - start)
print(statistics.median(times))
'''


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracks", default="test,cpu", help="comma-separated: test, cpu")
    parser.add_argument("--repeats", type=int, default=3, help="timed evaluations per track and server (after a "
                                                                "warm-up one)")
    parser.add_argument("--cache", type=Path, default=None, help="cache dir (default $AUTORESEARCH_CACHE, else a "
                                                                 "temporary one)")
    parser.add_argument("--old-ref", default=None, help="the commit of the single-process server")
    return parser.parse_args()


OLD_SERVER = "trainer/model_server.py"  # the single-process server lived only at trainer/'s top


def single_process_ref() -> str:
    """The newest commit whose model server imports train.py itself (no zygote)."""
    commits = subprocess.run(["git", "log", "--format=%H", "--", OLD_SERVER], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    for commit in commits:
        shown = subprocess.run(["git", "show", f"{commit}:{OLD_SERVER}"], cwd=REPO, capture_output=True, text=True)
        if shown.returncode == 0 and "zygote" not in shown.stdout.lower():
            return commit
    raise SystemExit(f"no commit has a single-process {OLD_SERVER}")


def old_tree(ref: str, root: Path) -> Path:
    """ref's trainer package, under root."""
    root.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref, "trainer"], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    root.chmod(0o755)
    return root


def commit_for(track: str, prepared, root: Path, env: dict[str, str]) -> tuple[Path, Path]:
    """The exported commit (train.py with the track's block, prepare.py, track.json) and an untrained checkpoint."""
    from trainer.tracks.hyperparameters import train_source_for_track
    commit = root / f"commit-{track}"
    commit.mkdir(parents=True)
    (commit / "train.py").write_text(train_source_for_track((REPO / "trainer" / "train.py").read_text(), track))
    shutil.copy2(REPO / "trainer" / "prepare.py", commit / "prepare.py")
    shutil.copy2(prepared.directory / "track.json", commit / "track.json")
    checkpoint = root / f"checkpoint-{track}.pt"
    code = ("import dataclasses, sys, torch, train\n"
            "config = train.config_from_hyperparameters(train.Tokenizer.from_directory().get_vocab_size())\n"
            "torch.save(dict(state_dict=train.build_model(config).state_dict(), config=dataclasses.asdict(config)),"
            " sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", code, str(checkpoint)], cwd=commit, env=env, check=True)
    return commit, checkpoint


def evaluation_seconds(commit: Path, checkpoint: Path, env: dict[str, str], pythonpath: Path) -> float:
    module = "trainer.evaluator.evaluate" if (pythonpath / "trainer" / "evaluator").is_dir() else "trainer.evaluate"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", module, str(checkpoint), "--splits", "val"], cwd=commit,
                          env={**env, "PYTHONPATH": str(pythonpath)}, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the evaluation failed ({pythonpath}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds


def startup_seconds(commit: Path, checkpoint: Path, env: dict[str, str], count: int = 5) -> float:
    done = subprocess.run([sys.executable, "-c", STARTUP, str(checkpoint), str(count)], cwd=commit,
                          env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def cpu_model() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
        name = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name"))
    except (OSError, StopIteration):
        name = platform.processor() or "unknown CPU"
    return f"{name}, {os.cpu_count()} vCPU"


def main() -> None:
    args = parse_args()
    from trainer.evaluator.evaluate import BATCH_ROWS, PROBES_PER_BATCH
    from trainer.prepare import TRACKS
    from trainer.sandbox.isolation import isolation
    from trainer.tracks.builder import prepare_track

    work = Path(tempfile.mkdtemp(prefix="model-server-fork-"))
    work.chmod(0o755)  # the sandboxed server's uid must reach the commits
    cache = (args.cache or Path(os.environ.get("AUTORESEARCH_CACHE") or work / "cache")).expanduser().resolve()
    ref = args.old_ref or single_process_ref()
    old = old_tree(ref, work / "old")
    rows_out = []
    try:
        for track in args.tracks.split(","):
            env = {**os.environ, "AUTORESEARCH_CACHE": str(cache), "AUTORESEARCH_TRACK": track}
            os.environ.update(AUTORESEARCH_CACHE=str(cache))
            start = time.perf_counter()
            prepared = prepare_track(track, cache=cache, show_progress=False)
            print(f"{track}: data ready in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
            commit, checkpoint = commit_for(track, prepared, work, env)
            val_rows = TRACKS[track]["eval_tokens"] // TRACKS[track]["max_seq_len"]
            batches = math.ceil(val_rows / (BATCH_ROWS - PROBES_PER_BATCH)) + 1  # and the repeat of the first
            startup = startup_seconds(commit, checkpoint, env)
            servers = {"single process (old)": old, "zygote, fresh process per batch": REPO}
            timed: dict[str, list[float]] = {label: [] for label in servers}
            for repeat in range(args.repeats + 1):  # interleaved, the first round a discarded warm-up
                for label, pythonpath in servers.items():
                    seconds = evaluation_seconds(commit, checkpoint, env, pythonpath)
                    print(f"{track} {label}: {seconds:.1f} s{' (warm-up)' * (repeat == 0)}", file=sys.stderr,
                          flush=True)
                    if repeat:
                        timed[label].append(seconds)
            for label, pythonpath in servers.items():
                rows_out.append((track, label, val_rows, batches, statistics.median(timed[label]),
                                 f"{1000 * startup:.0f} ms" if pythonpath == REPO else "once per evaluation"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"Machine: {cpu_model()}; model server {'sandboxed (bwrap)' if isolation().available else 'NOT sandboxed'}"
          f"; old server from {ref[:10]}; median of {args.repeats} evaluations each.\n")
    print("| track | model server | val rows | batches (+ repeat) | `evaluate --splits val` | per batch "
          "| model process startup (fork + import train + build + load) |")
    print("|---|---|---|---|---|---|---|")
    for track, label, val_rows, batches, seconds, startup in rows_out:
        print(f"| {track} | {label} | {val_rows} | {batches} | {seconds:.1f} s | {1000 * seconds / batches:.0f} ms "
              f"| {startup} |")


if __name__ == "__main__":
    main()
