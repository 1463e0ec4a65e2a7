"""What a run trained on: the machine's accelerator (or its CPU), as a fingerprint every record carries.

Read by the harness on the machine that runs the job (a local slot, a spool worker, a cluster node), never
from what a run prints. Where an accelerator is in reach its description comes from torch in a child
process, so that the long-lived harness never holds a CUDA context of its own; elsewhere it is read
without torch.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from typing import Literal

from pydantic import BaseModel, ConfigDict

from trainer.sandbox.limits import gpu_in_reach, physical_memory

Backend = Literal["cuda", "rocm", "mps", "cpu"]
GIB = 1 << 30
PROBE_TIMEOUT_S = 60.0
# Run with the harness's interpreter: torch's view of device 0 and how many there are (ROCm builds report
# "cuda" devices; torch.version.hip names them), or of Apple's GPU.
TORCH_PROBE = """
import json, platform, torch
out = {"torch": torch.__version__.split("+")[0]}
if torch.cuda.is_available():
    p, hip = torch.cuda.get_device_properties(0), torch.version.hip
    out.update(backend="rocm" if hip else "cuda", name=torch.cuda.get_device_name(0), count=torch.cuda.device_count(),
               memory_bytes=p.total_memory, capability=(getattr(p, "gcnArchName", "") or None) if hip
               else f"{p.major}.{p.minor}", runtime=f"HIP {hip}" if hip else f"CUDA {torch.version.cuda}")
elif torch.backends.mps.is_available():
    out.update(backend="mps", count=1, memory_bytes=torch.mps.recommended_max_memory(),
               runtime="macOS " + platform.mac_ver()[0])
print(json.dumps(out))
"""


class Hardware(BaseModel):
    """One machine's training device: the accelerator a run reaches (device 0 and how many), else the CPU."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    backend: Backend
    name: str
    count: int = 1
    memory_bytes: int                 # the device's memory (MPS: what Metal recommends a process use); CPU: RAM
    capability: str | None = None     # CUDA compute capability ("9.0"), ROCm's gfx architecture ("gfx942")
    driver: str | None = None         # the NVIDIA driver
    runtime: str | None = None        # "CUDA 12.8", "HIP 6.4", "macOS 15.1"
    torch: str | None = None
    cores: int | None = None          # CPU cores (the cpu backend)

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def key(self) -> str:
        """What makes two machines the same for a calibration: the device, how many, its backend."""
        slug = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")
        return f"{self.backend}-{slug}-x{self.count}"

    def describe(self) -> str:
        device = f"{self.name} x{self.count}" if self.backend != "cpu" else f"{self.name}, {self.cores} cores"
        parts = [device, f"{self.memory_gib:.1f} GiB",
                 (f"sm_{self.capability.replace('.', '')}" if self.backend == "cuda" else self.capability)
                 if self.capability else None,
                 f"driver {self.driver}" if self.driver else None, self.runtime,
                 f"torch {self.torch}" if self.torch else None]
        return " · ".join(p for p in parts if p)


class HardwareError(Exception):
    """The device could not be read; the message says what failed."""


@functools.lru_cache(maxsize=1)
def this_machine() -> Hardware:
    if gpu_in_reach() or sys.platform == "darwin":
        try:
            found = torch_view()
        except HardwareError as err:  # said in its name, where doctor, status and the record show it
            return Hardware(backend="cuda" if gpu_in_reach() else "cpu", name=f"unreadable device ({err})",
                            memory_bytes=0, torch=installed_torch())
        if found.get("backend"):
            return Hardware(name=found.pop("name", None) or chip_name(), driver=nvidia_driver()
                            if found["backend"] == "cuda" else None, **found)
        return cpu_hardware(found.get("torch"))
    return cpu_hardware(installed_torch())


def torch_view() -> dict:
    """What torch in a child process sees; HardwareError naming why when it cannot say."""
    try:
        done = subprocess.run([sys.executable, "-c", TORCH_PROBE], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise HardwareError(f"reading the device through torch failed: {err}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise HardwareError(f"reading the device through torch failed: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cpu_hardware(torch_version: str | None) -> Hardware:
    return Hardware(backend="cpu", name=chip_name(), memory_bytes=physical_memory(), cores=os.cpu_count(),
                    runtime=f"{platform.system()} {platform.release()}", torch=torch_version)


def installed_torch() -> str | None:
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version("torch").split("+")[0]
    return None


def chip_name() -> str:
    """The CPU's (on a Mac, the Apple chip's) marketing name."""
    if sys.platform == "darwin":
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                  timeout=5).stdout.strip() or "Apple silicon"
        return "Apple silicon"
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def nvidia_driver() -> str | None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10)
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    return None
