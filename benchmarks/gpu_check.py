"""The GPU check: everything about train.py's CUDA path that needs a GPU, measured in one go.

    python benchmarks/gpu_check.py [--budget 45] [--deadline 420]     (scripts/gpu_check.sh runs this)
    python benchmarks/gpu_check.py --smoke                            (CPU, the test track: the same code paths)

1. environment: GPU, driver, torch, CUDA, whether the `kernels` package and the hub are there, and for each
   FlashAttention-3 build: does it load, and its relative error against float32 at the gpu track's windows;
2. data: the gpu track prepared offline from the standard library's sources (copies of each document under
   a numbered header, so that val and holdout hold the track's 20.97M evaluation tokens); val_bpb on it
   is not comparable with climbmix numbers, the timings and the tolerances are;
3. hardware profiles (trainer/tracks/profiles.py), short budget, one compile cache for all (the first compiles cold,
   the rest warm): this GPU held to 24 GB and to 16 GB (torch.cuda.set_per_process_memory_fraction) on the
   profiles chosen for those sizes, and this GPU's profile with SDPA instead of its kernel: does each train
   without OOM, tokens/s, peak memory, compile seconds;
4. a short night through `autoresearch run` (benchmarks/gpu_night.py): the baseline and one experiment, each
   in the sandbox with its own compile cache (cold, as every run of a night compiles), the trusted evaluator on
   a slot of its own measuring the night's tolerances from the baseline, the landing and the closing holdout
   confirmation; each run's phases (start-up, warm-up = the model's and the optimizer's compile, training,
   eval), its verification's seconds and its attention kernel, read back from the night's records;
5. attention alone, forward and backward, for each backend that loads (if time is left).

Every phase checks the time left before the deadline and says what it skipped. The last line is
``GPU_CHECK {json}``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import itertools
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.gpu_night import Night, night_lines, run_night  # noqa: E402 (the repository's, from its root)

CHARS_PER_TOKEN_BOUND = 6.0  # stdlib Python at an 8k vocabulary is ~3-4 characters a token; val must not run short
RESULT_PREFIX = "GPU_CHECK "


class KernelProbe(BaseModel):
    repo: str
    loaded: bool
    seconds: float
    relative_error: float | None = None
    error: str | None = None


class TrainRun(BaseModel):
    label: str
    returncode: int | None
    wall_seconds: float
    summary: dict[str, str]
    compile_notes: list[str]


class AttentionTiming(BaseModel):
    backend: str
    window: int
    milliseconds: float


class ProfileRun(BaseModel):
    label: str
    memory_cap_gib: float | None
    hyperparameters: dict[str, int | str]
    run: TrainRun


class Report(BaseModel):
    mode: str
    environment: dict[str, str | None]
    kernels: list[KernelProbe] = []
    data_seconds: float | None = None
    night: Night | None = None
    attention: list[AttentionTiming] = []
    profiles: list[ProfileRun] = []
    skipped: list[str] = []


def say(text: str = "") -> None:
    print(text, flush=True)


def quote(text: str, prefix: str = "  | ") -> None:
    for line in text.splitlines():
        say(prefix + line)


def hub_reachable(timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout):
            return True
    except OSError:
        return False


def nvidia_smi() -> str | None:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def environment(torch) -> dict[str, str | None]:
    def version(package: str) -> str | None:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None
    cuda = torch.cuda.is_available()
    online = hub_reachable()
    if not online and not os.environ.get("HF_HUB_OFFLINE"):
        os.environ["HF_HUB_OFFLINE"] = "1"  # a pre-fetched kernel still loads; an absent one fails at once
    return {
        "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()) if cuda else None,
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "capability": ".".join(map(str, torch.cuda.get_device_capability())) if cuda else None,
        "nvidia_smi": nvidia_smi(), "cpus": str(os.cpu_count()),
        "kernels": version("kernels"), "huggingface_hub": version("huggingface_hub"),
        "hub": "reachable" if online else "unreachable", "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE"),
        "HF_HOME": os.environ.get("HF_HOME"),
    }


def probe_kernels(train, device, windows: list[int]) -> list[KernelProbe]:
    """Each FA3 build train.py knows, loaded and checked the way train.py does it."""
    repos = dict.fromkeys([*itertools.chain(*train.FLASH_ATTENTION_REPOS.values()), "kernels-community/flash-attn3"])
    probes = []
    for repo in repos:
        start = time.perf_counter()
        try:
            attend = train.load_flash_attention_3(repo)
            error = train.attention_error(attend, device, train.MAX_SEQ_LEN, windows)
            probes.append(KernelProbe(repo=repo, loaded=True, seconds=time.perf_counter() - start,
                                      relative_error=error))
        except Exception as err:
            probes.append(KernelProbe(repo=repo, loaded=False, seconds=time.perf_counter() - start,
                                      error=f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"))
    return probes


def write_synthetic_source(folder: Path, constants: dict, margin: float = 1.1, train_copies: int = 1) -> dict[str, int]:
    """A .jsonl source whose val and holdout splits each hold the track's evaluation tokens: the standard
    library's documents under numbered headers (each copy is a new document, split by its own hash);
    train keeps only the first copies, enough for the tokenizer. Returns characters per split."""
    from trainer.tracks import corpus
    documents = [doc for text, _ in corpus.stdlib_units() for doc in corpus.chunk_text(text, constants["doc_chars"])]
    needed = constants["eval_tokens"] * CHARS_PER_TOKEN_BOUND * margin
    chars = dict.fromkeys(("train", "val", "holdout"), 0)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "copies.jsonl", "w", encoding="utf-8") as out:
        for copy in itertools.count():
            for doc in documents:
                row = f"# copy {copy}\n{doc}"
                split = corpus.split_of(row)
                if split == "train" and copy >= train_copies:
                    continue
                out.write(json.dumps({"text": row}) + "\n")
                chars[split] += len(row)
            if min(chars["val"], chars["holdout"]) >= needed:
                return chars


def workspace_for(track: str, prepared_dir: Path, workspace: Path, budget: int, source: str | None = None) -> Path:
    """train.py with the track's block and a shortened budget, beside the frozen prepare.py and track.json;
    on the test track compiled on CPU too, so that the compile cache and counters are exercised there."""
    from trainer.tracks.hyperparameters import set_hyperparameters, train_source_for_track
    source = train_source_for_track(source or (REPO / "trainer" / "train.py").read_text(), track)
    if track == "test":
        source = set_hyperparameters(source, {"COMPILE_ON_CPU": True})
    anchor = "from prepare import MAX_SEQ_LEN, TIME_BUDGET, Tokenizer, budget_steps, evaluate_bpb, make_dataloader\n"
    if source.count(anchor) != 1:
        raise SystemExit(f"train.py no longer imports the budget as `{anchor.strip()}`: update {__file__}")
    source = source.replace(anchor, anchor + f"TIME_BUDGET = {budget}  # the GPU check's shortened budget\n")
    workspace.mkdir(parents=True)
    (workspace / "train.py").write_text(source)
    shutil.copy2(REPO / "trainer" / "prepare.py", workspace / "prepare.py")
    shutil.copy2(prepared_dir / "track.json", workspace / "track.json")
    return workspace


def parse_summary(log: str) -> dict[str, str]:
    lines = log.splitlines()
    if "---" not in lines:
        return {}
    after = lines[len(lines) - lines[::-1].index("---"):]
    return {key.strip(): value.strip() for key, sep, value in (line.partition(":") for line in after) if sep}


def run_train(label: str, workspace: Path, env: dict[str, str], timeout: float, script: str = "train.py") -> TrainRun:
    say(f"== train.py, {label}")
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, script], cwd=workspace, env=env, capture_output=True, text=True,
                              timeout=timeout)
        log, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as err:
        out = err.stdout or ""
        log = (out.decode(errors="replace") if isinstance(out, bytes) else out) + f"\n(killed after {timeout:.0f} s)"
        code = None
    quote(log)
    notes = [line for line in log.splitlines() if line.startswith(("compile: ", "attention: "))]
    return TrainRun(label=label, returncode=code, wall_seconds=time.perf_counter() - start,
                    summary=parse_summary(log), compile_notes=notes)


def time_attention(train, torch, device, windows: list[int], probes: list[KernelProbe], seconds_left,
                   rows: int = 8, repeats: int = 20) -> list[AttentionTiming]:
    """Forward + backward of attention alone at the track's sequence length and head size (FlexAttention
    has no backward on CPU, so there only SDPA is timed)."""
    T, dtype = train.MAX_SEQ_LEN, torch.bfloat16 if device.type == "cuda" else torch.float32
    backends = {f"fa3 {p.repo}": train.load_flash_attention_3(p.repo) for p in probes if p.loaded}
    if device.type == "cuda":
        backends["flex (compiled)"] = torch.compile(train.make_flex_attention(T, windows, device))
    backends["sdpa-banded"] = train.sdpa_attention
    timings = []
    for name, attend in backends.items():
        for window in sorted(set(windows)):
            if seconds_left() < 30:
                return timings
            q, k, v = (torch.randn(rows, T, 4, train.HEAD_DIM, device=device, dtype=dtype, requires_grad=True)
                       for _ in range(3))
            for _ in range(3):
                attend(q, k, v, window).sum().backward()
            train.synchronize(device)
            start = time.perf_counter()
            for _ in range(repeats):
                attend(q, k, v, window).sum().backward()
            train.synchronize(device)
            milliseconds = 1000 * (time.perf_counter() - start) / repeats
            timings.append(AttentionTiming(backend=name, window=window, milliseconds=milliseconds))
            say(f"  {name:<40} window {window:>5}: {milliseconds:.3f} ms")
    return timings


def profile_variants(torch, device, track: str) -> list[tuple[str, float | None, dict[str, int | str]]]:
    """(label, memory cap in GiB, block values): this device's profile at 24 and 16 GB, and with SDPA."""
    from trainer.tracks.hardware import GIB, Hardware
    from trainer.tracks.profiles import choose_profile
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        here = Hardware(backend="cuda", name=props.name, memory_bytes=props.total_memory,
                        capability=f"{props.major}.{props.minor}")
    else:
        here = Hardware(backend="cpu", name="CPU", memory_bytes=32 * GIB)
    variants = []
    for cap in (24, 16):
        held = here.model_copy(update={"memory_bytes": cap * GIB})
        capped = float(cap) if device.type == "cuda" else None  # off CUDA only the profile's values are walked
        variants.append((f"{cap} GB profile", capped, choose_profile(held, track).hyperparameters))
    own = choose_profile(here, track).hyperparameters
    variants.append((f"own profile, ATTENTION sdpa (its own: {own['ATTENTION']})", None, {**own, "ATTENTION": "sdpa"}))
    return variants


def run_profile(label: str, cap_gib: float | None, values: dict, workspace: Path, env: dict[str, str],
                timeout: float, budget: int) -> ProfileRun:
    """train.py with the profile's values and a budget of its own, under a memory cap of cap_gib (CUDA) set
    before train.py starts."""
    import re

    from trainer.tracks.hyperparameters import set_hyperparameters
    variant = workspace.with_name(f"{workspace.name}-{label.split()[0]}")
    shutil.copytree(workspace, variant, dirs_exist_ok=True)
    source = set_hyperparameters((workspace / "train.py").read_text(), values)
    (variant / "train.py").write_text(re.sub(r"^TIME_BUDGET = \d+", f"TIME_BUDGET = {budget}", source, count=1,
                                             flags=re.MULTILINE))
    cap = "" if cap_gib is None else (
        "import torch; total = torch.cuda.get_device_properties(0).total_memory; "
        f"torch.cuda.set_per_process_memory_fraction(min(1.0, {cap_gib} * 2**30 / total)); ")
    launcher = variant / "capped.py"
    launcher.write_text(f"import runpy, sys\n{cap}\nsys.argv = ['train.py']\nrunpy.run_path('train.py', "
                        "run_name='__main__')\n")
    run = run_train(f"{label}: {values}", variant, env, timeout, script="capped.py")
    return ProfileRun(label=label, memory_cap_gib=cap_gib, hyperparameters=values, run=run)


def print_report(report: Report) -> None:
    say("== results")
    for key, value in report.environment.items():
        say(f"  {key}: {value}")
    for probe in report.kernels:
        say(f"  FA3 {probe.repo}: " + (f"loaded in {probe.seconds:.1f} s, relative error {probe.relative_error:.3g}"
                                      if probe.loaded else f"not loaded ({probe.error})"))
    if report.data_seconds is not None:
        say(f"  data: prepared in {report.data_seconds:.1f} s")
    for profile in report.profiles:
        summary = profile.run.summary
        say(f"  profile {profile.label}, cap {profile.memory_cap_gib or 'none'} GiB, {profile.hyperparameters}: exit "
            f"{profile.run.returncode}, {profile.run.wall_seconds:.0f} s wall; tokens/s "
            f"{summary.get('tokens_per_second', '-')}, mfu {summary.get('mfu_percent', '-')}%, peak_vram_mb "
            f"{summary.get('peak_vram_mb', '-')}, attention {summary.get('attention', '-')}, start-up "
            f"{summary.get('startup_seconds', '-')} s, warm-up (compile) {summary.get('warmup_seconds', '-')} s, "
            f"graph breaks {summary.get('graph_breaks', '-')}, recompiles {summary.get('recompiles', '-')}")
    if report.night:
        say("  night:")
        for line in night_lines(report.night):
            say(f"    {line}")
    for skipped in report.skipped:
        say(f"  skipped: {skipped}")
    say(RESULT_PREFIX + report.model_dump_json())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=45, help="training seconds per run (the track's is 300)")
    parser.add_argument("--deadline", type=float, default=540, help="seconds for the whole check")
    parser.add_argument("--night", type=float, default=330, help="seconds kept for the night (phase 4)")
    parser.add_argument("--smoke", action="store_true", help="CPU, the test track: exercises every phase quickly")
    parser.add_argument("--keep", type=Path, default=None, help="keep the data, workspace and caches here")
    args = parser.parse_args()
    started = time.monotonic()
    seconds_left = lambda: args.deadline - (time.monotonic() - started)  # noqa: E731
    track = "test" if args.smoke else "gpu"
    root = args.keep or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    cache = root / "cache"
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)  # cold means cold: this check's own compile cache
    os.environ |= {"AUTORESEARCH_TRACK": track, "AUTORESEARCH_CACHE": str(cache)}
    import torch
    if not args.smoke and not torch.cuda.is_available():
        say(f"no CUDA device is visible to torch {torch.__version__} (built for CUDA {torch.version.cuda}): run "
            "this on the GPU machine with a CUDA build of torch, or pass --smoke for the CPU walk-through")
        return 2
    report = Report(mode="smoke (CPU, test track)" if args.smoke else "gpu", environment=environment(torch))
    say("== environment")
    for key, value in report.environment.items():
        say(f"  {key}: {value}")

    from trainer.prepare import PrepareError, track_constants
    from trainer.tracks.builder import describe, prepare_track
    say(f"== data: track {track} from copies of the standard library's sources")
    start = time.perf_counter()
    for margin in (1.1, 2.5):  # the second time with more copies, should the text tokenize coarser than assumed
        chars = write_synthetic_source(root / "source", track_constants(track), margin)
        try:
            prepared = prepare_track(track, source=str(root / "source"), cache=cache, show_progress=False)
            break
        except PrepareError as err:
            if margin > 2 or "too small" not in str(err):
                raise
            say(f"  {err}: writing more copies")
    report.data_seconds = time.perf_counter() - start
    say(f"  characters written per split: {chars}")
    quote(describe(prepared))

    workspace = workspace_for(track, prepared.directory, root / "workspace", args.budget)
    sys.path.insert(0, str(workspace))
    import train  # the workspace's: its prepare is the prepared track's
    windows = train.layer_windows(train.config_from_hyperparameters(prepared.spec["tokenizer"]["vocab_size"]))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    say("== FlashAttention-3 builds" + " (no CUDA: only whether they load)" * (device.type != "cuda"))
    report.kernels = probe_kernels(train, device, windows)
    for probe in report.kernels:
        say(f"  {probe.model_dump_json()}")

    from trainer.runs.training_run import compile_cache_env
    env = {**os.environ, "AUTORESEARCH_SEED": "42", **compile_cache_env(root)}
    profile_budget = 20 if not args.smoke else 0
    for label, cap, values in profile_variants(torch, device, track):
        if seconds_left() - args.night < profile_budget + 90:
            report.skipped.append(f"profile {label}: {seconds_left():.0f} s left, {args.night:.0f} s kept for the "
                                  "night")
            continue
        short = {**env, "AUTORESEARCH_CHECKPOINT": str(root / "profile-weights.pt")}
        report.profiles.append(run_profile(label, cap, values, workspace, short,
                                           min(profile_budget + 150, seconds_left() - args.night), profile_budget))

    say("== a short night: autoresearch run, the baseline and one experiment")
    report.night = run_night(root, prepared.spec, track, args.budget, seconds_left() - (60 if not args.smoke else 10))
    for line in night_lines(report.night):
        say(f"  {line}")

    if seconds_left() > 60:
        say(f"== attention alone, forward + backward, rows x {train.MAX_SEQ_LEN} tokens, 4 heads x {train.HEAD_DIM}")
        try:
            report.attention = time_attention(train, torch, device, windows, report.kernels, seconds_left,
                                              *((2, 2) if args.smoke else ()))
        except Exception as err:
            report.skipped.append(f"attention timings: {type(err).__name__}: {str(err)[:300]}")
    else:
        report.skipped.append(f"attention timings: {seconds_left():.0f} s left")
    print_report(report)
    night = report.night
    experiments = {run.experiment for run in night.runs} if night else set()
    verified = bool(night and night.runs and night.runs[0].check and night.tolerances and len(experiments) > 1)
    return 0 if verified and all(p.run.returncode == 0 for p in report.profiles) else 1


if __name__ == "__main__":
    sys.exit(main())
