"""Puts the FlashAttention-3 kernels that train.py loads (`get_kernel(repo, version=1)`) into the
image's hub cache, or checks that a provided cache holds them, so that runs load them offline.

    python fetch_kernels.py hub|cache|none

hub: download version 1 of each kernel, then check. cache: only check what was copied in.
none: nothing (train.py falls back to FlexAttention). The check resolves `v1` the way the kernels
library does offline (refs/v1 -> a snapshot with a build/ folder); loading needs CUDA, not done here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from huggingface_hub import snapshot_download

REPOS = ("varunneal/flash-attention-3", "kernels-community/flash-attn3")
VERSION_REF = "v1"


def offline_snapshot(repo: str) -> Path:
    path = Path(snapshot_download(repo, repo_type="kernel", revision=VERSION_REF, local_files_only=True))
    if not (path / "build").is_dir():
        raise SystemExit(f"{repo} {VERSION_REF} in the cache has no build/ folder ({path}): not a kernel snapshot")
    return path


def main(mode: str) -> int:
    if mode == "none":
        print("FA3 kernels not included (KERNELS=none): runs use FlexAttention")
        return 0
    if mode not in ("hub", "cache"):
        raise SystemExit(f"KERNELS must be hub, cache or none, not {mode!r}")
    for repo in REPOS:
        if mode == "hub":
            snapshot_download(repo, repo_type="kernel", revision=VERSION_REF)
        try:
            print(f"{repo} {VERSION_REF}: {offline_snapshot(repo)}")
        except SystemExit:
            raise
        except Exception as err:
            raise SystemExit(f"{repo} {VERSION_REF} is not in the hub cache ({err}); with KERNELS=cache, copy a "
                             "Hugging Face hub cache that holds it into docker/kernels-cache/") from err
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "hub"))
