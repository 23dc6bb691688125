"""The Triton dense GEMM template (inductor_ext/templates/triton/gemm.py), in three tiers.

- G golden: the rendered standalone module and the Inductor template text are snapshots under
  tests/golden/triton_gemm/ (rewrite them with ``EXPECTTEST_ACCEPT=1 pytest tests/test_gemm_template.py``).
- I ISA (``-m isa``): compiled for sm_90a, sm_100a, gfx950 and gfx1250 without a GPU; the matrix
  instruction each target is claimed for must appear (wgmma, tcgen05.mma, v_mfma, v_wmma).
- C CPU-executed (``-m interp``): ``run()`` in Triton's interpreter against torch in fp32.

Triton chooses between its interpreter and its compiler when ``triton.language`` is first
imported, for the whole process, so ``TRITON_INTERPRET=1`` is set here before anything imports
triton. ISA compiles then run in a subprocess without it (``inductor_ext.testing.isa`` does that
by itself, and caches the results on disk).
"""

from __future__ import annotations

import os
import sys

if "triton" not in sys.modules:  # must precede every import of triton (see the module docstring)
    os.environ["TRITON_INTERPRET"] = "1"

import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from inductor_ext.templates.base import KernelSource  # noqa: E402
from inductor_ext.templates.triton import gemm  # noqa: E402
from inductor_ext.testing import golden, isa  # noqa: E402

GemmProblem, GemmConfig = gemm.GemmProblem, gemm.GemmConfig

# ----------------------------------------------------------------------------- tier G golden

GOLDEN_DIR = Path(__file__).parent / "golden" / "triton_gemm"


def assert_golden(name: str, actual: str) -> None:
    golden.assert_golden(GOLDEN_DIR, name, actual)


_snapshot = golden.snapshot


GOLDEN_RENDERS = {
    # interpreter config, fp32 exact (ieee), K tail masked (70 % 32 != 0)
    "fp32_37x45x70_cpu": (GemmProblem(37, 45, 70, "float32"), "cpu"),
    # Hopper's first config, addmm epilogue, even K
    "bf16_bias_512x512x512_sm_90a": (GemmProblem(512, 512, 512, "bfloat16", bias=True), "sm_90a"),
    # AMD's first config, fp16, K tail masked (1000 % 64 != 0)
    "fp16_256x384x1000_gfx950": (GemmProblem(256, 384, 1000, "float16"), "gfx950"),
    # decode with programmatic dependent launch: USE_PDL and the launch_pdl compile option
    "bf16_pdl_16x4096x4096_sm_100a": (GemmProblem(16, 4096, 4096, "bfloat16", use_pdl=True), "sm_100a"),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_RENDERS))
def test_render_golden(case: str) -> None:
    problem, target = GOLDEN_RENDERS[case]
    assert_golden(case, _snapshot(gemm.render(problem, gemm.configs(problem, target)[0], target)))


def test_inductor_source_golden() -> None:
    text = gemm.inductor_source()
    assert_golden("inductor_source", text)
    # What the golden files pin is what Inductor compiles: one body shared by both frames.
    assert gemm.BODY in text and gemm.BODY in gemm.render(GemmProblem(8, 8, 8), GemmConfig(16, 16, 16)).source


def test_golden_files_all_have_a_test() -> None:
    names = {f"{case}.expected" for case in GOLDEN_RENDERS} | {"inductor_source.expected"}
    stale = sorted(p.name for p in GOLDEN_DIR.glob("*.expected") if p.name not in names)
    assert not stale, f"golden files no test compares (delete them): {stale}"


# -------------------------------------------------------------------------------- tier I ISA

ISA_PROBLEMS = {
    # addmm epilogue, even K, every stride a multiple of 16
    "bfloat16": GemmProblem(512, 512, 512, "bfloat16", bias=True),
    # K tail masked (1000 % 64 != 0), strides of A not 16-divisible
    "float16": GemmProblem(256, 384, 1000, "float16"),
    # with TF32 allowed (torch's "high" precision): tf32 MMAs on NVIDIA, fp32 MFMA/WMMA on AMD
    # (PyTorch's default, full fp32, is the FMA path on NVIDIA: tests/test_tier_i_configs.py)
    "float32": GemmProblem(512, 512, 512, "float32", allow_tf32=True),
}
ISA_CASES = [(t, d) for t in isa.TARGETS for d in ISA_PROBLEMS]

# The exact MMA each (target, dtype) is claimed to use, by its operand types.
_NV_SHAPE = r"m64n\d+k\d+"
DTYPE_MMA = {
    ("sm_90a", "bfloat16"): rf"wgmma\.mma_async\.sync\.aligned\.{_NV_SHAPE}\.f32\.bf16\.bf16",
    ("sm_90a", "float16"): rf"wgmma\.mma_async\.sync\.aligned\.{_NV_SHAPE}\.f32\.f16\.f16",
    ("sm_90a", "float32"): rf"wgmma\.mma_async\.sync\.aligned\.{_NV_SHAPE}\.f32\.tf32\.tf32",
    ("sm_100a", "bfloat16"): r"tcgen05\.mma\.cta_group::1\.kind::f16",
    ("sm_100a", "float16"): r"tcgen05\.mma\.cta_group::1\.kind::f16",
    ("sm_100a", "float32"): r"tcgen05\.mma\.cta_group::1\.kind::tf32",
    ("gfx950", "bfloat16"): r"v_mfma_f32_\d+x\d+x\d+_bf16",
    ("gfx950", "float16"): r"v_mfma_f32_\d+x\d+x\d+_f16",
    ("gfx950", "float32"): r"v_mfma_f32_\d+x\d+x\d+_f32",
    ("gfx1250", "bfloat16"): r"v_wmma_f32_\d+x\d+x\d+_bf16",
    ("gfx1250", "float16"): r"v_wmma_f32_\d+x\d+x\d+_f16",
    ("gfx1250", "float32"): r"v_wmma_f32_\d+x\d+x\d+_f32",
}


def _isa_kernel(target: str, dtype: str) -> tuple[KernelSource, dict[str, int]]:
    """The first config for the problem, with the hints a launch on contiguous tensors gives."""
    p = ISA_PROBLEMS[dtype]
    ks = gemm.render(p, gemm.configs(p, target)[0], target)
    hints = isa.launch_hints(ks, {
        "M": p.m, "N": p.n, "K": p.k, "stride_am": p.k, "stride_ak": 1, "stride_bk": p.n, "stride_bn": 1,
        "stride_cm": p.n, "stride_cn": 1, "stride_bias": 1 if p.bias else 0})
    return ks, hints


@pytest.fixture(scope="module")
def isa_asm(isa_cache: str | None):
    """Compile every ISA case once, in parallel where possible; a test gets its own error."""
    jobs = []
    for target, dtype in ISA_CASES:
        ks, hints = _isa_kernel(target, dtype)
        jobs.append((ks, target, {"hints": hints}))
    try:
        isa.compile_many(jobs, cache=isa_cache)
    except isa.IsaCompileError:
        pass  # get() below raises it again in the test that needs the failed kernel

    def get(target: str, dtype: str) -> dict[str, str]:
        ks, hints = _isa_kernel(target, dtype)
        return isa.compile_for_target(ks, target, hints=hints, cache=isa_cache)

    return get


@pytest.mark.isa
@pytest.mark.parametrize("target,dtype", ISA_CASES)
def test_isa_uses_mma(isa_asm, target: str, dtype: str) -> None:
    asm = isa_asm(target, dtype)
    counts = isa.assert_has_instructions(asm, target, [isa.MMA_INSTRUCTION[target], DTYPE_MMA[target, dtype]])
    assert counts[isa.MMA_INSTRUCTION[target]] == counts[DTYPE_MMA[target, dtype]], \
        f"{target} {dtype}: some MMAs are of another type: {counts}"
    if target in isa.SASS_MMA_INSTRUCTION:  # and ptxas kept them in the machine code
        isa.assert_has_instructions(asm, target, [isa.SASS_MMA_INSTRUCTION[target]], key="sass")


@pytest.mark.isa
@pytest.mark.parametrize("target", list(isa.TARGETS))
def test_isa_gate_rejects_other_targets_mma(isa_asm, target: str) -> None:
    # Negative: each target's code lacks the other targets' MMA, and the gate says which and shows code.
    asm = isa_asm(target, "bfloat16")
    for other in isa.TARGETS:
        if other == target:
            continue
        pattern = isa.MMA_INSTRUCTION[other]
        with pytest.raises(AssertionError) as info:
            isa.assert_has_instructions(asm, target, [isa.MMA_INSTRUCTION[target], pattern])
        message = str(info.value)
        assert message.startswith(f"{target} {isa.ASM_KEY[target]}: no instruction matches {pattern} (found: "
                                  f"{isa.MMA_INSTRUCTION[target]} x"), message
        assert "excerpt" in message, message


@pytest.mark.isa
def test_isa_gate_on_text_ignores_comments() -> None:
    ptx = ("\twgmma.fence.sync.aligned;\n"
           "\t// wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 only in a comment\n"
           "\t@%p1 ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];\n")
    with pytest.raises(AssertionError, match=re.escape(r"no instruction matches wgmma\.mma_async")):
        isa.assert_uses_mma(ptx, "sm_90a")
    assert isa.assert_has_instructions(ptx, "sm_90a", [r"wgmma\.fence"]) == {r"wgmma\.fence": 1}
    assert isa.instruction_counts(ptx, "sm_90a") == {"wgmma.fence.sync.aligned": 1, "ld.global.v4.b32": 1}
    amdgcn = "\tv_mfma_f32_32x32x16_bf16 a[0:15], v[0:3], v[4:7], a[0:15] ; v_wmma in a comment\n"
    assert isa.assert_uses_mma(amdgcn, "gfx950") == 1
    with pytest.raises(AssertionError, match="v_wmma"):
        isa.assert_uses_mma(amdgcn, "gfx1250")


@pytest.mark.isa
def test_isa_unknown_target_raises() -> None:
    ks, _ = _isa_kernel("sm_90a", "float16")
    with pytest.raises(ValueError, match="unknown ISA target 'sm_80'"):
        isa.compile_for_target(ks, "sm_80")
    with pytest.raises(ValueError, match="stride_am=2"):
        isa.compile_for_target(ks, "sm_90a", hints={"stride_am": 2})


@pytest.mark.isa
def test_isa_missing_toolchain_raises(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import triton

    # A kernel no other test compiles, so neither the in-process memo nor a cache can answer.
    problem = GemmProblem(96, 96, 96, "float16")
    ks = gemm.render(problem, GemmConfig(64, 32, 32, 4, 4, 2), "sm_100a")
    monkeypatch.setattr(triton.knobs.NvidiaTool, "from_path", staticmethod(lambda path: None))
    with pytest.raises(isa.IsaCompileError, match=r"cannot compile for sm_100a .*Cannot find ptxas"):
        isa.compile_for_target(ks, "sm_100a", cache=tmp_path)
    assert not list(tmp_path.iterdir()), "a failed compile must not leave a cache entry"


@pytest.mark.isa
def test_isa_compile_error_raises(tmp_path: Path) -> None:
    # A kernel Triton rejects: the gate raises with Triton's message, it never passes.
    source = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
              "def ext_isa_broken(X, BLOCK: tl.constexpr):\n"
              "    x = tl.load(X + tl.arange(0, BLOCK)[:, None] + tl.arange(0, 8)[None, :])\n"
              "    tl.store(X + tl.arange(0, BLOCK), tl.dot(x, x))\n")
    ks = KernelSource(name="ext_isa_broken", source=source, template="test", config={},
                      constexprs={"BLOCK": 16}, signature={"X": "*fp16", "BLOCK": "constexpr"},
                      launch={"num_warps": 4})
    with pytest.raises(isa.IsaCompileError, match="ext_isa_broken"):
        isa.compile_for_target(ks, "sm_90a", cache=tmp_path)
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------------- tier C interpreter


_TOL = {torch.float32: dict(rtol=1e-5, atol=1e-4),
        # half an ulp of the fp16 / bf16 result, plus fp32 accumulation-order noise
        torch.float16: dict(rtol=2e-3, atol=2e-3),
        torch.bfloat16: dict(rtol=1e-2, atol=1e-2)}


def _operand(rows: int, cols: int, dtype: torch.dtype, transposed: bool, gen: torch.Generator) -> torch.Tensor:
    if transposed:  # a column-major view: stride (1, rows)
        t = torch.randn(cols, rows, generator=gen).to(dtype).t()
        assert not t.is_contiguous()
        return t
    return torch.randn(rows, cols, generator=gen).to(dtype)


def _check_run(m: int, n: int, k: int, dtype: torch.dtype, *, a_t: bool = False, b_t: bool = False,
               bias: str | None = None, alpha: float = 1.0, beta: float = 1.0, config_index: int = 0) -> None:
    gen = torch.Generator().manual_seed(m * 10007 + n * 101 + k)
    a = _operand(m, k, dtype, a_t, gen)
    b = _operand(k, n, dtype, b_t, gen)
    bias_t = None
    if bias == "contiguous":
        bias_t = torch.randn(n, generator=gen).to(dtype)
    elif bias == "strided":  # every other element of a longer vector: stride_bias = 2
        bias_t = torch.randn(2 * n, generator=gen).to(dtype)[::2]
    problem = GemmProblem(m, n, k, str(dtype).removeprefix("torch."), bias=bias_t is not None)
    config = gemm.configs(problem, "cpu")[config_index]

    # The kernel run() will launch is the interpreter's, not a compiled one.
    from triton.runtime.interpreter import InterpretedFunction

    from inductor_ext.runtime.triton_loader import load_kernel

    kernel = load_kernel(gemm.render(problem, config, "cpu"))
    assert isinstance(kernel, InterpretedFunction), type(kernel)

    c = gemm.run(a, b, config, bias=bias_t, alpha=alpha, beta=beta)
    ref = a.float() @ b.float()
    if bias_t is not None:
        ref = beta * bias_t.float() + alpha * ref
    assert c.dtype == dtype and c.shape == (m, n)
    torch.testing.assert_close(c.float(), ref, **_TOL[dtype])


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("m,n,k,a_t,b_t,config_index", [
    (1, 17, 33, False, False, 0),  # one row, K tail of 1, N odd
    (37, 45, 70, False, False, 0),  # M, N odd, K tail of 6
    (37, 45, 70, True, False, 0),  # A a transposed view
    (20, 33, 70, False, True, 0),  # B a transposed view
    (48, 31, 33, True, True, 0),  # both transposed
    (64, 64, 64, False, False, 1),  # even K, the 64x64x32 config
    (70, 9, 96, False, False, 0),  # even K, more tiles of M than of N (grouping)
], ids=["m1", "k70", "a_t", "b_t", "ab_t", "even_k_cfg1", "group_m"])
def test_interp_matches_torch(dtype: torch.dtype, m: int, n: int, k: int, a_t: bool, b_t: bool,
                              config_index: int) -> None:
    _check_run(m, n, k, dtype, a_t=a_t, b_t=b_t, config_index=config_index)


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("m,n,k,bias,alpha,beta", [
    (37, 45, 70, "contiguous", 0.5, 2.0),
    (1, 33, 70, "strided", -1.5, 0.25),
    (32, 16, 32, "contiguous", 1.0, 1.0),
], ids=["k70", "m1_strided_bias", "plain"])
def test_interp_addmm_matches_torch(dtype: torch.dtype, m: int, n: int, k: int, bias: str, alpha: float,
                                    beta: float) -> None:
    _check_run(m, n, k, dtype, a_t=m == 37, bias=bias, alpha=alpha, beta=beta)


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("m,n,k,bias", [(37, 45, 70, None), (1, 33, 64, "contiguous")], ids=["mm", "addmm_m1"])
def test_interp_bf16_matches_torch(m: int, n: int, k: int, bias: str | None) -> None:
    # Stock Triton 3.9's interpreter multiplies bf16 bit patterns in tl.dot; our fix widens them.
    from inductor_ext.runtime.triton_interp import interpreter_fixes

    with interpreter_fixes() as fixes:
        assert "bf16_dot" in fixes, fixes
        _check_run(m, n, k, torch.bfloat16, b_t=bias is None, bias=bias, alpha=0.5, beta=2.0)
