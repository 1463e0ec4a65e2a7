"""train.py on CPU: a real test-track run, and the model's and optimizer's properties."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.tracks.hyperparameters import set_hyperparameters, train_source_for_track

TRAINER = Path(__file__).resolve().parents[2] / "trainer"
SUMMARY_KEYS = ["val_bpb", "training_seconds", "total_seconds", "startup_seconds", "eval_seconds",
                "peak_vram_mb", "mfu_percent", "tokens_per_second", "total_tokens_M", "num_steps",
                "num_params_M", "depth", "device", "attention", "attention_skipped", "graph_breaks", "recompiles",
                "device_memory_mb"]


def make_workspace(path, test_track, **overrides):
    path.mkdir()
    source = train_source_for_track((TRAINER / "train.py").read_text(), "test")
    if overrides:
        source = set_hyperparameters(source, overrides)
    (path / "train.py").write_text(source)
    shutil.copy(TRAINER / "prepare.py", path)
    (path / "track.json").write_text(json.dumps(test_track.spec))
    return path


def run_train(workspace, test_track):
    env = {"PATH": "/usr/bin:/bin", "AUTORESEARCH_CACHE": str(test_track.directory.parent),
           "HOME": str(workspace)}
    return subprocess.run([sys.executable, "train.py"], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=300)


def parse_summary(stdout):
    lines = stdout.splitlines()
    assert "---" in lines, stdout[-2000:]
    return dict(line.split(": ", 1) if ": " in line else (line.rstrip(":"), "")
                for line in lines[lines.index("---") + 1:])


def randomized(model, std=0.3, seed=0):
    """Weights with no zero-initialised paths, so attention actually reaches the logits."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * std)
    return model


def small_model(train, pattern, n_layer=4, seq_len=32):
    config = train.GPTConfig(sequence_len=seq_len, vocab_size=64, n_layer=n_layer, n_head=2, n_embd=64,
                             window_pattern=pattern)
    return randomized(train.build_model(config)).eval()


def test_test_track_run_learns_and_prints_the_summary(train, test_track, tmp_path):
    result = run_train(make_workspace(tmp_path / "ws", test_track), test_track)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = parse_summary(result.stdout)
    assert [k for k in SUMMARY_KEYS if k not in summary] == []
    assert len(summary["val_bpb"].split(".")[1]) == 6
    assert int(summary["num_steps"]) == test_track.spec["constants"]["step_budget"]
    assert summary["device"] == "cpu" and summary["depth"] == "2"
    assert "windows: [64, 128]" in result.stdout and "attention sdpa-banded" in result.stdout
    assert (summary["attention"], summary["attention_skipped"]) == ("sdpa-banded", "none")
    assert summary["graph_breaks"] == summary["recompiles"] == "n/a"  # eager on CPU: nothing was compiled
    # The step lines the runner follows (agent/running/run_progress.py) parse, and count down to the end of the budget.
    from agent.running.run_progress import parse_step_line
    steps = [parse_step_line(line) for line in result.stdout.splitlines() if line.startswith("step ")]
    assert steps and None not in steps and steps[-1].percent == 100.0 and steps[-1].left_seconds == 0

    from prepare import Tokenizer, evaluate_bpb
    tokenizer = Tokenizer.from_directory()
    torch.manual_seed(42)
    config = train.GPTConfig(sequence_len=128, vocab_size=1024, n_layer=2, n_head=2, n_embd=64,
                             window_pattern="SSSL")
    untrained = evaluate_bpb(train.build_model(config).eval(), tokenizer, 16)
    assert float(summary["val_bpb"]) < untrained - 0.3, (summary["val_bpb"], untrained)


def test_divergence_fails_fast_with_exit_code_1(test_track, tmp_path):
    workspace = make_workspace(tmp_path / "ws", test_track, UNEMBEDDING_LR=float("nan"))
    result = run_train(workspace, test_track)
    assert result.returncode == 1
    fail_lines = [line for line in result.stdout.splitlines() if line.startswith("FAIL: ")]
    assert fail_lines and "diverged" in fail_lines[0]
    assert "---" not in result.stdout.splitlines()


@pytest.mark.parametrize("pattern", ["L", "S", "SL", "SSSL", "LSLS"])
def test_logits_never_depend_on_later_tokens(train, pattern):
    model = small_model(train, pattern)
    generator = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 64, (2, 32), generator=generator)
    logits = model(idx)
    for t in (0, 5, 15, 16, 30):
        changed = idx.clone()
        changed[:, t + 1:] = torch.randint(0, 64, (2, 31 - t), generator=generator)
        other = model(changed)
        assert torch.allclose(logits[:, :t + 1], other[:, :t + 1], atol=1e-5), t
        assert not torch.allclose(logits[:, t + 1:], other[:, t + 1:], atol=1e-3), t


def test_sliding_window_sees_the_window_and_the_query_itself(train):
    """With window w, position t's logits depend on tokens t - w .. t (w + 1 of them) and nothing older."""
    model = small_model(train, "L", n_layer=1)
    window = 8
    model.windows = [window]  # a single S layer (the last layer is L unless set by hand)
    idx = torch.randint(0, 64, (1, 32), generator=torch.Generator().manual_seed(2))
    t = 20
    base = model(idx)[0, t]
    outside = idx.clone()
    outside[0, : t - window] = (outside[0, : t - window] + 1) % 64
    assert torch.allclose(model(outside)[0, t], base, atol=1e-5)
    oldest = idx.clone()
    oldest[0, t - window] = (oldest[0, t - window] + 1) % 64
    assert not torch.allclose(model(oldest)[0, t], base, atol=1e-3)


def predicted_singular_values(train, s):
    """The scalar polynomial chain that Polar Express applies to each normalised singular value."""
    x = s / (s.norm() * 1.02 + 1e-6)
    for a, b, c in train.POLAR_EXPRESS_COEFFS:
        x = a * x + b * x**3 + c * x**5
    return x


@pytest.mark.parametrize("shape", [(96, 24), (24, 96), (48, 48)])
def test_polar_express_orthogonalises(train, shape):
    """Singular values in [0.01, 1] x 5 come out within [0.85, 1.15]: the documented range of the
    five-step polynomial for normalised inputs >= 1e-3, plus fp32 rounding."""
    generator = torch.Generator().manual_seed(4)
    rank = min(shape)
    u, _ = torch.linalg.qr(torch.randn(shape[0], rank, generator=generator, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(shape[1], rank, generator=generator, dtype=torch.float64))
    s = torch.logspace(-2, 0, rank, dtype=torch.float64) * 5
    G = (u * s) @ v.T
    out = train.polar_express(G.float()[None]).double()[0]
    singular = torch.linalg.svdvals(out)
    assert singular.min() > 0.85 and singular.max() < 1.15, singular
    expected = predicted_singular_values(train, s).sort(descending=True).values
    assert torch.allclose(singular, expected, atol=2e-3)
    core = u.T @ out @ v
    assert torch.allclose(core, torch.diag(core.diagonal()), atol=2e-3), "singular vectors must be the input's"


def test_cautious_weight_decay_touches_only_agreeing_entries(train):
    params = torch.tensor([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]])
    update = torch.tensor([[0.5, 0.5, -0.5], [-0.5, -0.5, 0.5]])
    lr, wd = 0.1, 0.5
    result = params.clone()
    train.cautious_update_(result, update, torch.tensor(lr), torch.tensor(wd))
    agree = (update * params) >= 0
    assert torch.allclose(result[~agree], params[~agree] - lr * update[~agree])
    assert torch.allclose(result[agree], params[agree] - lr * (update[agree] + wd * params[agree]))
    assert agree.any() and (~agree).any()


@pytest.mark.parametrize("shape", [(3, 16, 8), (3, 8, 16)])
def test_normuon_keeps_the_update_norm_and_evens_out_rows(train, shape):
    update = torch.randn(shape, generator=torch.Generator().manual_seed(5))
    update *= torch.linspace(0.2, 3.0, shape[1])[None, :, None] if shape[1] >= shape[2] else \
        torch.linspace(0.2, 3.0, shape[2])[None, None, :]
    dim = -1 if shape[1] >= shape[2] else -2
    second_moment = torch.zeros(update.mean(dim=dim, keepdim=True).shape)
    scaled = train.normuon(update, second_moment, torch.tensor(0.95))
    assert torch.allclose(scaled.norm(dim=(-2, -1)), update.norm(dim=(-2, -1)), rtol=1e-5)
    spread = lambda x: x.square().mean(dim=dim).sqrt().std(dim=-1)  # noqa: E731
    assert (spread(scaled) < 0.01 * spread(update)).all()
    assert second_moment.abs().sum() > 0


def test_peak_flops_table_and_unknown_devices(train):
    assert train.peak_flops_of("NVIDIA H200") == pytest.approx(989.5e12)
    assert train.peak_flops_of("NVIDIA H100 PCIe") == pytest.approx(756e12)
    assert train.peak_flops_of("NVIDIA H100 80GB HBM3") == pytest.approx(989.5e12)
    assert train.peak_flops_of("NVIDIA GeForce RTX 4090") == pytest.approx(165.2e12)
    assert train.peak_flops_of("NVIDIA L40S") == pytest.approx(362.05e12)
    assert train.peak_flops_of("NVIDIA L40") == pytest.approx(181.05e12)
    assert train.peak_flops_of("NVIDIA A100-SXM4-80GB") == pytest.approx(312e12)
    assert train.peak_flops_of("NVIDIA GH200 480GB") == pytest.approx(989.5e12)
    assert train.peak_flops_of("NVIDIA H200 NVL") == pytest.approx(835.5e12)
    assert train.peak_flops_of("NVIDIA GeForce RTX 3090") == pytest.approx(71e12)
    assert train.peak_flops_of("NVIDIA A40") == pytest.approx(149.7e12)
    assert train.peak_flops_of("NVIDIA RTX A4000") is None  # not the A40: names match on whole words
    assert train.peak_flops_of("NVIDIA A10G") is None  # no published dense figure: MFU left blank, not guessed
    assert train.peak_flops_of("Some Future Accelerator") is None
    assert train.peak_flops(torch.device("cpu")) is None


def test_reference_model_shape(train):
    config = train.GPTConfig(sequence_len=2048, vocab_size=8192, n_layer=8, n_head=4, n_embd=512,
                             window_pattern="SSSL")
    with torch.device("meta"):
        model = train.GPT(config)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(50.3e6, rel=0.01)
    assert model.windows == [1024, 1024, 1024, 2048, 1024, 1024, 1024, 2048]
    assert sorted(map(int, model.value_embeds)) == [1, 3, 5, 7]


def test_schedules(train):
    assert train.lr_multiplier(0.0) == 1.0 and train.lr_multiplier(0.5) == 1.0
    assert train.lr_multiplier(0.75) == pytest.approx(0.5) and train.lr_multiplier(1.0) == 0.0
    assert train.muon_momentum(0) == pytest.approx(0.85) and train.muon_momentum(150) == pytest.approx(0.90)
    assert train.muon_momentum(10_000) == pytest.approx(0.95)
    assert math.isclose(train.MATRIX_LR, 0.04)


@pytest.fixture(scope="module")
def gpu_check():
    """benchmarks/gpu_check.py, the helper behind scripts/gpu_check.sh."""
    import importlib.util
    path = TRAINER.parent / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_workspace_shortens_the_budget_and_fails_loudly_when_it_cannot(gpu_check, test_track, tmp_path):
    workspace = gpu_check.workspace_for("test", test_track.directory, tmp_path / "ws", 17)
    lines = (workspace / "train.py").read_text().splitlines()
    anchor = next(i for i, line in enumerate(lines) if line.startswith("from prepare import "))
    assert lines[anchor + 1].startswith("TIME_BUDGET = 17  ")
    assert any(line.startswith("COMPILE_ON_CPU = True") for line in lines)  # the CPU walk-through compiles
    assert (workspace / "prepare.py").read_bytes() == (TRAINER / "prepare.py").read_bytes()
    assert json.loads((workspace / "track.json").read_text())["fingerprint"] == test_track.spec["fingerprint"]
    wrapped = (TRAINER / "train.py").read_text().replace("from prepare import MAX_SEQ_LEN,", "from prepare import (\n"
                                                         "    MAX_SEQ_LEN,")
    wrapped = wrapped.replace("make_dataloader\n", "make_dataloader)\n", 1)
    with pytest.raises(SystemExit, match="no longer imports the budget"):
        gpu_check.workspace_for("test", test_track.directory, tmp_path / "ws2", 17, source=wrapped)


def test_gpu_check_source_holds_enough_evaluation_text(gpu_check, tmp_path):
    from trainer.prepare import track_constants
    from trainer.tracks import corpus
    from trainer.tracks.builder import prepare_track
    constants = track_constants("test")
    chars = gpu_check.write_synthetic_source(tmp_path / "source", constants)
    needed = constants["eval_tokens"] * gpu_check.CHARS_PER_TOKEN_BOUND
    assert min(chars["val"], chars["holdout"]) >= needed
    rows = [json.loads(line)["text"] for line in (tmp_path / "source" / "copies.jsonl").open()]
    assert all(corpus.split_of(row) != "train" for row in rows if not row.startswith("# copy 0\n"))
    prepared = prepare_track("test", source=str(tmp_path / "source"), cache=tmp_path / "cache", show_progress=False)
    assert prepared.spec["eval_rows"] == constants["eval_tokens"] // constants["max_seq_len"]  # val was enough


def test_gpu_check_reads_the_last_summary(gpu_check):
    log = "---\nval_bpb: 9.0\nstep 1\n---\nval_bpb: 1.234567\nattention_skipped: r/x: OSError: offline\n"
    assert gpu_check.parse_summary(log) == {"val_bpb": "1.234567", "attention_skipped": "r/x: OSError: offline"}
    assert gpu_check.parse_summary("no summary") == {}
