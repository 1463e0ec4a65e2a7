"""A Hugging Face hub cache holding a kernel repository, made offline, as the `kernels` library finds one: the
repository's refs/v1 naming a snapshot whose build/torch-cpu/ holds metadata.json and the kernel's package."""

from __future__ import annotations

import json
from pathlib import Path

SNAPSHOT = "5eed" * 10
# flash_attn_func as FlashAttention-3 calls it: (batch, time, heads, head_dim) in and out, a causal window of
# window_size[0] keys before each query (-1: all of them); computed with torch's own attention.
FLASH_ATTN_FUNC = '''
import torch
import torch.nn.functional as F


def flash_attn_func(q, k, v, causal=True, window_size=(-1, 0)):
    T = q.size(1)
    i = torch.arange(T, device=q.device)
    before = i[:, None] - i[None, :]
    window = window_size[0] if window_size[0] >= 0 else T
    mask = (before >= 0) & (before <= window)
    y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
    return y.transpose(1, 2), None
'''


def kernel_repository(hub: Path, repo: str, source: str = FLASH_ATTN_FUNC) -> Path:
    """Puts version 1 of repo into the hub cache at hub; the kernel's package directory."""
    folder = hub / ("kernels--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "v1").write_text(SNAPSHOT)
    build = folder / "snapshots" / SNAPSHOT / "build" / "torch-cpu"
    build.mkdir(parents=True, exist_ok=True)
    name = repo.split("/")[-1]
    (build / "metadata.json").write_text(json.dumps({"name": name, "id": name, "license": "Apache-2.0",
                                                     "version": 1, "backend": {"type": "cpu"},
                                                     "python-depends": []}))
    (build / "__init__.py").write_text(source)
    return build
