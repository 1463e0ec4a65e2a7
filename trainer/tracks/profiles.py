"""Hardware profiles: what train.py's hyperparameter block is set to for the device a tag trains on.

A profile changes how the work is laid out, never what is learnt: DEVICE_BATCH_SIZE is the largest power of two
whose rows fit the device's memory with a margin (TOTAL_BATCH_SIZE stays, so gradient accumulation keeps the
tokens of an optimizer step and the results comparable), and ATTENTION names the kernel that exists there.
Chosen at init from the device (trainer/tracks/hardware.py) or by name (`--profile`), written into the block, so
every run of the tag uses it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from trainer.tracks.hardware import GIB, Hardware

GPU_TRACKS = ("gpu", "gpu-flops")  # tracks sized for a GPU: the profile sets their batch rows
REFERENCE_ROWS = 128               # the gpu track's DEVICE_BATCH_SIZE (an H100's); never raised above it
# Peak memory per row of 2048 tokens of the reference model, and what does not grow with rows (weights, optimizer
# state, the CUDA context, compile workspaces): from the reference's published H100 run, peak_vram_mb 45060.2 at
# DEVICE_BATCH_SIZE 128 (the summary in the reference autoresearch's program.md, read 2026-12-05). peak_vram_mb is
# torch.cuda.max_memory_allocated / 2**20 there as here: MiB.
REFERENCE_PEAK_BYTES = int(45060.2 * 2**20)
FIXED_BYTES = 2 * GIB
ROW_BYTES = (REFERENCE_PEAK_BYTES - FIXED_BYTES) // REFERENCE_ROWS  # about 352 MB
MEMORY_MARGIN = 0.8                # of the device's memory: fragmentation, the allocator's cache, other tenants
MIN_CAPABILITY = (8, 0)            # bfloat16 tensor cores: Ampere and newer


class ProfileError(ValueError):
    """No profile fits the device; the message says why and what to do."""


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    device: str                        # the device it was chosen for, described
    hyperparameters: dict[str, int | str]
    why: list[str]

    def describe(self) -> str:
        values = ", ".join(f"{k} = {v!r}" for k, v in self.hyperparameters.items())
        return f"profile {self.name} ({self.device}): {values}\n" + "\n".join(f"  - {w}" for w in self.why)


def _cuda(name: str, gib: float, capability: str) -> Hardware:
    return Hardware(backend="cuda", name=name, memory_bytes=int(gib * GIB), capability=capability)


# Descriptions as torch reports them (total memory: a little under the marketing figure); `--profile NAME`.
KNOWN_DEVICES: dict[str, Hardware] = {
    "h100": _cuda("NVIDIA H100 80GB HBM3", 79.2, "9.0"),
    "h200": _cuda("NVIDIA H200", 139.8, "9.0"),
    "a100-80gb": _cuda("NVIDIA A100-SXM4-80GB", 79.1, "8.0"),
    "a100-40gb": _cuda("NVIDIA A100-SXM4-40GB", 39.4, "8.0"),
    "l4": _cuda("NVIDIA L4", 22.0, "8.9"),
    "rtx-4090": _cuda("NVIDIA GeForce RTX 4090", 23.6, "8.9"),
    "rtx-3090": _cuda("NVIDIA GeForce RTX 3090", 23.6, "8.6"),
    "rtx-5090": _cuda("NVIDIA GeForce RTX 5090", 31.4, "12.0"),
    "a10g": _cuda("NVIDIA A10G", 22.1, "8.6"),
    "t4": _cuda("Tesla T4", 14.6, "7.5"),
    "mi300x": Hardware(backend="rocm", name="AMD Instinct MI300X", memory_bytes=int(191.5 * GIB),
                       capability="gfx942"),
    "mps": Hardware(backend="mps", name="Apple M2 Max", memory_bytes=int(21.3 * GIB)),
    "cpu": Hardware(backend="cpu", name="CPU", memory_bytes=16 * GIB),
}


def profile_for(track: str, hardware: Hardware | None = None, name: str | None = None) -> Profile:
    """The profile of a named device (`--profile`), else of this device; ProfileError when none fits."""
    if name is not None:
        if name not in KNOWN_DEVICES:
            raise ProfileError(f"no profile named {name!r}: choose one of {', '.join(KNOWN_DEVICES)} "
                               "(`autoresearch doctor` shows what this machine would get)")
        return choose_profile(KNOWN_DEVICES[name], track, name)
    if hardware is None:
        from trainer.tracks.hardware import this_machine
        hardware = this_machine()
    if hardware.backend == "cpu" and track in GPU_TRACKS:
        profile = choose_profile(KNOWN_DEVICES["h100"], track, "h100")
        return profile.model_copy(update={"why": [
            f"no GPU on this machine ({hardware.name}): the {track} track keeps the reference's H100 settings for "
            "the machine the runs go to (a spool worker, a cluster); pass --profile NAME if that is another GPU",
            *profile.why]})
    return choose_profile(hardware, track)


def choose_profile(hardware: Hardware, track: str, name: str | None = None) -> Profile:
    if hardware.backend == "cuda":
        major, minor = (int(part) for part in (hardware.capability or "0.0").split(".")[:2])
        if (major, minor) < MIN_CAPABILITY:
            raise ProfileError(
                f"{hardware.name} has compute capability {major}.{minor}: train.py trains in bfloat16, which needs "
                f"{MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} (Ampere) or newer. Use a newer GPU, or the cpu track")
        if major == 9:
            attention, reason = "fa3", "Hopper (sm_90): FlashAttention-3, FlexAttention if no FA3 build loads"
        elif major == 12:
            attention, reason = "sdpa", (f"sm_{major}{minor} (consumer Blackwell): no FA3 build (Hopper only); SDPA, "
                                         "whose kernels ship with torch for it")
        else:
            attention, reason = "flex", f"sm_{major}{minor}: no FA3 build (Hopper only); FlexAttention"
    elif hardware.backend == "rocm":
        attention, reason = "sdpa", (f"ROCm ({hardware.capability or 'AMD GPU'}): torch calls it cuda, but FA3 is "
                                     "CUDA's; SDPA")
    elif hardware.backend == "mps":
        attention, reason = "sdpa", "Apple GPU (mps): SDPA in float32, no torch.compile"
    else:
        attention, reason = "sdpa", "CPU: SDPA with a banded mask"
    values: dict[str, int | str] = {"ATTENTION": attention}
    why = [reason]
    if track in GPU_TRACKS:
        rows = rows_that_fit(hardware.memory_bytes)
        if rows < 1:
            raise ProfileError(
                f"{hardware.name} has {hardware.memory_gib:.1f} GiB: not even one row of {track} fits "
                f"({(ROW_BYTES + FIXED_BYTES) / GIB:.1f} GiB with weights and optimizer). Use the cpu track here")
        values["DEVICE_BATCH_SIZE"] = rows
        why.append(f"DEVICE_BATCH_SIZE {rows}: about {(FIXED_BYTES + rows * ROW_BYTES) / GIB:.0f} GiB at peak of "
                   f"{hardware.memory_gib:.0f} GiB ({MEMORY_MARGIN:.0%} usable); TOTAL_BATCH_SIZE is unchanged, "
                   f"gradient accumulation makes up the rest")
    else:
        why.append(f"the {track} track's own batch (sized for a CPU) is kept")
    return Profile(name=name or profile_name(hardware), device=hardware.describe(), hyperparameters=values, why=why)


def rows_that_fit(memory_bytes: int) -> int:
    """The largest power of two of reference rows (at most REFERENCE_ROWS) whose peak fits the usable memory."""
    room = (MEMORY_MARGIN * memory_bytes - FIXED_BYTES) / ROW_BYTES
    rows = 1
    while rows * 2 <= min(room, REFERENCE_ROWS):
        rows *= 2
    return rows if room >= 1 else 0


def profile_name(hardware: Hardware) -> str:
    return next((name for name, known in KNOWN_DEVICES.items()
                 if known.backend == hardware.backend and known.name.lower() == hardware.name.lower()),
                hardware.backend if hardware.backend in ("cpu", "mps") else hardware.key)


def default_track() -> str:
    """The track a new tag takes on this machine when none is named: gpu where there is a CUDA GPU, else cpu."""
    from trainer.tracks.hardware import this_machine
    return "gpu" if this_machine().backend == "cuda" else "cpu"
