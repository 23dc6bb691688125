"""FlyDSL MXFP8 / MXFP4 ``_scaled_mm`` for gfx950: out = (A * sa) @ (B * sb) (+ bias), one e8m0
scale per 32 elements of K, fp32 accumulation on ``v_mfma_scale_f32_16x16x128_f8f6f4``.

Operands as ``torch._scaled_mm`` takes them: A (M, K) row-major and B (K, N) column-major (the
transpose of a (N, K) weight), both K-major; e4m3 bytes (MXFP8) or packed e2m1 pairs
(MXFP4, ``float4_e2m1fn_x2``: low nibble = even element; K = 2 x the byte columns). Scales are
``float8_e8m0fnu``, either the 128x4-tiled layout ``_scaled_mm`` requires (``"blocked"``,
``kernels.nvfp4.to_blocked``) or a plain strided [rows, K // 32] tensor (``"plain"``, what
``kernels.mx.quantize_mx*`` returns).

Each lane feeds one instruction 32 K elements of one row: exactly one MX block, whose scale the
lane passes as its scale operand (an e8m0 byte in a VGPR, byte 0 selected). Operand tiles are
staged in LDS as bytes; the K tail is masked with zero bytes and zero scales. Indices come from
:mod:`.tiling` (scale addresses included), checked by ``testing/flydsl_model.py``.

Tier I: compiled for gfx950 without a GPU; the tests assert ``v_mfma_scale_f32_16x16x128_f8f6f4``
and the 16-byte loads. Tier D (``call``): launches through FlyDSL on a ROCm GPU; a first run must
check the numerics against ``kernels.scaled_gemm.scaled_mm_reference`` (bench/rocm_gemm.py) and,
with it, the assumed lane layout of the scaled MFMA (32 consecutive K per lane, scale per lane).
"""

# No "from __future__ import annotations": FlyDSL reads the kernels' and structs' annotations as objects.
import functools
from dataclasses import dataclass, replace
from typing import Any

from inductor_ext.targets import amd
from inductor_ext.templates.allowed import flag, integer, one_of, size
from inductor_ext.templates.base import KernelSource
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.flydsl import common
from inductor_ext.templates.flydsl.tiling import MMA, GemmTiling, cdiv

NAME = "flydsl.mx_scaled_mm"
# Claimed only where tier I passes (tests/test_flydsl_mx_scaled_mm.py).
TARGETS = ("gfx950",)
OPS = ("scaled_mm",)  # Inductor's lowering of aten._scaled_mm (lowering/ops/scaled_mm.py)
CHOICE_KIND = "extern"

FORMATS = {"fp8_e4m3": (8, 0), "fp4_e2m1": (4, 4)}  # bits per element, the instruction's format code
TORCH_FORMATS = {"float8_e4m3fn": "fp8_e4m3", "float4_e2m1fn_x2": "fp4_e2m1"}
SCALE_LAYOUTS = ("blocked", "plain")
OUT_DTYPES = ("bfloat16", "float16", "float32")
BLOCK = 32


@dataclass(frozen=True)
class MxScaledMmProblem:
    """out[m, n] = sum_k A[m, k] sa[m, k // 32] B[k, n] sb[n, k // 32] (+ bias[n]); K in elements."""

    m: int = size()
    n: int = size()
    k: int = size()
    fmt: str = one_of(FORMATS, "fp8_e4m3")
    scale_layout: str = one_of(SCALE_LAYOUTS, "blocked")
    out_dtype: str = one_of(OUT_DTYPES, "bfloat16")
    bias: bool = flag(False)

    @property
    def bits(self) -> int:
        return FORMATS[self.fmt][0]


@dataclass(frozen=True)
class MxScaledMmConfig:
    block_m: int = integer(low=1, high=1024)
    block_n: int = integer(low=1, high=1024)
    block_k: int = integer(low=128, high=4096)  # elements; a multiple of 128
    waves_m: int = integer(low=1, high=16)
    waves_n: int = integer(low=1, high=16)

    def name(self) -> str:
        return f"{self.block_m}x{self.block_n}x{self.block_k}_w{self.waves_m}x{self.waves_n}"


Problem, Config = MxScaledMmProblem, MxScaledMmConfig
KEY_INSTRUCTIONS = amd.key_instructions({"gfx950": ("mfma_mx", "global_load_16b", "global_load_1b", "lds_read_16b")})


def tiling(problem: MxScaledMmProblem, config: MxScaledMmConfig) -> GemmTiling:
    # 16-byte global loads: 16 fp8 or 32 fp4 elements
    return GemmTiling(config.block_m, config.block_n, config.block_k, config.waves_m, config.waves_n,
                      128 // problem.bits, MMA["gfx950_mx"], True, True, problem.bits)


def _scale_layout(spec_rows: int, k: int, scale: Any) -> str | None:
    kb = cdiv(k, BLOCK)
    if len(scale.shape) == 2 and tuple(scale.shape) == (spec_rows, kb):
        return "plain"
    numel = 1
    for s in scale.shape:
        numel *= s
    if numel == cdiv(spec_rows, 128) * 128 * cdiv(kb, 4) * 4 and scale.is_contiguous:
        return "blocked"
    return None


def problem_for(spec: OpSpec) -> MxScaledMmProblem | str:
    """The problem for a ``scaled_mm`` OpSpec (a, b, scale_a, scale_b, bias, scale_result)."""
    if spec.op not in OPS:
        return f"{NAME} serves {OPS}, not {spec.op}"
    a, b, sa, sb, *rest = (*spec.inputs, None, None)
    bias, scale_result = rest[0], rest[1]
    if a is None or b is None or sa is None or sb is None:
        return "_scaled_mm needs A, B and both scales"
    fmt = TORCH_FORMATS.get(a.dtype)
    if fmt is None or b.dtype != a.dtype:
        return f"{NAME} takes MXFP8 (float8_e4m3fn) or MXFP4 (float4_e2m1fn_x2) operands, got {a.dtype}, {b.dtype}"
    if sa.dtype != "float8_e8m0fnu" or sb.dtype != "float8_e8m0fnu":
        return f"MX needs float8_e8m0fnu block scales, got {sa.dtype}, {sb.dtype} (tensor/row-wise scaling is not MX)"
    if scale_result is not None:
        return "scale_result is not supported with MX scaling"
    per_byte = 8 // FORMATS[fmt][0]
    m, k = a.shape[0], a.shape[1] * per_byte
    n = b.shape[1]
    if k % BLOCK:
        return f"K={k} is not a multiple of the MX block ({BLOCK})"
    if a.stride[1] != 1 or b.stride[0] != 1:
        return f"A must be row-major and B column-major (K-major both); got strides {a.stride}, {b.stride}"
    layout_a, layout_b = _scale_layout(m, k, sa), _scale_layout(n, k, sb)
    if layout_a is None or layout_a != layout_b:
        return (f"scales must both be [rows, K/32] or both the 128x4 blocked layout; got {sa.shape} and {sb.shape} "
                f"for M={m}, N={n}, K={k}")
    out = spec.out.dtype
    if bias is not None and (bias.dtype != out or tuple(bias.shape) != (n,)):
        return f"bias must be [{n}] in the output dtype {out}, got {bias.shape} {bias.dtype}"
    problem = MxScaledMmProblem(m, n, k, fmt, layout_a, out, bias is not None)
    return refuse_problem(problem) or problem


def refuse_problem(problem: MxScaledMmProblem) -> str | None:
    if problem.fmt not in FORMATS:
        return f"format {problem.fmt} not in {tuple(FORMATS)}"
    if problem.scale_layout not in SCALE_LAYOUTS:
        return f"scale layout {problem.scale_layout} not in {SCALE_LAYOUTS}"
    if problem.out_dtype not in OUT_DTYPES:
        return f"out_dtype {problem.out_dtype} not in {OUT_DTYPES}"
    if min(problem.m, problem.n, problem.k) <= 0:
        return f"empty problem {problem.m}x{problem.n}x{problem.k}"
    if problem.k % BLOCK:
        return f"K={problem.k} is not a multiple of the MX block ({BLOCK})"
    return common.size_reason(problem.m * problem.k, problem.k * problem.n, elem_bytes=problem.bits / 8)


_CONFIGS = {
    "fp8_e4m3": (MxScaledMmConfig(128, 128, 128, 2, 2), MxScaledMmConfig(64, 64, 128, 2, 2),
                 MxScaledMmConfig(16, 128, 256, 1, 4), MxScaledMmConfig(16, 64, 128, 1, 2)),
    "fp4_e2m1": (MxScaledMmConfig(128, 128, 256, 2, 2), MxScaledMmConfig(64, 64, 256, 2, 2),
                 MxScaledMmConfig(16, 128, 512, 1, 4), MxScaledMmConfig(16, 64, 256, 1, 2)),
}


def configs(problem: MxScaledMmProblem, target: str) -> list[MxScaledMmConfig]:
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    return common.fitting(_CONFIGS[problem.fmt], problem.m, problem.n)


ALL_CONFIGS = tuple(dict.fromkeys(c for table in _CONFIGS.values() for c in table))


def refuse_config(problem: MxScaledMmProblem, config: MxScaledMmConfig, target: str = "gfx950") -> str | None:
    return tiling(problem, config).reason()


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> MxScaledMmProblem | str:
    """``inductor-ext asm``'s problem for an MxNxK shape: MXFP8 (``--dtype fp4_e2m1`` for MXFP4)."""
    fmt = TORCH_FORMATS.get(dtype or "", dtype or "fp8_e4m3")
    if fmt not in FORMATS:
        return f"--dtype {dtype!r}: use one of {', '.join([*FORMATS, *TORCH_FORMATS])}"
    problem = MxScaledMmProblem(m, n, k, fmt)
    return refuse_problem(problem) or problem


# ------------------------------------------------------------------------------------ render

def kernel_name(problem: MxScaledMmProblem, config: MxScaledMmConfig) -> str:
    return (f"flydsl_mx_scaled_mm_{problem.fmt}_{problem.scale_layout}_{problem.out_dtype}"
            f"{'_bias' if problem.bias else ''}_{config.name()}")


def render(problem: MxScaledMmProblem, config: MxScaledMmConfig, target: str = "gfx950") -> KernelSource:
    return common.render_launcher(__name__, NAME, problem, config, target, kernel_name(problem, config),
                                  tiling(problem, config), problem.m, problem.n, refuse_problem(problem) or refuse_config(problem, config))


# ------------------------------------------------------------------------------------- kernel


@functools.lru_cache(maxsize=None)
def build_launcher(fmt: str, scale_layout: str, out_dtype: str, bias: bool, config: MxScaledMmConfig) -> Any:
    """The ``@flyc.jit`` launcher of one static variant. Arguments: C, A, B, SA, SB, BIAS (flat
    views; A, B, SA, SB as bytes), M, N, K (elements), A's and B's row strides (elements), the
    scale strides (rows, K blocks) and 128x4 tiles per tile row, the byte sizes of the views."""
    import flydsl.compiler as flyc
    import flydsl.expr as fx

    from inductor_ext.templates.flydsl import dsl

    t = tiling(MxScaledMmProblem(1, 1, BLOCK, fmt, scale_layout, out_dtype, bias), config)
    reason = t.reason()
    if reason:
        raise ValueError(f"{NAME}: {reason}")
    code = FORMATS[fmt][1]

    Smem = dsl.smem_ab(t, fx.Uint8)

    def operand(lds: Any, rs_scale: Any, base: Any, rep: int, ks: int, lane: Any, row0: Any, k0: Any, rows: Any,
                kblocks: Any, s_row: Any, s_kb: Any, kb_tiles: Any) -> tuple[Any, Any]:
        """A lane's operand and the e8m0 scale of its 32 K elements (one MX block), zero-extended."""
        r, k = t.operand(base, rep, ks, lane)
        row, kb = row0 + r, (k0 + k) // BLOCK
        off = t.scale_offset(scale_layout, row, kb, s_row, s_kb, kb_tiles)
        byte = dsl.load(fx.T.i8, rs_scale, off, t.scale_ok(row, kb, rows, kblocks))
        return dsl.read_operand(t, lds, base, rep, ks, lane, "uint8"), fx.Int32(fx.Uint8(byte))

    @flyc.kernel
    def flydsl_mx_scaled_mm(C: fx.Tensor, A: fx.Tensor, B: fx.Tensor, SA: fx.Tensor, SB: fx.Tensor,
                            BIAS: fx.Tensor, M: fx.Int32, N: fx.Int32, K: fx.Int32, sam: fx.Int32, sbn: fx.Int32,
                            scm: fx.Int32, scn: fx.Int32, ssa_r: fx.Int32, ssa_k: fx.Int32, ssb_r: fx.Int32,
                            ssb_k: fx.Int32, kb_tiles: fx.Int32, a_bytes: fx.Int32, b_bytes: fx.Int32,
                            sa_bytes: fx.Int32, sb_bytes: fx.Int32, c_bytes: fx.Int32, x_bytes: fx.Int32):
        tid = fx.thread_idx.x
        m0, n0 = t.program_tile(fx.block_idx.x, fx.block_idx.y)
        wave_m, wave_n, lane = t.wave_of(tid)
        lds = fx.SharedAllocator().allocate(Smem).peek()
        lds_a, lds_b = lds.a.ptr, lds.b.ptr
        rs_a, rs_b, rs_c = dsl.rsrc(A, a_bytes), dsl.rsrc(B, b_bytes), dsl.rsrc(C, c_bytes)
        rs_sa, rs_sb = dsl.rsrc(SA, sa_bytes), dsl.rsrc(SB, sb_bytes)
        kblocks = K // BLOCK
        acc = dsl.zero_acc(t)
        for k0 in range(0, K, t.block_k):
            dsl.stage_operand(t, rs_a, lds_a, tid, rows=t.block_m, k_major=True, row0=m0, k0=k0,
                              row_ok=lambda r: r < M, k_lim=K, stride_row=sam, stride_k=1, elem="uint8")
            dsl.stage_operand(t, rs_b, lds_b, tid, rows=t.block_n, k_major=True, row0=n0, k0=k0,
                              row_ok=lambda r: r < N, k_lim=K, stride_row=sbn, stride_k=1, elem="uint8")
            fx.gpu.barrier()
            for ks in fx.range_constexpr(t.k_steps):
                a_ops = [operand(lds_a, rs_sa, t.a_row_base(wave_m), rm, ks, lane, m0, k0, M, kblocks, ssa_r, ssa_k,
                                 kb_tiles) for rm in range(t.reps_m)]
                b_ops = [operand(lds_b, rs_sb, t.b_col_base(wave_n), rn, ks, lane, n0, k0, N, kblocks, ssb_r, ssb_k,
                                 kb_tiles) for rn in range(t.reps_n)]
                for i in fx.range_constexpr(t.reps_m * t.reps_n):
                    (a, sa), (b, sb) = a_ops[i // t.reps_n], b_ops[i % t.reps_n]
                    acc[i] = dsl.mma(t, a, b, acc[i], (code, sa, sb))
            fx.gpu.barrier()
        dsl.store_tile(t, acc, rs_c, tid, m0=m0, n0=n0, row_ok=lambda r: r < M, n_lim=N, scm=scm, scn=scn,
                       out=out_dtype, bias=(dsl.rsrc(BIAS, x_bytes), 0, 1, out_dtype) if bias else None,
                       alpha=fx.Float32(1.0), beta=fx.Float32(1.0))

    @flyc.jit
    def launch(C: fx.Tensor, A: fx.Tensor, B: fx.Tensor, SA: fx.Tensor, SB: fx.Tensor, BIAS: fx.Tensor,
               M: fx.Int32, N: fx.Int32, K: fx.Int32, sam: fx.Int32, sbn: fx.Int32, scm: fx.Int32, scn: fx.Int32,
               ssa_r: fx.Int32, ssa_k: fx.Int32, ssb_r: fx.Int32, ssb_k: fx.Int32, kb_tiles: fx.Int32,
               a_bytes: fx.Int32, b_bytes: fx.Int32, sa_bytes: fx.Int32, sb_bytes: fx.Int32, c_bytes: fx.Int32,
               x_bytes: fx.Int32, stream: fx.Stream = fx.Stream(None)):
        flydsl_mx_scaled_mm(C, A, B, SA, SB, BIAS, M, N, K, sam, sbn, scm, scn, ssa_r, ssa_k, ssb_r, ssb_k,
                            kb_tiles, a_bytes, b_bytes, sa_bytes, sb_bytes, c_bytes, x_bytes).launch(
            grid=((M + t.block_m - 1) // t.block_m, (N + t.block_n - 1) // t.block_n, 1),
            block=(t.threads, 1, 1), stream=stream)

    return launch


# ------------------------------------------------------------------------------ tier I, tier D


def _compile_job(job: dict[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    """Builder for ``runtime.flydsl`` (runs in its subprocess)."""
    problem, config = MxScaledMmProblem(**job["problem"]), MxScaledMmConfig(**job["config"])
    launch = build_launcher(problem.fmt, problem.scale_layout, problem.out_dtype, problem.bias, config)
    c, x = common.placeholder(problem.out_dtype), common.placeholder(problem.out_dtype)
    a, b, sa, sb = (common.placeholder("uint8") for _ in range(4))
    return launch, (c, a, b, sa, sb, x, 256, 256, 256, 256, 256, 256, 1, 8, 1, 8, 1, 2,
                    1 << 16, 1 << 16, 2048, 2048, 1 << 17, 512)


def compile_asm(problem: MxScaledMmProblem, config: MxScaledMmConfig, target: str = "gfx950", *,
                cache: str | None = None) -> dict[str, str]:
    """The compiled kernel for gfx950 (``amdgcn``, ``hsaco_b64``, ``metadata``); M, N, K are runtime."""
    return isa_many([(problem, config, target)], cache=cache)[0]


def isa_many(jobs: list[tuple[MxScaledMmProblem, MxScaledMmConfig, str]], *,
             cache: str | None = None) -> list[dict[str, str]]:
    return common.compile_isa(__name__, NAME, TARGETS, jobs, reason=lambda p, c, t: refuse_problem(p) or refuse_config(p, c),
                              static=lambda p: replace(p, m=1, n=1, k=BLOCK), name=kernel_name, cache=cache)


def call(problem: MxScaledMmProblem, config: MxScaledMmConfig, target: str, a: Any, b: Any, scale_a: Any,
         scale_b: Any, bias: Any = None, *rest: Any) -> Any:
    """Launch on a gfx950 GPU (tier D), in ``_scaled_mm``'s argument order (scale_result must be None)."""
    import torch

    common.check_device(NAME, a)
    if any(r is not None for r in rest):
        raise ValueError(f"{NAME}: scale_result is not supported with MX scaling")
    m, n, k = problem.m, problem.n, problem.k
    c = torch.empty((m, n), dtype=getattr(torch, problem.out_dtype), device=a.device)
    x = bias if bias is not None else c
    u8 = [t.view(torch.uint8) for t in (a, b, scale_a, scale_b)]
    if scale_a.dim() == 2 and problem.scale_layout == "plain":
        ssa, ssb = scale_a.stride(), scale_b.stride()
    else:
        ssa = ssb = (0, 0)
    per_byte = 8 // problem.bits
    launch = build_launcher(problem.fmt, problem.scale_layout, problem.out_dtype, problem.bias, config)
    launch(common.flat(c), *(common.flat(t) for t in u8), common.flat(x), m, n, k,
           a.stride(0) * per_byte, b.stride(1) * per_byte, c.stride(0), c.stride(1), *ssa, *ssb,
           cdiv(cdiv(k, BLOCK), 4), *(common.span_bytes(t) for t in u8), common.span_bytes(c), common.span_bytes(x),
           common.stream())
    return c


FAMILY = Family.of_module(__name__)
