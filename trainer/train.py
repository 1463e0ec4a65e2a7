"""Train a small GPT for a fixed time budget and report validation bits per byte.

The one file an experiment changes; prepare.py (frozen) supplies the track's constants, the tokenizer,
the dataloader and the metric. Sections: hyperparameters, model, attention, optimizer, setup, training.
Run as `python train.py` in the workspace: progress lines, then `---` and `key: value` lines (val_bpb
first); divergence prints `FAIL: ...` and exits 1. `build_model(config)` builds the model untrained.
"""

import time

PROCESS_START = time.perf_counter()  # before the imports, so that startup_seconds includes them

import gc
import math
import os
import sys
from contextlib import nullcontext
from dataclasses import asdict, dataclass

# Before torch starts: growable CUDA segments (an fp32 copy of the logits is ~8.6 GB); torch >= 2.9 reads the first.
if not (os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF")):
    os.environ.update(PYTORCH_ALLOC_CONF="expandable_segments:True", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")

import torch
import torch.nn as nn
import torch.nn.functional as F

from prepare import MAX_SEQ_LEN, TIME_BUDGET, Tokenizer, budget_steps, evaluate_bpb, make_dataloader

# === HYPERPARAMETERS (track: gpu) ===========================================
# Model
DEPTH = 8                  # transformer blocks
ASPECT_RATIO = 64          # model width = DEPTH * ASPECT_RATIO, rounded up to HEAD_DIM
HEAD_DIM = 128             # channels per attention head
WINDOW_PATTERN = "SSSL"    # per layer, cycled: S = half the sequence, L = all of it; last layer is L
ATTENTION = "fa3"          # kernel on CUDA: fa3 (Hopper; Flex if no build loads), flex or sdpa; others: sdpa
# Batch
TOTAL_BATCH_SIZE = 2**19   # tokens per optimizer step
DEVICE_BATCH_SIZE = 128    # most rows per forward/backward (what the GPU's memory holds); accumulation does the rest
# AdamW learning rates (the first three are scaled by (width / 768) ** -0.5)
UNEMBEDDING_LR = 0.004     # lm_head
EMBEDDING_LR = 0.6         # token embedding
VALUE_EMBEDDING_LR = 0.6   # value embeddings
RESID_LAMBDA_LR = 0.005    # per-layer residual scalars
X0_LAMBDA_LR = 0.5         # per-layer x0 scalars
ADAM_BETAS = (0.8, 0.95)
X0_ADAM_BETAS = (0.96, 0.95)
# Muon (every 2-D matrix inside the blocks)
MATRIX_LR = 0.04           # times sqrt(max(1, rows / cols))
MUON_MOMENTUM = (0.85, 0.95, 300)  # Nesterov momentum: start, end, warm-up steps
NORMUON_BETA2 = 0.95       # EMA of per-row/column second moments
WEIGHT_DECAY = 0.2         # cautious, decays linearly to 0 over the budget
# Schedule, on progress = training seconds / TIME_BUDGET (steps instead on test and the FLOPs tracks, cpu's too)
WARMUP_RATIO = 0.0
WARMDOWN_RATIO = 0.5       # linear decay over the last half
FINAL_LR_FRAC = 0.0
# Compilation (CUDA always compiles)
COMPILE_ON_CPU = False     # ~1.5x tokens/s on 2 cores, but every run compiles cold: ~35 s (~70 CPU s on the cpu track)
# === END HYPERPARAMETERS ====================================================

LOGIT_SOFTCAP = 15.0
ROTARY_BASE = 10000.0
VE_GATE_CHANNELS = 32      # input channels of the value-embedding gate
WARMUP_STEPS_UNCOUNTED = 11  # steps 0..10 (compilation) are not part of the budget
SEED = int(os.environ.get("AUTORESEARCH_SEED", "42"))
STEP_BUDGET = None         # set in main: the steps a step- or FLOPs-budgeted track allows this model (else None)


# ---------------------------------------------------------------------------
# Model

@dataclass
class GPTConfig:
    sequence_len: int
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    window_pattern: str

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def layer_windows(config: GPTConfig) -> list[int]:
    """How far back each layer's queries reach (see the attention kernels): S = half the sequence, L = all."""
    sizes = {"S": config.sequence_len // 2, "L": config.sequence_len}
    pattern = config.window_pattern.upper()
    if not pattern or set(pattern) - set(sizes):
        raise ValueError(f"WINDOW_PATTERN must be made of S and L, got {config.window_pattern!r}")
    windows = [sizes[pattern[i % len(pattern)]] for i in range(config.n_layer)]
    windows[-1] = config.sequence_len
    return windows


def has_value_embedding(layer: int, n_layer: int) -> bool:
    """Every other layer, counted back from the last one (which always has one)."""
    return layer % 2 == (n_layer - 1) % 2


def norm(x):
    return F.rms_norm(x, (x.size(-1),))


def rotary_tables(seq_len: int, head_dim: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / ROTARY_BASE ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv_freq)
    return angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]


def apply_rotary(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, value_embedding: bool):
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.c_q = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.c_k = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.c_v = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.ve_gate = nn.Linear(VE_GATE_CHANNELS, config.n_head, bias=False) if value_embedding else None

    def forward(self, x, ve, cos, sin, window, attend):
        B, T, _ = x.shape
        q, k, v = (proj(x).view(B, T, self.n_head, self.head_dim) for proj in (self.c_q, self.c_k, self.c_v))
        if ve is not None:
            gate = 2 * torch.sigmoid(self.ve_gate(x[..., :VE_GATE_CHANNELS]))
            v = v + gate.unsqueeze(-1) * ve.view(B, T, self.n_head, self.head_dim)
        q = norm(apply_rotary(q, cos, sin))
        k = norm(apply_rotary(k, cos, sin))
        y = attend(q, k, v, window)
        return self.c_proj(y.reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, config: GPTConfig, value_embedding: bool):
        super().__init__()
        self.attn = CausalSelfAttention(config, value_embedding)
        self.mlp = MLP(config)

    def forward(self, x, ve, cos, sin, window, attend):
        x = x + self.attn(norm(x), ve, cos, sin, window, attend)
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig, attend=None):
        super().__init__()
        self.config = config
        self.windows = layer_windows(config)
        self.attend = attend or sdpa_attention
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.value_embeds = nn.ModuleDict({
            str(i): nn.Embedding(config.vocab_size, config.n_embd)
            for i in range(config.n_layer) if has_value_embedding(i, config.n_layer)})
        self.blocks = nn.ModuleList(
            Block(config, has_value_embedding(i, config.n_layer)) for i in range(config.n_layer))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.resid_lambdas = nn.Parameter(torch.ones(config.n_layer))
        self.x0_lambdas = nn.Parameter(torch.full((config.n_layer,), 0.1))
        cos, sin = rotary_tables(config.sequence_len, config.head_dim, None)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @torch.no_grad()
    def init_weights(self):
        bound = math.sqrt(3) / math.sqrt(self.config.n_embd)
        nn.init.normal_(self.wte.weight, std=1.0)
        nn.init.normal_(self.lm_head.weight, std=0.001)
        for ve in self.value_embeds.values():
            nn.init.uniform_(ve.weight, -bound, bound)
        for block in self.blocks:
            for linear in (block.attn.c_q, block.attn.c_k, block.attn.c_v, block.mlp.c_fc):
                nn.init.uniform_(linear.weight, -bound, bound)
            nn.init.zeros_(block.attn.c_proj.weight)
            nn.init.zeros_(block.mlp.c_proj.weight)
            if block.attn.ve_gate is not None:
                nn.init.zeros_(block.attn.ve_gate.weight)
        self.resid_lambdas.fill_(1.0)
        self.x0_lambdas.fill_(0.1)

    def forward(self, idx, targets=None, reduction="mean"):
        T = idx.size(1)
        cos, sin = self.cos[:, :T], self.sin[:, :T]
        x = x0 = norm(self.wte(idx))
        for i, block in enumerate(self.blocks):
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = self.value_embeds[str(i)](idx) if str(i) in self.value_embeds else None
            x = block(x, ve, cos, sin, self.windows[i], self.attend)
        logits = self.lm_head(norm(x)).float()
        logits = LOGIT_SOFTCAP * torch.tanh(logits / LOGIT_SOFTCAP)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), reduction=reduction)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {
            "lm_head": [self.lm_head.weight],
            "embedding": [self.wte.weight],
            "value_embeddings": [ve.weight for ve in self.value_embeds.values()],
            "resid_lambdas": [self.resid_lambdas],
            "x0_lambdas": [self.x0_lambdas],
            "matrices": [p for p in self.blocks.parameters()],
        }

    def flops_per_token(self) -> int:
        """6 x matrix parameters (lm_head included) + attention scores over each layer's window."""
        matrices = sum(p.numel() for p in self.param_groups()["matrices"]) + self.lm_head.weight.numel()
        attention = sum(12 * self.config.n_head * self.config.head_dim * w for w in self.windows)
        return 6 * matrices + attention


def config_from_hyperparameters(vocab_size: int) -> GPTConfig:
    width = -(-DEPTH * ASPECT_RATIO // HEAD_DIM) * HEAD_DIM
    return GPTConfig(sequence_len=MAX_SEQ_LEN, vocab_size=vocab_size, n_layer=DEPTH, n_head=width // HEAD_DIM,
                     n_embd=width, window_pattern=WINDOW_PATTERN)


def build_model(config: GPTConfig, device="cpu", attend=None) -> GPT:
    """The model with its initial weights, on device, untrained."""
    with torch.device("meta"):
        model = GPT(config, attend)
    model.to_empty(device=device)
    model.cos, model.sin = rotary_tables(config.sequence_len, config.head_dim, device)
    model.init_weights()
    if torch.device(device).type == "cuda":
        model.wte.to(dtype=torch.bfloat16)
        model.value_embeds.to(dtype=torch.bfloat16)
    return model


# ---------------------------------------------------------------------------
# Attention kernels: q, k, v are (batch, time, heads, head_dim). Query i sees keys i - window .. i,
# window + 1 keys with itself: FlashAttention-3's window_size=(window, 0). All kernels give this pattern.

ATTENTION_TOLERANCE = 1e-2  # relative error against float32: bf16 rounding ~0.002, one key off at window 1: 0.5-1
FLASH_ATTENTION_REPOS = {9: ("varunneal/flash-attention-3", "kernels-community/flash-attn3")}  # by major capability


def visible(q_idx, kv_idx, window):
    return (kv_idx <= q_idx) & (q_idx - kv_idx <= window)


def banded_causal_mask(T: int, window: int, device) -> torch.Tensor:
    """Built on every call: a cache in a global dict would make torch.compile recompile when it fills."""
    i = torch.arange(T, device=device)
    return visible(i[:, None], i[None, :], window)


def sdpa_attention(q, k, v, window):
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    T = q.size(2)
    if window >= T:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=banded_causal_mask(T, window, q.device))
    return y.transpose(1, 2)


def make_flex_attention(seq_len: int, windows: list[int], device):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    masks = {w: create_block_mask(lambda b, h, q_idx, kv_idx, w=w: visible(q_idx, kv_idx, w), None, None,
                                  seq_len, seq_len, device=device) for w in set(windows)}

    def attend(q, k, v, window):
        y = flex_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=masks[window])
        return y.transpose(1, 2)
    return attend


def load_flash_attention_3(repo: str, get_kernel=None):
    """FA3 from the kernels hub (a pre-fetched cache works with HF_HUB_OFFLINE=1), as an attention kernel."""
    if get_kernel is None:
        from kernels import get_kernel
    module = get_kernel(repo, version=1, trust_remote_code=[repo])
    flash = next((owner.flash_attn_func for owner in (module, getattr(module, "flash_attn_interface", None))
                  if callable(getattr(owner, "flash_attn_func", None))), None)
    if flash is None:
        raise AttributeError(f"{repo} has neither flash_attn_func nor flash_attn_interface.flash_attn_func")

    def attend(q, k, v, window):
        y = flash(q, k, v, causal=True, window_size=(window if window < q.size(1) - 1 else -1, 0))
        return y[0] if isinstance(y, tuple) else y  # some builds also return the log-sum-exp
    return attend


def attention_error(attend, device, seq_len: int, windows: list[int]) -> float:
    """Largest |attend - float32 SDPA| / |SDPA| on bf16 inputs, at the model's windows and at 1 and 3 (see above)."""
    generator = torch.Generator(device=device).manual_seed(0)
    worst = 0.0
    for T, window in [(seq_len, w) for w in sorted(set(windows))] + [(min(seq_len, 128), 1), (min(seq_len, 128), 3)]:
        q, k, v = torch.randn(3, 2, T, 2, HEAD_DIM, device=device, generator=generator).bfloat16().unbind(0)
        reference = sdpa_attention(q.float(), k.float(), v.float(), window)
        worst = max(worst, ((attend(q, k, v, window).float() - reference).norm() / reference.norm()).item())
    return worst


def choose_attention(device, seq_len: int, windows: list[int], get_kernel=None, capability=None, wanted="fa3"):
    """(name, kernel, why each FA3 build was passed over): SDPA with a banded mask off CUDA or when wanted;
    FlexAttention when wanted; else the first FA3 build that loads and agrees with the reference, else Flex
    (get_kernel and capability stand in for the hub's loader and the GPU's compute capability)."""
    if wanted not in ("fa3", "flex", "sdpa"):
        raise ValueError(f"ATTENTION must be fa3, flex or sdpa, not {wanted!r}")
    if wanted == "sdpa" or (device.type != "cuda" and capability is None):
        return "sdpa-banded", sdpa_attention, []
    if wanted == "flex":
        return "flex", make_flex_attention(seq_len, windows, device), []
    major, _ = capability or torch.cuda.get_device_capability(device)
    skipped = []
    for repo in FLASH_ATTENTION_REPOS.get(major, ("kernels-community/flash-attn3",)):
        try:
            fa3 = load_flash_attention_3(repo, get_kernel)
            error = attention_error(fa3, device, seq_len, windows)
            if not error <= ATTENTION_TOLERANCE:
                raise RuntimeError(f"relative error {error:.3g} against float32 (limit {ATTENTION_TOLERANCE:g})")
            return f"fa3 {repo}", fa3, skipped
        except Exception as err:
            skipped.append(f"{repo}: {type(err).__name__}: {' '.join(str(err).split())[:200]}")
            print(f"attention: FlashAttention-3 from {skipped[-1]}")
    return "flex", make_flex_attention(seq_len, windows, device), skipped


# ---------------------------------------------------------------------------
# Optimizer: AdamW for embeddings, head and scalars; Muon for block matrices.
# Hyperparameters travel as 0-D tensors so that changing them never recompiles.

# Polar Express: per-iteration (a, b, c) of x -> a x + b x^3 + c x^5, mapping singular
# values in [1e-3, 1] to about 1 in five steps.
POLAR_EXPRESS_COEFFS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)


def polar_express(G: torch.Tensor) -> torch.Tensor:
    """Approximately orthogonalise each matrix of a (..., rows, cols) stack (bf16 on GPU, fp32 on CPU)."""
    X = G.bfloat16() if G.is_cuda else G.float()
    transposed = X.size(-2) > X.size(-1)
    if transposed:  # iterate on the smaller Gram matrix
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) * 1.02 + 1e-6)
    for a, b, c in POLAR_EXPRESS_COEFFS:
        A = X @ X.mT
        X = a * X + (b * A + c * (A @ A)) @ X
    return X.mT if transposed else X


def normuon(update: torch.Tensor, second_moment: torch.Tensor, beta2) -> torch.Tensor:
    """Scale each row (tall matrices) or column (wide) by its running RMS, keeping the total norm."""
    dim = -1 if update.size(-2) >= update.size(-1) else -2
    update = update.float()
    second_moment.lerp_(update.square().mean(dim=dim, keepdim=True), 1 - beta2)
    scaled = update * second_moment.clamp_min(1e-10).rsqrt()
    ratio = update.norm(dim=(-2, -1), keepdim=True) / scaled.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-10)
    return scaled * ratio


def cautious_update_(params: torch.Tensor, update: torch.Tensor, lr, weight_decay) -> None:
    """params -= lr * (update + wd * params), decaying only entries where update and params agree in sign."""
    agree = (update * params) >= 0
    params.sub_(lr * (update + weight_decay * params * agree))


def muon_step_(params, grads, momentum_buffer, second_moment, momentum, lr, weight_decay, beta2):
    stacked_grads = torch.stack(grads)
    momentum_buffer.lerp_(stacked_grads, 1 - momentum)
    nesterov = stacked_grads.lerp_(momentum_buffer, momentum)
    update = normuon(polar_express(nesterov), second_moment, beta2)
    stacked = torch.stack(params)
    cautious_update_(stacked, update.to(stacked.dtype), lr, weight_decay)
    torch._foreach_copy_(params, list(stacked.unbind(0)))


def adamw_step_(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps):
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.lerp_(grad.square(), 1 - beta2)
    denom = (exp_avg_sq / (1 - beta2 ** step)).sqrt() + eps
    param.sub_(lr / (1 - beta1 ** step) * exp_avg / denom)


class MuonAdamW:
    def __init__(self, model: GPT, device, compile_steps: bool):
        width_scale = (model.config.n_embd / 768) ** -0.5
        groups = model.param_groups()
        adam_lrs = {"lm_head": UNEMBEDDING_LR * width_scale, "embedding": EMBEDDING_LR * width_scale,
                    "value_embeddings": VALUE_EMBEDDING_LR * width_scale,
                    "resid_lambdas": RESID_LAMBDA_LR, "x0_lambdas": X0_LAMBDA_LR}
        scalar = lambda value: torch.tensor(value, dtype=torch.float32, device=device)  # noqa: E731
        self.adam = [dict(params=groups[name], base_lr=lr, lr=scalar(lr), step=scalar(0.0), eps=scalar(1e-10),
                          betas=[scalar(b) for b in (X0_ADAM_BETAS if name == "x0_lambdas" else ADAM_BETAS)],
                          state=[(torch.zeros_like(p), torch.zeros_like(p)) for p in groups[name]])
                     for name, lr in adam_lrs.items() if groups[name]]
        by_shape: dict[tuple, list] = {}
        for p in groups["matrices"]:
            by_shape.setdefault(tuple(p.shape), []).append(p)
        self.muon = []
        for (rows, cols), params in by_shape.items():
            lr = MATRIX_LR * math.sqrt(max(1.0, rows / cols))
            moment_shape = (len(params), rows, 1) if rows >= cols else (len(params), 1, cols)
            self.muon.append(dict(params=params, base_lr=lr, lr=scalar(lr),
                                  momentum_buffer=torch.zeros(len(params), rows, cols, device=device),
                                  second_moment=torch.zeros(moment_shape, device=device)))
        self.momentum, self.weight_decay, self.beta2 = scalar(0.0), scalar(0.0), scalar(NORMUON_BETA2)
        maybe_compile = (lambda f: torch.compile(f, dynamic=False, fullgraph=True)) if compile_steps else (lambda f: f)
        self.adamw_step_ = maybe_compile(adamw_step_)
        self.muon_step_ = maybe_compile(muon_step_)

    def set_schedule(self, lr_multiplier: float, momentum: float, weight_decay: float) -> None:
        for group in self.adam + self.muon:
            group["lr"].fill_(group["base_lr"] * lr_multiplier)
        self.momentum.fill_(momentum)
        self.weight_decay.fill_(weight_decay)

    @torch.no_grad()
    def step(self) -> None:
        for group in self.adam:
            group["step"].add_(1)
            for p, (exp_avg, exp_avg_sq) in zip(group["params"], group["state"], strict=True):
                self.adamw_step_(p, p.grad, exp_avg, exp_avg_sq, group["step"], group["lr"],
                                 group["betas"][0], group["betas"][1], group["eps"])
        for group in self.muon:
            self.muon_step_(group["params"], [p.grad for p in group["params"]], group["momentum_buffer"],
                            group["second_moment"], self.momentum, group["lr"], self.weight_decay, self.beta2)


def budget_progress(step: int, training_seconds: float) -> float:
    """The share of the budget spent: steps where the track counts steps, else counted seconds."""
    if STEP_BUDGET:
        return min(step / STEP_BUDGET, 1.0)
    return min(training_seconds / TIME_BUDGET, 1.0)


def lr_multiplier(progress: float) -> float:
    if progress < WARMUP_RATIO:
        return progress / WARMUP_RATIO
    if progress <= 1 - WARMDOWN_RATIO:
        return 1.0
    remaining = (1 - progress) / WARMDOWN_RATIO
    return remaining + (1 - remaining) * FINAL_LR_FRAC


def muon_momentum(step: int) -> float:
    start, end, warmup_steps = MUON_MOMENTUM
    frac = min(step / warmup_steps, 1.0)
    return (1 - frac) * start + frac * end


# ---------------------------------------------------------------------------
# Setup: device, precision, peak FLOPs

# Dense bf16 tensor-core peak FLOP/s with fp32 accumulation (as autocast matmuls run), no sparsity. Datasheets print
# 2:4-sparse figures (halved here); GeForce whitepapers' dense/sparse "BF16 ... FP32 Accumulate": 4090 165.2/330.4.
PEAK_BF16_FLOPS = (
    ("GB200", 2.5e15), ("B200", 2.25e15),  # GB200 NVL72 and DGX B200 datasheets, per GPU
    ("H200 NVL", 835.5e12), ("H100 NVL", 835.5e12), ("H100 PCIe", 756e12), ("H800 PCIe", 756e12),  # datasheets
    ("H200", 989.5e12), ("GH200", 989.5e12), ("H100", 989.5e12), ("H800", 989.5e12),  # SXM and GH200 datasheets
    ("A100", 312e12), ("A800", 312e12), ("A40", 149.7e12), ("A10G", None), ("A10", 125e12),  # datasheets; A10G: none
    ("L40S", 362.05e12), ("L40", 181.05e12), ("L4", 121e12),  # L40S, L40, L4 datasheets
    ("RTX 6000 Ada", 364.2e12), ("RTX A6000", 154.8e12),  # Ada whitepaper; RTX A6000 datasheet
    ("RTX 5090", 209.5e12), ("RTX 4090", 165.2e12), ("RTX 3090", 71e12),  # Blackwell, Ada, GA102 whitepapers
)


def peak_flops_of(device_name: str) -> float | None:
    """First match on whole words ('A40' is not 'RTX A4000'), so specific names come first; None: no figure."""
    name = f" {device_name.replace('-', ' ')} "
    return next((flops for key, flops in PEAK_BF16_FLOPS if f" {key} " in name), None)


def peak_flops(device) -> float | None:
    peak = peak_flops_of(name := torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    if peak is None and device.type == "cuda":
        print(f"MFU: no peak FLOP/s known for {name!r}; mfu_percent is left blank")
    return peak


def peak_memory_mb(device) -> float:
    """Peak allocated accelerator memory; on CPU, the process's peak resident memory."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    if device.type == "mps":
        return torch.mps.driver_allocated_memory() / 2**20
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def fail(reason: str) -> None:
    print(f"FAIL: {reason}", flush=True)
    sys.exit(1)


def compile_report() -> tuple[int, int, list[str]]:
    """(graph breaks, recompiles, their reasons) that torch.compile met in this process so far."""
    from torch._dynamo.utils import counters, get_compilation_metrics
    breaks = counters["graph_break"]
    recompiles = [m.recompile_reason for m in get_compilation_metrics() if m.recompile_reason]
    reasons = ["graph break: " + " ".join(r.splitlines()[:2]).strip() for r in breaks]  # what, then why
    reasons += [f"recompile: {r}" for r in recompiles]
    return sum(breaks.values()), len(recompiles), reasons


def describe_model(model: GPT, attention: str) -> str:
    c = model.config
    groups = {name: sum(p.numel() for p in params) for name, params in model.param_groups().items()}
    return "\n".join([f"model: depth {c.n_layer}, width {c.n_embd}, heads {c.n_head} x {c.head_dim}, "
                      f"vocab {c.vocab_size}, seq {c.sequence_len}, attention {attention}",
                      f"windows: {model.windows}",
                      f"value embeddings on layers: {sorted(int(i) for i in model.value_embeds)}",
                      "params: " + ", ".join(f"{k} {v / 1e6:.3f}M" for k, v in groups.items())
                      + f", total {sum(groups.values()) / 1e6:.3f}M"])


# ---------------------------------------------------------------------------
# Training loop

def main() -> None:
    global STEP_BUDGET
    torch.manual_seed(SEED)
    device = torch.device("cuda" if torch.cuda.is_available() else
                          "mps" if torch.backends.mps.is_available() else "cpu")
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.cuda.manual_seed_all(SEED)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    autocast = torch.amp.autocast("cuda", dtype=torch.bfloat16) if on_cuda else nullcontext()

    tokenizer = Tokenizer.from_directory()
    config = config_from_hyperparameters(tokenizer.get_vocab_size())
    attention, attend, attention_skipped = choose_attention(device, MAX_SEQ_LEN, layer_windows(config),
                                                            wanted=ATTENTION)
    model = build_model(config, device, attend)
    num_params, flops_per_token = sum(p.numel() for p in model.parameters()), model.flops_per_token()
    rows = min(DEVICE_BATCH_SIZE, max(1, TOTAL_BATCH_SIZE // MAX_SEQ_LEN))  # a smaller step needs fewer
    STEP_BUDGET = budget_steps(num_params, config.n_layer, config.n_embd, TOTAL_BATCH_SIZE, rows * MAX_SEQ_LEN)
    peak = peak_flops(device)
    print(describe_model(model, attention))
    print(f"config: {asdict(config)}")

    tokens_per_micro_step = rows * MAX_SEQ_LEN
    if TOTAL_BATCH_SIZE % tokens_per_micro_step:
        fail(f"TOTAL_BATCH_SIZE {TOTAL_BATCH_SIZE} is not a multiple of {rows} rows x MAX_SEQ_LEN "
             f"= {tokens_per_micro_step}")
    grad_accum_steps = TOTAL_BATCH_SIZE // tokens_per_micro_step
    print(f"device: {device}, batch {TOTAL_BATCH_SIZE} tokens/step = {rows} rows x "
          f"{MAX_SEQ_LEN} x {grad_accum_steps} accumulation, budget {STEP_BUDGET or TIME_BUDGET}"
          f"{' steps' if STEP_BUDGET else ' s'}, seed {SEED}")

    optimizer = MuonAdamW(model, device, compile_steps=on_cuda)
    compile_model = on_cuda or (device.type == "cpu" and COMPILE_ON_CPU)
    if compile_model:
        from torch._dynamo.utils import set_compilation_metrics_limit
        set_compilation_metrics_limit(100_000)  # torch keeps the last 64 compiles; compile_report counts all
    train_model = torch.compile(model, dynamic=False) if compile_model else model
    train_loader = make_dataloader(tokenizer, rows, MAX_SEQ_LEN, "train", device=device)
    x, y, epoch = next(train_loader)

    startup_seconds = time.perf_counter() - PROCESS_START
    training_seconds = warmup_seconds = 0.0
    smooth_loss, step, next_report = 0.0, 0, 0.0
    while True:
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(grad_accum_steps):
            with autocast:
                loss = train_model(x, y)
            (loss / grad_accum_steps).backward()
            x, y, epoch = next(train_loader)
        progress = budget_progress(step, training_seconds)
        optimizer.set_schedule(lr_multiplier(progress), muon_momentum(step), WEIGHT_DECAY * (1 - progress))
        optimizer.step()
        model.zero_grad(set_to_none=True)
        loss_value = loss.item()
        if not math.isfinite(loss_value) or loss_value > 100:
            fail(f"training diverged at step {step}: loss {loss_value}")
        synchronize(device)
        dt = time.perf_counter() - t0
        if step < WARMUP_STEPS_UNCOUNTED:
            warmup_seconds += dt
        else:
            training_seconds += dt

        smooth_loss = 0.9 * smooth_loss + 0.1 * loss_value
        debiased = smooth_loss / (1 - 0.9 ** (step + 1))
        done = budget_progress(step + 1, training_seconds)
        if step < 3 or done >= 1.0 or training_seconds >= next_report:  # the line the runner follows: keep its fields
            next_report, tok_per_s = training_seconds + TIME_BUDGET / 20, TOTAL_BATCH_SIZE / dt
            left = (STEP_BUDGET - step - 1) * dt if STEP_BUDGET else (1 - done) * TIME_BUDGET
            mfu = f"{100 * tok_per_s * flops_per_token / peak:.1f}%" if peak else "n/a"
            print(f"step {step:05d} ({100 * done:5.1f}%) | loss {debiased:.4f} | lr x{lr_multiplier(progress):.2f}"
                  f" | {1000 * dt:.0f} ms | {tok_per_s:,.0f} tok/s | mfu {mfu} | epoch {epoch} | left {left:.0f} s",
                  flush=True)

        if step == 0 or (step + 1) % 5000 == 0:  # after step 0 the heap is steady; collections would only stall steps
            gc.collect()
            if step == 0:
                gc.freeze()
                gc.disable()
        step += 1
        if step >= WARMUP_STEPS_UNCOUNTED and budget_progress(step, training_seconds) >= 1.0:
            break

    counted_steps = step - WARMUP_STEPS_UNCOUNTED
    graph_breaks, recompiles, reasons = compile_report() if compile_model else ("n/a", "n/a", [])
    for reason in dict.fromkeys(reasons):  # a graph break in a layer repeats in every layer
        print(f"compile: {reason}")
    tokens_per_second = counted_steps * TOTAL_BATCH_SIZE / training_seconds
    eval_start = time.perf_counter()
    model.eval()
    with autocast:
        val_bpb = evaluate_bpb(train_model, tokenizer, rows)
    eval_seconds = time.perf_counter() - eval_start
    if not math.isfinite(val_bpb):
        fail(f"val_bpb is {val_bpb}")
    mfu_percent = f"{100 * tokens_per_second * flops_per_token / peak:.2f}" if peak else ""

    summary = dict(
        val_bpb=f"{val_bpb:.6f}", training_seconds=f"{training_seconds:.1f}",
        training_wall_seconds=f"{training_seconds:.1f}",
        total_seconds=f"{time.perf_counter() - PROCESS_START:.1f}", startup_seconds=f"{startup_seconds:.1f}",
        warmup_seconds=f"{warmup_seconds:.1f}", eval_seconds=f"{eval_seconds:.1f}",
        peak_vram_mb=f"{peak_memory_mb(device):.1f}", mfu_percent=mfu_percent,
        tokens_per_second=f"{tokens_per_second:.0f}", total_tokens_M=f"{step * TOTAL_BATCH_SIZE / 1e6:.1f}",
        num_steps=step, num_params_M=f"{num_params / 1e6:.1f}", depth=DEPTH,
        device=torch.cuda.get_device_name(device) if on_cuda else device.type, attention=attention,
        attention_skipped="; ".join(attention_skipped) or "none", graph_breaks=graph_breaks, recompiles=recompiles,
        device_memory_mb=f"{torch.cuda.get_device_properties(device).total_memory / 2**20:.0f}" if on_cuda else "")
    print("---\n" + "\n".join(f"{key}: {value}" for key, value in summary.items()))


if __name__ == "__main__":
    main()
