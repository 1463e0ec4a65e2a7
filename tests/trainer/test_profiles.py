"""Hardware profiles chosen from device descriptions as torch reports them, and what they write into train.py."""

import ast
from pathlib import Path

import pytest

from trainer.tracks.hardware import GIB, Hardware, this_machine
from trainer.tracks.hyperparameters import train_source_for_track
from trainer.tracks.profiles import (
    FIXED_BYTES,
    KNOWN_DEVICES,
    MEMORY_MARGIN,
    REFERENCE_ROWS,
    ROW_BYTES,
    ProfileError,
    choose_profile,
    profile_for,
    rows_that_fit,
)

TRAIN = (Path(__file__).resolve().parents[2] / "trainer" / "train.py").read_text()

# (device, attention, rows on the gpu track): the rows follow from each card's memory, the kernel from its
# architecture (FA3 is Hopper's; sm_120 takes SDPA; ROCm and Apple take SDPA).
EXPECTED = {
    "h100": ("fa3", 128), "h200": ("fa3", 128), "a100-80gb": ("flex", 128), "a100-40gb": ("flex", 64),
    "l4": ("flex", 32), "rtx-4090": ("flex", 32), "rtx-3090": ("flex", 32), "rtx-5090": ("sdpa", 64),
    "a10g": ("flex", 32), "mi300x": ("sdpa", 128), "mps": ("sdpa", 32), "cpu": ("sdpa", 32),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_known_device_gets_its_kernel_and_the_rows_its_memory_holds(name):
    attention, rows = EXPECTED[name]
    profile = choose_profile(KNOWN_DEVICES[name], "gpu", name)
    assert profile.hyperparameters == {"ATTENTION": attention, "DEVICE_BATCH_SIZE": rows}
    usable = MEMORY_MARGIN * KNOWN_DEVICES[name].memory_bytes
    assert FIXED_BYTES + rows * ROW_BYTES <= usable  # fits with the margin
    assert rows == REFERENCE_ROWS or FIXED_BYTES + 2 * rows * ROW_BYTES > usable  # and twice as many would not
    assert any(f"DEVICE_BATCH_SIZE {rows}" in why for why in profile.why)


def test_a_gpu_without_bfloat16_is_refused_with_the_reason_and_what_to_do():
    with pytest.raises(ProfileError, match=r"Tesla T4 has compute capability 7\.5: .*bfloat16.*8\.0.*cpu track"):
        choose_profile(KNOWN_DEVICES["t4"], "gpu")
    with pytest.raises(ProfileError, match="compute capability 7.5"):
        profile_for("cpu", name="t4")  # whatever the track: its runs would train in bf16 on it


def test_a_card_too_small_for_one_row_is_refused_and_small_tracks_keep_their_own_batch():
    tiny = Hardware(backend="cuda", name="NVIDIA Tiny", memory_bytes=2 * GIB, capability="8.6")
    with pytest.raises(ProfileError, match="not even one row of gpu fits"):
        choose_profile(tiny, "gpu")
    assert choose_profile(tiny, "cpu").hyperparameters == {"ATTENTION": "flex"}
    assert rows_that_fit(24 * GIB) == 32 and rows_that_fit(16 * GIB) == 32 and rows_that_fit(12 * GIB) == 16
    assert rows_that_fit(10_000 * GIB) == REFERENCE_ROWS


def test_an_unknown_profile_name_is_refused_naming_the_known_ones():
    with pytest.raises(ProfileError, match="no profile named 'h300': choose one of h100, h200"):
        profile_for("gpu", name="h300")


def test_this_machine_gets_the_cpu_profile_and_a_gpu_track_here_keeps_the_reference():
    here = this_machine()
    assert here.backend == "cpu" and here.cores and here.memory_bytes > 0 and here.torch
    cpu = profile_for("cpu", here)
    assert cpu.name == "cpu" and cpu.hyperparameters == {"ATTENTION": "sdpa"}
    gpu = profile_for("gpu", here)
    assert gpu.name == "h100" and gpu.hyperparameters == {"ATTENTION": "fa3", "DEVICE_BATCH_SIZE": 128}
    assert "no GPU on this machine" in gpu.why[0] and "--profile" in gpu.why[0]


def test_a_rocm_device_is_named_rocm_and_an_unlisted_card_by_its_key():
    mi = KNOWN_DEVICES["mi300x"]
    assert "gfx942" in mi.describe() and mi.key == "rocm-amd-instinct-mi300x-x1"
    other = Hardware(backend="cuda", name="NVIDIA RTX A5000", memory_bytes=24 * GIB, capability="8.6", count=2)
    profile = choose_profile(other, "gpu")
    assert profile.name == "cuda-nvidia-rtx-a5000-x2" and "sm_86" in profile.device and " x2 " in profile.device


def block_values(source: str) -> dict:
    return {node.targets[0].id: eval(ast.unparse(node.value), {"__builtins__": {}}) for node in ast.parse(source).body
            if isinstance(node, ast.Assign) and node.targets[0].id in ("ATTENTION", "DEVICE_BATCH_SIZE",
                                                                       "TOTAL_BATCH_SIZE")}


def test_a_profile_changes_the_layout_in_train_py_and_never_the_tokens_of_a_step():
    reference = block_values(train_source_for_track(TRAIN, "gpu"))
    profile = choose_profile(KNOWN_DEVICES["rtx-4090"], "gpu")
    written = block_values(train_source_for_track(TRAIN, "gpu", profile.hyperparameters))
    assert written == {"ATTENTION": "flex", "DEVICE_BATCH_SIZE": 32, "TOTAL_BATCH_SIZE": reference["TOTAL_BATCH_SIZE"]}
    assert reference["TOTAL_BATCH_SIZE"] % (32 * 2048) == 0  # 8 accumulation steps make up the reference's step
