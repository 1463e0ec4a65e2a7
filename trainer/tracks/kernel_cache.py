"""Where the attention kernels train.py loads from the hub lie on this machine, so that a sandboxed run finds them.

The `kernels` library reads the Hugging Face hub cache (or KERNELS_CACHE where set). A run sees neither the home
directory the default cache is in (its HOME is /tmp) nor the network, so the harness resolves the cache here, as
huggingface_hub does (HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME or ~/.cache, then huggingface/hub),
shows it to the run read-only at the same path, names it in the run's environment and keeps the hub offline.
"""

from __future__ import annotations

import os
from pathlib import Path


def hub_cache() -> Path:
    """The Hugging Face hub cache of this process's environment (it may not exist)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "huggingface" / "hub"


def kernel_caches() -> tuple[list[Path], dict[str, str]]:
    """(the caches a run is shown read-only, its environment naming them): only those that exist."""
    shown, env = [], {"HF_HUB_OFFLINE": "1"}
    hub = hub_cache().resolve()
    if hub.is_dir():
        shown.append(hub)
        env["HF_HUB_CACHE"] = str(hub)
    if (own := os.environ.get("KERNELS_CACHE")) and (own := Path(own).expanduser().resolve()).is_dir():
        shown.append(own)
        env["KERNELS_CACHE"] = str(own)
    return shown, env
