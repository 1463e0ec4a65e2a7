"""train.py's attention on CPU: every kernel against the reference window, the FlashAttention-3
selection with stand-in kernel modules, the start-up agreement check, and the compile counters."""

import ast
import types
import warnings
from pathlib import Path

import pytest
import torch

TRAINER = Path(__file__).resolve().parents[2] / "trainer"


def reference_allowed(T: int, window: int) -> torch.Tensor:
    """The reference's pattern, FA3's window_size=(window, 0): key j is visible to query i iff
    i - window <= j <= i, i.e. window + 1 keys including the query itself."""
    return torch.tensor([[i - window <= j <= i for j in range(T)] for i in range(T)])


def masked_attention(q, k, v, allowed, p_dtype=torch.float32):
    """Softmax attention over the allowed keys, in float32; p_dtype rounds the probabilities before
    they meet V, as FlashAttention does in bf16."""
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float()) * q.size(-1) ** -0.5
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return torch.einsum("bhqk,bkhd->bqhd", weights.to(p_dtype).float(), v.float())


def fa3_allowed(T: int, causal: bool, window_size: tuple[int, int]) -> torch.Tensor:
    """FA3's documented convention: query i sees keys i - left .. i + right (-1: unbounded), j <= i if causal."""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    left, right = window_size
    allowed = torch.ones(T, T, dtype=torch.bool)
    if left >= 0:
        allowed &= j >= i - left
    if right >= 0:
        allowed &= j <= i + right
    if causal:
        allowed &= j <= i
    return allowed


class FakeFlash:
    """A stand-in flash_attn_func with FA3's signature and convention, computing in bf16 like the real one."""

    def __init__(self, window_shift=0, returns_lse=False):
        self.window_shift = window_shift  # -1 counts the window one key short, as train.py once did
        self.returns_lse = returns_lse
        self.calls = []

    def __call__(self, q, k, v, causal=False, window_size=(-1, -1)):
        self.calls.append((q.size(1), window_size))
        left = window_size[0] + self.window_shift if window_size[0] >= 0 else -1
        out = masked_attention(q, k, v, fa3_allowed(q.size(1), causal, (left, window_size[1])),
                               p_dtype=torch.bfloat16).to(q.dtype)
        return (out, torch.zeros(())) if self.returns_lse else out


def hub(modules: dict):
    """A get_kernel stand-in: the module registered for a repo, or the error the hub gives for it."""
    calls = []

    def get_kernel(repo, version=None, trust_remote_code=False):
        calls.append((repo, version, trust_remote_code))
        found = modules[repo]
        if isinstance(found, Exception):
            raise found
        return found
    get_kernel.calls = calls
    return get_kernel


OFFLINE = OSError("Cannot reach https://huggingface.co: offline mode is enabled")
HOPPER, AMPERE = (9, 0), (8, 0)
CPU = torch.device("cpu")


@pytest.mark.parametrize("window", [1, 7, 32, 63, 64])
def test_every_kernel_follows_the_reference_window(train, window):
    T = 64
    q, k, v = torch.randn(3, 2, T, 3, 16, generator=torch.Generator().manual_seed(3)).unbind(0)
    allowed = reference_allowed(T, window)
    i = torch.arange(T)
    assert torch.equal(train.visible(i[:, None], i[None, :], window), allowed)  # the flex block-mask predicate
    assert allowed.sum(-1).max() == min(window + 1, T)
    expected = masked_attention(q, k, v, allowed)
    assert torch.allclose(train.sdpa_attention(q, k, v, window), expected, atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex_attention warns when it runs uncompiled, as here on CPU
        flex = train.make_flex_attention(T, [window], CPU)
        assert torch.allclose(flex(q, k, v, window), expected, atol=1e-5)
    flash = FakeFlash()
    fa3 = train.load_flash_attention_3("kernels-community/flash-attn3", hub({"kernels-community/flash-attn3":
                                                                           types.SimpleNamespace(flash_attn_func=flash)}))
    assert torch.allclose(fa3(q, k, v, window), masked_attention(q, k, v, allowed, torch.bfloat16), atol=1e-5)
    assert flash.calls == [(T, (window, 0) if window < T - 1 else (-1, 0))]


def test_reference_shapes_give_half_the_sequence_plus_one_key(train):
    config = train.GPTConfig(sequence_len=2048, vocab_size=8192, n_layer=8, n_head=4, n_embd=512,
                             window_pattern="SSSL")
    assert train.layer_windows(config) == [1024, 1024, 1024, 2048, 1024, 1024, 1024, 2048]
    mask = train.banded_causal_mask(2048, 1024, CPU)
    assert mask.sum(-1).max() == 1025 and mask[2047, 1023] and not mask[2047, 1022]


def test_the_model_gives_the_same_logits_with_every_kernel(train):
    config = train.GPTConfig(sequence_len=32, vocab_size=64, n_layer=4, n_head=2, n_embd=64, window_pattern="SSSL")
    fa3 = train.load_flash_attention_3("r", hub({"r": types.SimpleNamespace(flash_attn_func=FakeFlash())}))
    with warnings.catch_warnings(), torch.no_grad():  # FlexAttention has no backward on CPU
        warnings.simplefilter("ignore")
        kernels = [None, train.make_flex_attention(32, train.layer_windows(config), CPU), fa3]
        models = [train.build_model(config, attend=attend).eval() for attend in kernels]
        generator = torch.Generator().manual_seed(5)
        weights = {name: torch.randn(p.shape, generator=generator) * 0.3 for name, p in models[0].named_parameters()}
        idx = torch.randint(0, 64, (2, 32), generator=generator)
        logits = []
        for model in models:
            model.load_state_dict(weights, strict=False)
            logits.append(model(idx))
    assert torch.allclose(logits[0], logits[1], atol=1e-4)
    assert torch.allclose(logits[0], logits[2], atol=0.1)  # the stand-in rounds probabilities to bf16
    assert (logits[0] - logits[2]).abs().max() > 0  # and it did run


def test_hopper_falls_back_to_the_community_build_and_says_why(train):
    community = FakeFlash()
    get_kernel = hub({"varunneal/flash-attention-3": OFFLINE,
                      "kernels-community/flash-attn3": types.SimpleNamespace(flash_attn_func=community)})
    name, attend, skipped = train.choose_attention(CPU, 64, [32, 64], get_kernel, capability=HOPPER)
    assert name == "fa3 kernels-community/flash-attn3"
    assert [repo for repo, _, _ in get_kernel.calls] == ["varunneal/flash-attention-3", "kernels-community/flash-attn3"]
    assert all(version == 1 and trust == [repo] for repo, version, trust in get_kernel.calls)
    assert skipped == ["varunneal/flash-attention-3: OSError: Cannot reach https://huggingface.co: offline mode "
                       "is enabled"]
    q, k, v = torch.randn(3, 1, 64, 2, 16).bfloat16().unbind(0)
    assert torch.equal(attend(q, k, v, 32), community(q, k, v, causal=True, window_size=(32, 0)))


def test_the_reference_layout_flash_attn_interface_is_found(train):
    varunneal = FakeFlash(returns_lse=True)  # the function sits one level down and returns (out, lse)
    module = types.SimpleNamespace(flash_attn_interface=types.SimpleNamespace(flash_attn_func=varunneal))
    get_kernel = hub({"varunneal/flash-attention-3": module})
    name, attend, skipped = train.choose_attention(CPU, 64, [32, 64], get_kernel, capability=HOPPER)
    assert (name, skipped) == ("fa3 varunneal/flash-attention-3", [])
    q, k, v = torch.randn(3, 1, 64, 2, 16).bfloat16().unbind(0)
    assert attend(q, k, v, 64).shape == q.shape


def test_a_kernel_that_disagrees_or_lacks_the_function_leaves_flex(train):
    get_kernel = hub({"kernels-community/flash-attn3": types.SimpleNamespace(flash_attn_func=FakeFlash(-1))})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        name, attend, skipped = train.choose_attention(CPU, 64, [32, 64], get_kernel, capability=AMPERE)
        assert name == "flex" and len(skipped) == 1
        assert skipped[0].startswith("kernels-community/flash-attn3: RuntimeError: relative error")
        q, k, v = torch.randn(3, 1, 64, 2, 16).unbind(0)
        assert torch.allclose(attend(q, k, v, 32), masked_attention(q, k, v, reference_allowed(64, 32)), atol=1e-5)

    empty = hub({"kernels-community/flash-attn3": types.SimpleNamespace(flash_attn_combine=print)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        name, _, skipped = train.choose_attention(CPU, 64, [64], empty, capability=AMPERE)
    assert name == "flex"
    assert "has neither flash_attn_func nor flash_attn_interface.flash_attn_func" in skipped[0]


def test_without_the_kernels_package_both_builds_are_skipped(train):
    def no_package(repo, **_):
        raise ModuleNotFoundError("No module named 'kernels'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        name, _, skipped = train.choose_attention(CPU, 64, [64], no_package, capability=HOPPER)
    assert name == "flex" and [s.split(":")[0] for s in skipped] == list(train.FLASH_ATTENTION_REPOS[9])
    assert all("No module named 'kernels'" in s for s in skipped)
    assert train.choose_attention(CPU, 64, [64]) == ("sdpa-banded", train.sdpa_attention, [])


def test_the_profile_s_kernel_is_taken_without_asking_the_hub(train):
    get_kernel = hub({})  # a hub asked for anything would raise
    assert train.choose_attention(CPU, 64, [64], get_kernel, capability=(12, 0), wanted="sdpa") == (
        "sdpa-banded", train.sdpa_attention, [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        name, attend, skipped = train.choose_attention(CPU, 64, [32, 64], get_kernel, capability=AMPERE,
                                                       wanted="flex")
    assert (name, skipped, get_kernel.calls) == ("flex", [], [])
    q, k, v = torch.randn(3, 1, 64, 2, 16).unbind(0)
    assert torch.allclose(attend(q, k, v, 32), masked_attention(q, k, v, reference_allowed(64, 32)), atol=1e-5)
    with pytest.raises(ValueError, match="ATTENTION must be fa3, flex or sdpa, not 'flash'"):
        train.choose_attention(CPU, 64, [64], get_kernel, capability=HOPPER, wanted="flash")


def test_the_agreement_check_passes_bf16_rounding_and_catches_one_key(train):
    faithful = train.load_flash_attention_3("r", hub({"r": types.SimpleNamespace(flash_attn_func=FakeFlash())}))
    one_short = train.load_flash_attention_3("r", hub({"r": types.SimpleNamespace(flash_attn_func=FakeFlash(-1))}))
    one_over = train.load_flash_attention_3("r", hub({"r": types.SimpleNamespace(flash_attn_func=FakeFlash(+1))}))
    assert train.attention_error(faithful, CPU, 256, [128, 256]) < train.ATTENTION_TOLERANCE / 3
    assert train.attention_error(one_short, CPU, 256, [128, 256]) > 10 * train.ATTENTION_TOLERANCE
    assert train.attention_error(one_over, CPU, 256, [128, 256]) > 10 * train.ATTENTION_TOLERANCE
    # What an absolute limit of 2e-2 between two bf16 kernels tripped on: outputs between 4 and 8 are a
    # bf16 step (0.031) apart. Against float32, rounding costs half a step, a small relative error at any size.
    step = 4 * torch.finfo(torch.bfloat16).eps
    reference = torch.linspace(4, 7.99, 4096)
    rounded = reference.bfloat16().float()
    assert step > 2e-2 and (rounded - reference).abs().max() <= step / 2
    assert ((rounded - reference).norm() / reference.norm()).item() < train.ATTENTION_TOLERANCE / 3


def test_compile_report_counts_graph_breaks_and_recompiles(train):
    def breaks_once(x):
        y = x * 2
        print("a side effect that torch.compile cannot trace")
        return y + 1

    breaks_before, recompiles_before, _ = train.compile_report()
    compiled = torch.compile(breaks_once, backend="eager", dynamic=False)
    compiled(torch.ones(3))
    compiled(torch.ones(3))  # same shape: no new compile
    breaks, recompiles, reasons = train.compile_report()
    assert (breaks - breaks_before, recompiles - recompiles_before) == (1, 0)
    compiled(torch.ones(4))  # a new shape under dynamic=False compiles both halves again
    breaks, recompiles, reasons = train.compile_report()
    assert recompiles - recompiles_before == 2
    assert any(r.startswith("graph break: ") and "print" in r for r in reasons)
    assert any(r.startswith("recompile: ") and "size mismatch" in r for r in reasons)


def test_expandable_segments_are_asked_for_before_torch_is_imported():
    tree = ast.parse((TRAINER / "train.py").read_text())
    first_torch = min(node.lineno for node in tree.body if isinstance(node, ast.Import)
                      and any(alias.name == "torch" for alias in node.names))
    setting = [node for node in tree.body if isinstance(node, ast.If) and "ALLOC_CONF" in ast.unparse(node)]
    assert len(setting) == 1 and setting[0].lineno < first_torch
    code = compile(ast.Module(body=setting, type_ignores=[]), "train.py", "exec")
    for before, after in (({}, {"PYTORCH_ALLOC_CONF": "expandable_segments:True",
                                 "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
                          ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}, None)):  # the user's own stays
        environ = dict(before)
        exec(code, {"os": types.SimpleNamespace(environ=environ)})
        assert environ == (after or before)
