"""The gfx1250 preset's TDM in Inductor's own kernels (targets.amd.INDUCTOR_TDM): pointwise, a persistent
and a looped row reduction, FlexAttention forward and decode (score_mod + causal block mask).

Inductor generates each kernel as it would on an MI450 (``testing.gfx1250_inductor``: its device probe
answered in this test only), with the preset's patches and without them:
- tier I: the TDM kernel compiles for gfx1250 with ``tensor_load_to_lds`` / ``s_wait_tensorcnt`` (and
  ``v_wmma`` for flex), the same kernel without the patches has none;
- tier C: both variants, run by Inductor's own wrapper on CPU tensors in Triton's interpreter, match the
  plain-torch references of ``inductor_ext.kernels`` on several shapes, odd and non-contiguous ones included.
"""

from __future__ import annotations

import os
import sys

if "triton" not in sys.modules:  # Triton picks its interpreter at first import (see conftest.py)
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from inductor_ext import presets  # noqa: E402
from inductor_ext.targets import amd  # noqa: E402
from inductor_ext.testing import gfx1250_inductor as gi  # noqa: E402
from inductor_ext.testing import isa  # noqa: E402

FACTS = amd.INSTRUCTIONS["gfx1250"]
TDM = [FACTS["tdm_load"], FACTS["tdm_store"], FACTS["tdm_wait"]]
PER_LANE = [r"buffer_load", r"buffer_store"]
# flex decoding splits the keys over 2 x CUs / (batch x kv heads) programs: with the MI450's 256 CUs
# that is 512 programs, too many for the interpreter; tier C generates it for an 8-CU part (same body).
SMALL_PART = {"multi_processor_count": 8}


# ------------------------------------------------------------------------ preset and device probe


def test_gfx1250_preset_turns_on_inductors_tdm_paths() -> None:
    config = presets.resolve({"preset": "gfx1250"})
    assert config.inductor == amd.INDUCTOR_TDM
    user = presets.resolve({"preset": "gfx1250", "inductor": {"triton.use_tensor_descriptor": False}})
    assert user.inductor["triton.use_tensor_descriptor"] is False  # the user's key wins...
    assert user.inductor["assume_aligned_inputs"] is True  # ...one by one
    assert presets.resolve({"preset": "gfx950"}).inductor == {}


def test_device_probe_is_answered_only_inside_the_context() -> None:
    """Inductor's gfx1250 gate says yes under gfx1250_device() with the preset's patches, no without
    them, and no again afterwards: the user path on this machine never sees a gfx1250."""
    from torch._inductor import config as inductor_config
    from torch._inductor import utils

    from torch.utils._triton import has_triton

    cuda = torch.device("cuda", 0)
    assert not has_triton()  # asked before on this CPU-only machine: memoized "no GPU Triton"
    with inductor_config.patch(amd.INDUCTOR_TDM):
        assert not utils.use_gfx1250_descriptor_codegen(cuda)
        with gi.gfx1250_device():
            assert has_triton()  # the memoized answer is asked again inside...
            assert utils.use_gfx1250_descriptor_codegen(cuda)
            with inductor_config.patch(gi.TDM_OFF):
                assert not utils.use_gfx1250_descriptor_codegen(cuda)
        assert not utils.use_gfx1250_descriptor_codegen(cuda)
    assert not has_triton()  # ...and again after it
    assert torch.version.hip is None and utils._rocm_version_tuple() == (0, 0)
    with pytest.raises(ValueError, match="unknown device properties"):
        with gi.gfx1250_device(cus=8):
            pass


def test_attention_reference_is_sdpa() -> None:
    """kernels.attention (the flex reference above) against ATen's SDPA: causal, GQA, odd lengths."""
    from inductor_ext.kernels.attention import attention_reference

    gen = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(2, 4, 37, 16, generator=gen), torch.randn(2, 2, 37, 16, generator=gen), \
        torch.randn(2, 2, 37, 16, generator=gen)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    got = attention_reference(q, k, v, mask_mod=lambda b, h, qi, ki: qi >= ki)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    biased = attention_reference(q, k, v, score_mod=lambda s, b, h, qi, ki: s + h, mask_mod=lambda b, h, qi, ki: qi >= ki)
    torch.testing.assert_close(biased, want)  # a per-head constant cancels in softmax
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        attention_reference(q[:, :3], k, v)


# ------------------------------------------------------------------------------- tier I ISA


@pytest.fixture(scope="module")
def generated() -> dict[tuple[str, bool], gi.GeneratedGraph]:
    """Each kind's default example generated once per module, with the TDM patches and without."""
    out = {}
    for kind in gi.KINDS:
        ex = gi.example(kind)
        for tdm in (True, False):
            out[kind, tdm] = gi.generate(ex.fn, *ex.inputs, tdm=tdm)
    return out


@pytest.fixture(scope="module")
def compiled(generated: dict[tuple[str, bool], gi.GeneratedGraph], isa_cache: str | None) -> dict:
    keys = sorted(generated)
    jobs = [(gi.kernel_source(gi.main_kernel(generated[key], key[0])), "gfx1250") for key in keys]
    return dict(zip(keys, isa.compile_many(jobs, cache=isa_cache)))


@pytest.mark.isa
@pytest.mark.parametrize("kind", gi.KINDS)
def test_isa_tdm_only_with_the_preset(compiled: dict, generated: dict, kind: str) -> None:
    ex = gi.example(kind)
    with_tdm, without = compiled[kind, True], compiled[kind, False]
    assert gi.main_kernel(generated[kind, True], kind).uses_tdm
    assert not any(k.uses_tdm for k in generated[kind, False].kernels.values())
    counts = isa.assert_has_instructions(with_tdm, "gfx1250", ex.key_instructions())
    plain = isa.instruction_counts(without, "gfx1250", TDM + PER_LANE)
    assert plain[FACTS["tdm_load"]] == plain[FACTS["tdm_wait"]] == plain[FACTS["tdm_store"]] == 0, plain
    assert plain[r"buffer_load"] > 0, plain  # the same loads, per lane
    moved = isa.instruction_counts(with_tdm, "gfx1250", PER_LANE)
    if kind.startswith("flex"):
        # Q, K and V by TDM; what stays per lane is the block-mask indices (int32, not a TDM dtype)
        assert moved[r"buffer_load"] < plain[r"buffer_load"], (moved, plain)
        assert counts[FACTS[ex.facts[-1]]] == isa.instruction_counts(without, "gfx1250", [FACTS[ex.facts[-1]]])[
            FACTS[ex.facts[-1]]]  # the same v_wmma work either way
    else:
        assert moved == {r"buffer_load": 0, r"buffer_store": 0}, moved  # every access moved to TDM


def test_no_tdm_for_dtypes_it_does_not_take() -> None:
    """Inductor's dtype rule (fp16/bf16/fp32 only), which the preset relies on: int8 and fp8 tensors
    stay per-lane loads and stores under the same patches."""
    for dtype in (torch.int8, torch.float8_e4m3fn):
        x = torch.zeros(64, 256, dtype=dtype)
        graph = gi.generate(lambda a, b: (a.float() + b.float()).to(a.dtype), x, x)
        assert not any(k.uses_tdm for k in graph.kernels.values()), dtype


# ---------------------------------------------------------------------- tier C interpreter

TIER_C = [
    ("pointwise", torch.bfloat16, {}),
    ("pointwise", torch.float16, {"m": 1, "n": 40}),  # one row
    ("pointwise", torch.float32, {"m": 3, "n": 4}),  # 16-byte rows: the smallest a descriptor takes
    ("rms_norm", torch.bfloat16, {}),
    ("rms_norm", torch.float32, {"m": 1, "n": 1000}),
    ("softmax", torch.bfloat16, {}),
    ("softmax", torch.float16, {"m": 3, "n": 2500}),  # the row's tail is not a multiple of R0_BLOCK
    ("flex_forward", torch.bfloat16, {}),
    ("flex_forward", torch.float16, {"lq": 200, "lkv": 200}),  # partial last blocks
    ("flex_decode", torch.bfloat16, {}),
]
TOL = {torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2), torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.float32: dict(rtol=1e-5, atol=1e-5)}


# every shape with TDM; the variant without it (Inductor's usual kernels) on each kind's default shape
RUNS = [(*case, True) for case in TIER_C] + [(*case, False) for case in TIER_C if not case[2]]


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("kind,dtype,sizes,tdm", RUNS, ids=[
    f"{k}-{str(d)[6:]}-{'x'.join(map(str, s.values())) or 'default'}-{'tdm' if t else 'no_tdm'}" for k, d, s, t in RUNS])
def test_interp_matches_reference(kind: str, dtype: torch.dtype, sizes: dict[str, int], tdm: bool) -> None:
    from inductor_ext.runtime.triton_interp import interpreter_fixes

    ex = gi.example(kind, dtype, **sizes)
    graph = gi.generate(ex.fn, *ex.inputs, tdm=tdm, properties=SMALL_PART if kind == "flex_decode" else None)
    assert gi.main_kernel(graph, kind).uses_tdm == tdm
    with interpreter_fixes():
        (out,) = gi.run(graph, *ex.inputs)
    want = ex.reference(*ex.inputs)
    assert out.dtype == want.dtype == dtype
    torch.testing.assert_close(out, want, **TOL[dtype])


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
def test_interp_padded_rows() -> None:
    """Inputs whose rows are longer than their width (stride 128, width 96): Inductor flattens the
    pointwise kernel to one dimension, where a padded row is no descriptor (``x % 96`` indexing), so
    the loads stay per lane and only the contiguous output goes by TDM; the numbers are exact either way."""
    from inductor_ext.runtime.triton_interp import interpreter_fixes

    gen = torch.Generator().manual_seed(1)
    x, b = (torch.randn(37, 128, generator=gen).to(torch.bfloat16)[:, :96] for _ in range(2))
    graph = gi.generate(lambda x, b: x * 2 + b, x, b)
    kernel = gi.main_kernel(graph, "pointwise")
    assert "tl.load(in_ptr0 + (x0 + 128*x1)" in kernel.body and "tl.make_tensor_descriptor(out_ptr0" in kernel.body
    with interpreter_fixes():
        (out,) = gi.run(graph, x, b)
    torch.testing.assert_close(out, (x.float() * 2 + b.float()).to(torch.bfloat16), rtol=0, atol=0)


# ------------------------------------------------------------------------- inductor-ext asm


@pytest.mark.isa
def test_asm_cli_shows_inductors_tdm_kernels(isa_cache: str | None) -> None:
    from inductor_ext.cli import asm

    rows = {line.split()[0]: line.split()[1:] for line in asm.listing().splitlines()}
    assert all(rows[f"inductor.{kind}"] == ["gfx1250", "[inductor", "codegen]"] for kind in gi.KINDS), rows
    result = asm.build("inductor.pointwise", "gfx1250")
    assert result["kernel"] == "triton_poi_fused_0" and "tl.make_tensor_descriptor" in result["source"]
    counts = result["key_instructions"]["amdgcn"]
    assert set(counts) == set(TDM) and all(counts.values()), counts
    with pytest.raises(asm.AsmError, match="shown for gfx1250, not 'gfx950'"):
        asm.build("inductor.pointwise", "gfx950")
    with pytest.raises(asm.AsmError, match="float16"):
        asm.build("inductor.flex_forward", "gfx1250", dtype="float32")
    with pytest.raises(asm.AsmError, match="kinds: inductor.pointwise"):
        asm.build("inductor.conv", "gfx1250")
