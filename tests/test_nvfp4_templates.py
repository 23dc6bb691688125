"""The NVFP4 GEMM templates, in three tiers:
inductor_ext/templates/triton/nvfp4_gemm.py (Blackwell, native block16 MMA) and
inductor_ext/templates/triton/nvfp4_dequant_gemm.py (Hopper, weights decoded on chip to bf16/fp16).

- G golden: rendered standalone modules and the Inductor template texts are snapshots under
  tests/golden/triton_nvfp4/ (rewrite them with ``EXPECTTEST_ACCEPT=1 pytest tests/test_nvfp4_templates.py``).
- I ISA (``-m isa``): nvfp4_gemm compiled for sm_100a must drive the tensor cores with
  ``tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16`` and nothing else;
  nvfp4_dequant_gemm compiled for sm_90a with ``wgmma.mma_async ... .f32.bf16.bf16`` (``.f16.f16``
  for fp16 activations). Compiles are cached (pytest's cache, or $INDUCTOR_EXT_ISA_CACHE).
- C CPU-executed (``-m interp``): ``run()`` in Triton's interpreter, with our interpreter fixes,
  against ``kernels.scaled_gemm.scaled_mm_reference``; and the Inductor template text, expanded
  with stand-ins for Inductor's macros, run the same way.

Triton chooses between its interpreter and its compiler when ``triton.language`` is first
imported, so ``TRITON_INTERPRET=1`` is set here before anything imports triton; ISA compiles then
run in a subprocess without it (``inductor_ext.testing.isa`` does that by itself).
"""

from __future__ import annotations

import os
import sys

if "triton" not in sys.modules:  # must precede every import of triton (see the module docstring)
    os.environ["TRITON_INTERPRET"] = "1"

import dataclasses  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from inductor_ext.kernels.nvfp4 import NVFP4Tensor, quantize_nvfp4  # noqa: E402
from inductor_ext.kernels.scaled_gemm import scaled_mm_reference  # noqa: E402
from inductor_ext.templates.base import KernelSource, Tile  # noqa: E402
from inductor_ext.templates.triton import nvfp4_dequant_gemm as dq  # noqa: E402
from inductor_ext.templates.triton import nvfp4_gemm as fp4  # noqa: E402
from inductor_ext.testing import golden, isa  # noqa: E402

P4, C4 = fp4.Nvfp4GemmProblem, fp4.Nvfp4GemmConfig
PD, CD = dq.Nvfp4DequantGemmProblem, dq.Nvfp4DequantGemmConfig

# ----------------------------------------------------------------------------- tier G golden

GOLDEN_DIR = Path(__file__).parent / "golden" / "triton_nvfp4"


def assert_golden(name: str, actual: str) -> None:
    golden.assert_golden(GOLDEN_DIR, name, actual)


_snapshot = golden.snapshot


GOLDEN_RENDERS = {
    # interpreter config, K tail masked (160 % 128 != 0), plain scales, no epilogue extras
    "fp4_bf16_17x40x160_cpu": (fp4, P4(17, 40, 160), "cpu"),
    # Blackwell's first config for a big problem: swizzled scales, bias, erf GELU
    "fp4_bf16_bias_gelu_blocked_512x512x512_sm_100a":
        (fp4, P4(512, 512, 512, bias=True, activation="gelu", scale_layout="blocked"), "sm_100a"),
    # decode (M = 1): the swap-AB config, fp16 out with an fp32 bias
    "fp4_fp16_bias_fp32_silu_1x4096x4096_sm_100a":
        (fp4, P4(1, 4096, 4096, "float16", bias=True, bias_dtype="float32", activation="silu"), "sm_100a"),
    # weight-only NVFP4 with bf16 activations in the interpreter, K tail masked
    "dq_abf16_17x40x160_cpu": (dq, PD(17, 40, 160), "cpu"),
    # Hopper's first config, bias and tanh GELU
    "dq_abf16_bias_gelu_tanh_512x512x512_sm_90a":
        (dq, PD(512, 512, 512, bias=True, activation="gelu_tanh"), "sm_90a"),
    # NVFP4 activations too, swizzled scales, decode (swap-AB) config
    "dq_anvfp4_blocked_1x4096x4096_sm_90a": (dq, PD(1, 4096, 4096, "nvfp4", scale_layout="blocked"), "sm_90a"),
    # decode with programmatic dependent launch: USE_PDL and the launch_pdl compile option
    "fp4_bf16_pdl_16x4096x4096_sm_100a": (fp4, P4(16, 4096, 4096, use_pdl=True), "sm_100a"),
    "dq_abf16_pdl_16x4096x4096_sm_90a": (dq, PD(16, 4096, 4096, use_pdl=True), "sm_90a"),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_RENDERS))
def test_render_golden(case: str) -> None:
    module, problem, target = GOLDEN_RENDERS[case]
    ks = module.render(problem, module.configs(problem, target)[0], target)
    assert ks.template == module.NAME
    assert_golden(case, _snapshot(ks))


@pytest.mark.parametrize("module", [fp4, dq], ids=["fp4", "dq"])
def test_inductor_source_golden(module: ModuleType) -> None:
    text = module.inductor_source()
    assert_golden(f"inductor_source_{module.__name__.rsplit('.', 1)[1]}", text)
    assert f"    # inductor_ext template: {module.NAME}\n" in text
    # What the golden files pin is what Inductor compiles: one body and epilogue shared by both frames.
    problem = P4(8, 8, 64) if module is fp4 else PD(8, 8, 64)
    config = module.configs(problem, "cpu")[0]
    for part in (module.BODY, module.EPILOGUE):
        assert part in text and part in module.render(problem, config).source


def test_golden_files_all_have_a_test() -> None:
    names = {f"{case}.expected" for case in GOLDEN_RENDERS}
    names |= {"inductor_source_nvfp4_gemm.expected", "inductor_source_nvfp4_dequant_gemm.expected"}
    stale = sorted(p.name for p in GOLDEN_DIR.glob("*.expected") if p.name not in names)
    assert not stale, f"golden files no test compares (delete them): {stale}"


# ------------------------------------------------------------------------- refuse_problem / configs


@pytest.mark.parametrize("module,problem,reason", [
    (fp4, P4(16, 16, 40), "K=40 is not a multiple of 16"),
    (fp4, P4(16, 16, 64, activation="tanh"), "activation 'tanh' not in"),
    (fp4, P4(16, 16, 64, out_dtype="float8_e4m3fn"), "out_dtype float8_e4m3fn not in"),
    (fp4, P4(0, 16, 64), "empty problem"),
    (fp4, P4(16, 16, 64, scale_layout="swizzled"), "scale_layout 'swizzled' not in"),
    (dq, PD(16, 16, 24), "K=24 is not a multiple of 16"),
    (dq, PD(16, 16, 64, a_dtype="float32"), "activation dtype float32 not in"),
    (dq, PD(16, 16, 64, bias=True, bias_dtype="int32"), "bias dtype int32 not in"),
], ids=["fp4_k40", "fp4_act", "fp4_out", "fp4_empty", "fp4_layout", "dq_k24", "dq_a_fp32", "dq_bias_int"])
def test_refuse_problem_gives_reasons(module: ModuleType, problem: object, reason: str) -> None:
    assert reason in (module.refuse_problem(problem) or "")
    with pytest.raises(ValueError, match=re.escape(reason)):
        module.render(problem, module.configs(PD(16, 16, 64) if module is dq else P4(16, 16, 64), "cpu")[0])


@pytest.mark.parametrize("module", [fp4, dq], ids=["fp4", "dq"])
def test_configs_render_for_every_target(module: ModuleType) -> None:
    for target in module.TARGETS:
        for m in (1, 17, 64, 512):
            problem = P4(m, 4096, 4096) if module is fp4 else PD(m, 4096, 4096)
            cfgs = module.configs(problem, target)
            assert cfgs, (target, m)
            # decode shapes get the swap-AB config first on the GPU target
            assert cfgs[0].swap_ab == (target != "cpu" and m <= 64), (target, m, cfgs[0])
            for cfg in cfgs:
                module.render(problem, cfg, target)
    with pytest.raises(ValueError, match="sm_80"):
        module.configs(P4(1, 1, 16) if module is fp4 else PD(1, 1, 16), "sm_80")
    assert module.config_from_tile(Tile(64, 64, 64, split_k=2)) is None
    assert module.config_from_tile(Tile(128, 128, 128, swap_ab=True)).swap_ab
    assert module.config_from_tile(Tile(128, 128, 8)) is None  # BLOCK_K too small to pack


@pytest.mark.parametrize("module,problem,config,target,reason", [
    (fp4, P4(512, 512, 512), C4(64, 128, 128), "sm_100a", "64 rows on the MMA's M side (BLOCK_M)"),
    (fp4, P4(1, 512, 512), C4(16, 64, 128, swap_ab=True), "sm_100a", "64 rows on the MMA's M side (BLOCK_N with"),
    (dq, PD(512, 512, 512), CD(32, 128, 128), "sm_90a", "32 rows on the MMA's M side (BLOCK_M)"),
    (dq, PD(1, 512, 512), CD(16, 32, 128, swap_ab=True), "sm_90a", "32 rows on the MMA's M side (BLOCK_N with"),
], ids=["fp4_m64", "fp4_swap_n64", "dq_m32", "dq_swap_n32"])
def test_gpu_tiles_that_fall_back_are_rejected(module: ModuleType, problem: object, config: object, target: str,
                                               reason: str) -> None:
    # Such tiles compile, but not to the MMA the target is claimed for (see test_isa_small_tiles_fall_back).
    with pytest.raises(ValueError, match=re.escape(reason)):
        module.render(problem, config, target)
    module.render(problem, config, "cpu")  # the interpreter has no such limit
    tile = Tile(config.block_m, config.block_n, config.block_k, swap_ab=config.swap_ab)
    assert module.config_from_tile(tile, target) is None
    assert module.config_from_tile(tile) == dataclasses.replace(config, group_m=1 if config.swap_ab else 8)


def test_dequant_blocked_scales_need_block_k_of_64() -> None:
    problem = PD(16, 16, 64, scale_layout="blocked")
    assert "groups of 4" in dq.check_config(CD(16, 16, 32), problem)
    with pytest.raises(ValueError, match="groups of 4"):
        dq.render(problem, CD(16, 16, 32))


# -------------------------------------------------------------------------------- tier I ISA

FP4_ISA = {  # nvfp4_gemm on sm_100a
    "plain_512": (P4(512, 512, 512), None),
    "plain_512_cfg1": (P4(512, 512, 512), 1),  # the second default config (128x64x256)
    "blocked_bias_gelu_512": (P4(512, 512, 512, bias=True, activation="gelu", scale_layout="blocked"), None),
    "decode_m1_swap": (P4(1, 4096, 4096), None),  # configs()[0] is the 16x128x128 swap-AB tile
    "k_tail_160": (P4(512, 512, 160), C4(128, 128, 128, 8, 4, 3)),  # masked K tail
}
FP4_FALLBACK = {"fallback_m64": (P4(512, 512, 512), C4(64, 128, 128, 8, 4, 3))}
DQ_ISA = {  # nvfp4_dequant_gemm on sm_90a
    "abf16_512": (PD(512, 512, 512), None),
    "abf16_512_cfg1": (PD(512, 512, 512), 1),  # the second default config (64x128x64, 4 warps)
    "anvfp4_blocked_bias_silu_512": (PD(512, 512, 512, "nvfp4", bias=True, activation="silu",
                                        scale_layout="blocked"), None),
    "abf16_decode_m1_swap": (PD(1, 4096, 4096), None),
    "afp16_k_tail_160": (PD(512, 512, 160, "float16", "float32"), CD(64, 128, 128, 8, 4, 4)),
}
DQ_FALLBACK = {"fallback_m32": (PD(512, 512, 512), CD(32, 128, 128, 8, 4, 3))}
_BLOCK16_MMA = r"tcgen05\.mma\.cta_group::1\.kind::mxf4nvf4\.block_scale\.block16"


def _wgmma(a_dtype: str) -> str:
    t = "f16" if a_dtype == "float16" else "bf16"
    return rf"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.{t}\.{t}"


def _isa_jobs() -> dict[tuple[str, str], tuple[KernelSource, str, dict[str, int]]]:
    jobs = {}
    for table, module, target in (({**FP4_ISA, **FP4_FALLBACK}, fp4, "sm_100a"),
                                  ({**DQ_ISA, **DQ_FALLBACK}, dq, "sm_90a")):
        for case, (p, cfg) in table.items():
            if cfg is None or isinstance(cfg, int):
                cfg = module.configs(p, target)[cfg or 0]
            # render for "cpu": the fall-back cases are tiles check_config refuses for the GPU target
            ks = module.render(p, cfg, "cpu" if case.startswith("fallback") else target)
            a_cols = p.k if module is dq and p.a_dtype != "nvfp4" else p.k // 2
            hints = isa.launch_hints(ks, {
                "M": p.m, "N": p.n, "K": p.k, "stride_am": a_cols, "stride_ak": 1, "stride_bn": p.k // 2,
                "stride_bk": 1, "stride_asm": p.k // 16, "stride_ask": 1, "stride_bsn": p.k // 16,
                "stride_bsk": 1, "stride_cm": p.n, "stride_cn": 1, "stride_bias": 1 if p.bias else 0})
            jobs[target, case] = (ks, target, hints)
    return jobs


@pytest.fixture(scope="module")
def isa_asm(isa_cache: str | None):
    """Compile every ISA case once, in parallel where possible; a test gets its own error."""
    jobs = _isa_jobs()
    try:
        isa.compile_many([(ks, t, {"hints": h}) for ks, t, h in jobs.values()], cache=isa_cache)
    except isa.IsaCompileError:
        pass  # get() below raises it again in the test that needs the failed kernel

    def get(target: str, case: str) -> dict[str, str]:
        ks, _, hints = jobs[target, case]
        return isa.compile_for_target(ks, target, hints=hints, cache=isa_cache)

    return get


@pytest.mark.isa
@pytest.mark.parametrize("case", list(FP4_ISA))
def test_isa_sm100a_block16_mma(isa_asm, case: str) -> None:
    asm = isa_asm("sm_100a", case)
    counts = isa.assert_has_instructions(asm, "sm_100a", [isa.MMA_INSTRUCTION["sm_100a"], _BLOCK16_MMA])
    # every tensor-core MMA is the native NVFP4 one (no decode to kind::f16, no mxf8f6f4 fallback)
    assert counts[isa.MMA_INSTRUCTION["sm_100a"]] == counts[_BLOCK16_MMA], counts
    isa.assert_has_instructions(asm, "sm_100a", [isa.SASS_MMA_INSTRUCTION["sm_100a"]], key="sass")
    assert "kind::f16" not in asm["ptx"] and "wgmma" not in asm["ptx"]
    # The scale type (ue4m3 for NVFP4, ue8m0 for MX) is not in the mnemonic but in the MMA's
    # instruction descriptor, which Triton derives from the scales' element type: uint8 scales
    # give the same mnemonic with e8m0 semantics. TTGIR shows the type of the scales in tensor memory.
    mmas = [line for line in asm["ttgir"].splitlines() if "ttng.tc_gen5_mma_scaled" in line]
    assert mmas, "no tc_gen5_mma_scaled in the TTGIR"
    for line in mmas:
        assert "lhs = e2m1 rhs = e2m1" in line, line
        assert len(re.findall(r"x\d+xf8E4M3FN, #tmem_scales", line)) == 2, line


@pytest.mark.isa
@pytest.mark.parametrize("case", list(DQ_ISA))
def test_isa_sm90a_wgmma_on_decoded_weights(isa_asm, case: str) -> None:
    asm = isa_asm("sm_90a", case)
    pattern = _wgmma(DQ_ISA[case][0].a_dtype)
    counts = isa.assert_has_instructions(asm, "sm_90a", [isa.MMA_INSTRUCTION["sm_90a"], pattern])
    assert counts[isa.MMA_INSTRUCTION["sm_90a"]] == counts[pattern], counts
    isa.assert_has_instructions(asm, "sm_90a", [isa.SASS_MMA_INSTRUCTION["sm_90a"]], key="sass")
    with pytest.raises(AssertionError, match="no instruction matches"):  # Hopper has no FP4 MMA
        isa.assert_has_instructions(asm, "sm_90a", [r"mxf4|e2m1"])


@pytest.mark.isa
@pytest.mark.parametrize("target,case,mma", [
    ("sm_100a", "fallback_m64", r"tcgen05\.mma\.cta_group::1\.kind::f16"),
    ("sm_90a", "fallback_m32", r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32"),
])
def test_isa_small_tiles_fall_back(isa_asm, target: str, case: str, mma: str) -> None:
    # Why check_config refuses these tiles for the GPU targets: Triton 3.9 compiles them, to
    # another MMA (bf16 emulation of dot_scaled on sm_100a, Ampere mma.sync on sm_90a). When this
    # fails, Triton learnt to do better: relax check_config.
    asm = isa_asm(target, case)
    isa.assert_has_instructions(asm, target, [mma])
    wanted = _BLOCK16_MMA if target == "sm_100a" else isa.MMA_INSTRUCTION["sm_90a"]
    with pytest.raises(AssertionError, match="no instruction matches"):
        isa.assert_has_instructions(asm, target, [wanted])


# ---------------------------------------------------------------------- tier C interpreter


def _gen(*key: int) -> torch.Generator:
    seed = 0
    for k in key:
        seed = seed * 1009 + k
    return torch.Generator().manual_seed(seed)


def _quantized(rows: int, k: int, gen: torch.Generator) -> NVFP4Tensor:
    return quantize_nvfp4(torch.randn(rows, k, generator=gen))


def _wide_range(rows: int, k: int, gen: torch.Generator) -> NVFP4Tensor:
    """Every byte value as codes (so all 16 e2m1 codes, -0 included) and e4m3 scales from the
    subnormals (2**-9) up to 16: what a decoder must get right beyond what quantize_nvfp4 makes."""
    codes = torch.randint(0, 256, (rows, k // 2), dtype=torch.uint8, generator=gen)
    scales = torch.exp2(torch.rand(rows, k // 16, generator=gen) * 13 - 9).to(torch.float8_e4m3fn)
    return NVFP4Tensor(codes, scales, torch.tensor(0.03), torch.Size((rows, k)), torch.float32)


def _row_padded(t: NVFP4Tensor) -> NVFP4Tensor:
    """The same values through non-contiguous views: packed rows inside wider rows (row stride
    K // 2 + 8, offset 4 bytes) and column-major scales."""
    rows, kp = t.qdata.shape
    wide = torch.full((rows, kp + 8), 0x77, dtype=torch.uint8)
    wide[:, 4:4 + kp] = t.qdata
    scales = t.scales.t().contiguous().t()
    q = wide[:, 4:4 + kp]
    assert not q.is_contiguous() and not scales.is_contiguous()
    return NVFP4Tensor(q, scales, t.global_scale, t.shape, t.dtype)


def _reference(a, b, *, alpha, bias, activation, out_dtype) -> torch.Tensor:
    """scaled_mm_reference in fp32 (tanh GELU applied on top, as the reference has the erf form only)."""
    if activation == "gelu_tanh":
        return F.gelu(scaled_mm_reference(a, b, alpha=alpha, bias=bias, out_dtype=torch.float32), approximate="tanh")
    return scaled_mm_reference(a, b, alpha=alpha, bias=bias, activation=activation, out_dtype=torch.float32)


def _assert_matches(out: torch.Tensor, ref: torch.Tensor, out_dtype: torch.dtype) -> None:
    """The kernel rounds its fp32 result once, to nearest even (on a GPU, and in the interpreter
    with the ``bf16_rounding`` fix), while the reference stays fp32: they differ by at most half
    an ulp of the output dtype, 2**-8 relative for bf16 and 2**-11 for fp16, plus fp32
    accumulation-order noise (the atol, 1e-5 of the largest output)."""
    assert out.dtype == out_dtype and out.shape == ref.shape, (out.dtype, out.shape, ref.shape)
    rtol = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 1e-5}[out_dtype]
    scale = ref.abs().max().item()
    assert scale > 0, "degenerate test data"
    torch.testing.assert_close(out.float(), ref, rtol=rtol, atol=1e-5 * scale)


def _check_fp4(m: int, n: int, k: int, *, config: fp4.Nvfp4GemmConfig | None = None, bias: str | None = None,
               activation: str | None = None, alpha: float | None = None, out_dtype=torch.bfloat16,
               scale_layout: str = "plain", a_view=None, data=_quantized) -> None:
    from inductor_ext.runtime.triton_interp import interpreter_fixes

    gen = _gen(m, n, k)
    a, b = data(m, k, gen), data(n, k, gen)
    if a_view is not None:
        a = a_view(a)
    bias_t = None if bias is None else torch.randn(n, generator=gen).to(getattr(torch, bias))
    config = config or fp4.configs(P4(m, n, k), "cpu")[0]
    with interpreter_fixes() as fixes:
        assert "nvfp4_dot_scaled" in fixes, fixes  # stock 3.9 decodes the e4m3 scales as e8m0
        assert "bf16_rounding" in fixes, fixes  # stock 3.9 truncates fp32 -> bf16 (_assert_matches' rtol)
        out = fp4.run(a, b, config, alpha=alpha, bias=bias_t, activation=activation, out_dtype=out_dtype,
                      scale_layout=scale_layout)
    if alpha is None:
        alpha = float(a.global_scale) * float(b.global_scale)
        assert alpha != 1.0
    ref = _reference(a, b, alpha=alpha, bias=bias_t, activation=activation, out_dtype=out_dtype)
    _assert_matches(out, ref, out_dtype)


def _check_dq(m: int, n: int, k: int, *, a_dtype: str = "bfloat16", config: dq.Nvfp4DequantGemmConfig | None = None,
              bias: str | None = None, activation: str | None = None, alpha: float | None = None,
              out_dtype=None, scale_layout: str = "plain", a_transposed: bool = False, data=_quantized) -> None:
    from inductor_ext.runtime.triton_interp import interpreter_fixes

    gen = _gen(m, n, k, 7)
    b = data(n, k, gen)
    if a_dtype == "nvfp4":
        a = data(m, k, gen)
    elif a_transposed:  # a column-major view: stride (1, m)
        a = torch.randn(k, m, generator=gen).to(getattr(torch, a_dtype)).t()
        assert not a.is_contiguous()
    else:
        a = torch.randn(m, k, generator=gen).to(getattr(torch, a_dtype))
    out_dtype = out_dtype or (torch.bfloat16 if a_dtype == "nvfp4" else getattr(torch, a_dtype))
    bias_t = None if bias is None else torch.randn(n, generator=gen).to(getattr(torch, bias))
    config = config or dq.configs(PD(m, n, k, a_dtype), "cpu")[0]
    with interpreter_fixes() as fixes:
        assert "bf16_dot" in fixes, fixes  # stock 3.9 multiplies bf16 bit patterns in tl.dot
        assert "bf16_rounding" in fixes, fixes  # stock 3.9 truncates fp32 -> bf16 (_assert_matches' rtol)
        out = dq.run(a, b, config, alpha=alpha, bias=bias_t, activation=activation, out_dtype=out_dtype,
                     scale_layout=scale_layout)
    if alpha is None:
        alpha = float(b.global_scale) * (float(a.global_scale) if a_dtype == "nvfp4" else 1.0)
    ref = _reference(a, b, alpha=alpha, bias=bias_t, activation=activation, out_dtype=out_dtype)
    _assert_matches(out, ref, out_dtype)


SHAPES = [(m, n, k) for m in (1, 17, 64) for n in (16, 40) for k in (64, 96, 160)]
EPILOGUES = [(act, bias) for act in fp4.ACTIVATIONS for bias in (None, "bfloat16")]
_EPI_IDS = [f"{act or 'none'}{'_bias' if bias else ''}" for act, bias in EPILOGUES]
# numpy warns when sigmoid's exp(-x) overflows to inf for very negative x; the result (0) is right.
_EXP_OVERFLOW = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_interp_fp4_shapes(m: int, n: int, k: int) -> None:
    # the first cpu config has BLOCK_K 128: K 160 runs a masked tail; alpha is not the scales' product
    _check_fp4(m, n, k, alpha=1.5 * 2.0**-20)


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@_EXP_OVERFLOW
@pytest.mark.parametrize("activation,bias", EPILOGUES, ids=_EPI_IDS)
def test_interp_fp4_epilogue(activation: str | None, bias: str | None) -> None:
    _check_fp4(17, 40, 160, activation=activation, bias=bias)  # alpha: the global scales' product


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@_EXP_OVERFLOW
@pytest.mark.parametrize("case", ["a_noncontig", "blocked_cfg1", "fp16_out_fp32_bias", "fp32_out", "swap_m1",
                                  "swap_m17_blocked", "k48", "wide_range", "wide_range_blocked_swap"])
def test_interp_fp4_variants(case: str) -> None:
    swap = C4(16, 32, 64, 1, 4, 1, swap_ab=True)
    kwargs = {
        "a_noncontig": dict(m=17, n=40, k=160, a_view=_row_padded, bias="bfloat16", activation="silu"),
        # B rows cross a 128-row tile of the swizzled layout, A rows several 32-row groups
        "blocked_cfg1": dict(m=64, n=136, k=160, scale_layout="blocked", config=fp4.configs(P4(1, 1, 16), "cpu")[1]),
        "fp16_out_fp32_bias": dict(m=17, n=40, k=96, out_dtype=torch.float16, bias="float32", activation="relu"),
        "fp32_out": dict(m=64, n=16, k=64, out_dtype=torch.float32, activation="gelu"),
        "swap_m1": dict(m=1, n=40, k=160, config=swap, bias="bfloat16"),
        "swap_m17_blocked": dict(m=17, n=40, k=96, config=swap, scale_layout="blocked", activation="gelu_tanh"),
        "k48": dict(m=17, n=16, k=48),  # a multiple of 16, not of 32
        "wide_range": dict(m=17, n=40, k=160, data=_wide_range, out_dtype=torch.float32),
        "wide_range_blocked_swap": dict(m=17, n=40, k=96, data=_wide_range, config=swap, scale_layout="blocked"),
    }[case]
    m, n, k = kwargs.pop("m"), kwargs.pop("n"), kwargs.pop("k")
    _check_fp4(m, n, k, **kwargs)


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("a_dtype", ["bfloat16", "nvfp4"], ids=["abf16", "anvfp4"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_interp_dq_shapes(m: int, n: int, k: int, a_dtype: str) -> None:
    _check_dq(m, n, k, a_dtype=a_dtype, alpha=0.75 * 2.0**-9)


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@_EXP_OVERFLOW
@pytest.mark.parametrize("activation,bias", EPILOGUES, ids=_EPI_IDS)
def test_interp_dq_epilogue(activation: str | None, bias: str | None) -> None:
    _check_dq(17, 40, 160, activation=activation, bias=bias)  # alpha: the weights' global scale


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@_EXP_OVERFLOW
@pytest.mark.parametrize("case", ["a_transposed", "afp16", "afp16_transposed_fp32_out", "anvfp4_epilogue",
                                  "blocked_cfg1", "anvfp4_blocked", "swap_m1", "swap_m17_anvfp4", "k48",
                                  "wide_range", "wide_range_anvfp4_blocked_swap"])
def test_interp_dq_variants(case: str) -> None:
    swap = CD(16, 32, 64, 1, 4, 1, swap_ab=True)
    kwargs = {
        "a_transposed": dict(m=17, n=40, k=160, a_transposed=True, bias="bfloat16", activation="gelu"),
        "afp16": dict(m=17, n=40, k=160, a_dtype="float16", bias="float16", activation="silu"),
        "afp16_transposed_fp32_out": dict(m=64, n=16, k=96, a_dtype="float16", a_transposed=True,
                                          out_dtype=torch.float32),
        "anvfp4_epilogue": dict(m=17, n=40, k=160, a_dtype="nvfp4", bias="float32", activation="gelu_tanh"),
        "blocked_cfg1": dict(m=64, n=40, k=160, scale_layout="blocked", config=dq.configs(PD(1, 1, 16), "cpu")[1]),
        # A rows cross a 128-row tile of the swizzled layout
        "anvfp4_blocked": dict(m=136, n=40, k=160, a_dtype="nvfp4", scale_layout="blocked", activation="relu"),
        "swap_m1": dict(m=1, n=40, k=160, config=swap, bias="bfloat16"),
        "swap_m17_anvfp4": dict(m=17, n=40, k=96, a_dtype="nvfp4", config=swap, activation="silu"),
        "k48": dict(m=17, n=16, k=48, a_dtype="nvfp4"),  # a multiple of 16, not of 32
        "wide_range": dict(m=17, n=40, k=160, data=_wide_range, out_dtype=torch.float32),
        "wide_range_anvfp4_blocked_swap": dict(m=17, n=40, k=96, a_dtype="nvfp4", data=_wide_range, config=swap,
                                               scale_layout="blocked", out_dtype=torch.float32),
    }[case]
    m, n, k = kwargs.pop("m"), kwargs.pop("n"), kwargs.pop("k")
    _check_dq(m, n, k, **kwargs)


# ------------------------------------------------- tier C: the Inductor template text, executed


def _expand_inductor_template(module: ModuleType, kwargs: dict[str, object], inputs: dict[str, torch.Tensor],
                              name: str) -> tuple[KernelSource, list[str]]:
    """The Inductor template text with stand-ins for Inductor's macros, as a standalone module.

    ``def_kernel`` writes the signature (inputs, then OUT and its strides) and the constexpr
    defines the way TritonTemplate.generate does (``NAME : tl.constexpr = value``); ``size`` and
    ``stride`` are the static values of ``inputs``; ``store_output`` is a masked ``tl.store``.
    """
    import jinja2

    names: list[str] = []

    def def_kernel(*argnames: str) -> str:
        names.extend(argnames)
        defines = "".join(f"    {key} : tl.constexpr = {value}\n" for key, value in kwargs.items())
        return f"@triton.jit\ndef {name}({', '.join(argnames)}, OUT, stride_om, stride_on):\n{defines.rstrip()}"

    def store_output(indices: tuple[str, str], val: str, mask: str, val_shape: object = None) -> str:
        return (f"tl.store(OUT + {indices[0]} * stride_om + {indices[1]} * stride_on, "
                f"{val}.to(OUT.dtype.element_ty), mask={mask})")

    text = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(module.inductor_source()).render(
        def_kernel=def_kernel, store_output=store_output,
        size=lambda n, i: str(inputs[n].shape[i]), stride=lambda n, i: str(inputs[n].stride(i)), **kwargs)
    source = "import triton\nimport triton.language as tl\n\n\n" + text
    return KernelSource(name=name, source=source, template=module.NAME, config={}), names


def _template_kwargs(module: ModuleType, problem: object, config: object) -> dict[str, object]:
    """What a lowering passes as template kwargs: constexprs rendered as source text."""
    kwargs = dict(module.constexprs(problem, config))
    kwargs["ACTIVATION"] = repr(kwargs["ACTIVATION"])
    if module is dq:
        kwargs["DOT_DTYPE"] = dq.dot_dtype(problem)
    return kwargs


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@_EXP_OVERFLOW
@pytest.mark.parametrize("case", ["fp4_bias_gelu", "fp4_blocked_swap", "dq_abf16_bias_silu", "dq_anvfp4_blocked",
                                  "dq_afp16_plain", "fp4_bias_gelu_pdl", "dq_anvfp4_blocked_pdl"])
def test_interp_inductor_template_text(case: str) -> None:
    from inductor_ext.runtime.triton_loader import load_kernel
    from inductor_ext.runtime.triton_interp import interpreter_fixes

    m, n, k = 17, 40, 160
    gen = _gen(m, n, k, 3)
    use_pdl = case.endswith("_pdl")  # USE_PDL: the gdc calls run (no-ops in the interpreter)
    case = case.removesuffix("_pdl")
    module = fp4 if case.startswith("fp4") else dq
    blocked = "blocked" in case
    swap = "swap" in case
    activation = {"gelu": "gelu", "silu": "silu"}.get(case.rsplit("_", 1)[1])
    has_bias = "bias" in case
    a_dtype = "nvfp4" if module is fp4 or "anvfp4" in case else ("float16" if "afp16" in case else "bfloat16")
    b_q = _quantized(n, k, gen)
    a_q = _quantized(m, k, gen) if a_dtype == "nvfp4" else None
    a_plain = None if a_q else torch.randn(m, k, generator=gen).to(getattr(torch, a_dtype))
    bias = torch.randn(n, generator=gen).to(torch.bfloat16) if has_bias else None
    alpha = float(b_q.global_scale) * (float(a_q.global_scale) if a_q else 1.0) * 1.25
    if module is fp4:
        problem = P4(m, n, k, bias=has_bias, activation=activation, scale_layout="blocked" if blocked else "plain",
                     use_pdl=use_pdl)
        config = C4(16, 32, 64, 1, 4, 1, swap_ab=True) if swap else fp4.configs(problem, "cpu")[0]
    else:
        problem = PD(m, n, k, a_dtype, bias=has_bias, activation=activation,
                     scale_layout="blocked" if blocked else "plain", use_pdl=use_pdl)
        config = dq.configs(problem, "cpu")[0]
    from inductor_ext.kernels.nvfp4 import to_blocked

    def scales(t: NVFP4Tensor) -> torch.Tensor:
        return to_blocked(t.scales) if blocked else t.scales

    # torch._scaled_mm's order: a, b (the weight's [K // 2, N] transposed view), scale_a, scale_b, alpha, bias
    inputs: dict[str, torch.Tensor] = {"A": a_q.qdata if a_q is not None else a_plain, "B": b_q.qdata.t()}
    if a_q is not None:
        inputs["A_SCALE"] = scales(a_q)
    inputs |= {"B_SCALE": scales(b_q), "ALPHA": torch.tensor([alpha], dtype=torch.float32)}
    if has_bias:
        inputs["BIAS"] = bias
    kwargs = _template_kwargs(module, problem, config)
    assert kwargs["USE_PDL"] is use_pdl
    ks, names = _expand_inductor_template(module, kwargs, inputs, f"ext_inductor_frame_{case}{'_pdl' * use_pdl}")
    assert names == list(inputs), (names, list(inputs))
    out = torch.empty(m, n, dtype=torch.bfloat16)
    grid = (-(-m // config.block_m) * -(-n // config.block_n),)
    with interpreter_fixes() as fixes:
        assert "bf16_rounding" in fixes, fixes
        load_kernel(ks)[grid](*(inputs[name] for name in names), out, out.stride(0), out.stride(1),
                              num_warps=config.num_warps)
    ref = _reference(a_q if a_q is not None else a_plain, b_q, alpha=alpha, bias=bias, activation=activation,
                     out_dtype=torch.bfloat16)
    _assert_matches(out, ref, torch.bfloat16)
