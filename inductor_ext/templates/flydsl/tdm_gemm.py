"""FlyDSL GEMM for gfx1250 (MI450) whose operand tiles arrive by the Tensor Data Mover (TDM): one
``tensor_load_to_lds`` per wave and operand per K step instead of per-thread loads.

- ``mm`` / ``addmm`` in bf16/fp16 on ``v_wmma_f32_16x16x32_{bf16,f16}`` (wave32);
- ``_scaled_mm`` in fp8 (e4m3) with fp32 tensor-wise or row-wise scales on
  ``v_wmma_f32_16x16x128_fp8_fp8``: out = (A @ B) * scale_a * scale_b (+ bias).

Layout: ``x @ W.T`` (A (M, K) and B = W.T both contiguous along K, the ``nn.Linear`` case and what
``_scaled_mm`` requires); K a multiple of ``block_k`` (a TDM tile has no bound along its inner
dimension here, so a partial K tile would read past a row). Rows past M or N are zero-filled by
the TDM (``oob_outer_bound``) without a fetch. The descriptors are FlyDSL's
(``fx.rocdl.tdm_ops.make_tensor_descriptor_2d`` / ``tensor_load_2d`` / ``tensor_wait``), padded so
the LDS tiles have the ``[rows][block_k + 16 bytes]`` layout every FlyDSL family here reads.
One stage: each K step waits for its own tiles (``s_wait_tensorcnt 0`` + barrier); a double-buffered
pipeline is the next step once a gfx1250 can time it.

Tier I: compiled for gfx1250 without a GPU; the tests assert ``tensor_load_to_lds``,
``s_wait_tensorcnt`` and the WMMA. The host-side model stages tiles the way the descriptors split
them between waves (FlyDSL's ``compute_warp_distribution``) and checks writes, K coverage and
numerics. Tier D (``call``) needs an MI450; a first run must check numerics against ``torch.mm`` /
``torch._scaled_mm`` (bench/rocm_gemm.py), which also checks the assumed WMMA accumulator layout.
"""

# No "from __future__ import annotations": FlyDSL reads the kernels' and structs' annotations as objects.
import functools
from dataclasses import dataclass, replace
from typing import Any

from inductor_ext.targets import amd
from inductor_ext.templates.allowed import integer
from inductor_ext.templates.base import KernelSource
from inductor_ext.templates import linear
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.flydsl import common
from inductor_ext.templates.flydsl.tiling import MMA, GemmTiling

NAME = "flydsl.tdm_gemm"
# Claimed only where tier I passes (tests/test_flydsl_tdm_gemm.py).
TARGETS = ("gfx1250",)
OPS = linear.OPS
CHOICE_KIND = "extern"
DTYPES, FP8_OUT_DTYPES = linear.DTYPES, linear.FP8_OUT_DTYPES
SCALINGS = ("none", "tensor", "row")
_BITS = {"bfloat16": 16, "float16": 16, "float8_e4m3fn": 8}
TdmGemmProblem = linear.LinearProblem
_MMA = {"bfloat16": "gfx1250_bf16", "float16": "gfx1250_fp16", "float8_e4m3fn": "gfx1250_fp8"}


@dataclass(frozen=True)
class TdmGemmConfig:
    block_m: int = integer(low=1, high=1024)
    block_n: int = integer(low=1, high=1024)
    block_k: int = integer(low=1, high=1024)
    waves_m: int = integer(low=1, high=16)
    waves_n: int = integer(low=1, high=16)

    def name(self) -> str:
        return f"{self.block_m}x{self.block_n}x{self.block_k}_w{self.waves_m}x{self.waves_n}"


Problem, Config = TdmGemmProblem, TdmGemmConfig
KEY_INSTRUCTIONS = amd.key_instructions({"gfx1250": ("tdm_load", "tdm_wait", "wmma_bf16", "lds_read_16b")})


def _bits(problem: TdmGemmProblem) -> int:
    return _BITS[problem.dtype]


def tiling(problem: TdmGemmProblem, config: TdmGemmConfig) -> GemmTiling:
    # vec only sizes the (unused) per-thread load path: one 16-byte run, like the other families
    return GemmTiling(config.block_m, config.block_n, config.block_k, config.waves_m, config.waves_n,
                      128 // _bits(problem), MMA[_MMA[problem.dtype]], True, True, _bits(problem))


def problem_for(spec: OpSpec) -> TdmGemmProblem | str:
    """The problem for an ``mm`` / ``addmm`` / ``scaled_mm`` OpSpec (``x @ W.T``), or why not served."""
    problem = linear.linear_problem(spec, NAME)
    return problem if isinstance(problem, str) else refuse_problem(problem) or problem


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> TdmGemmProblem | str:
    """``inductor-ext asm``'s problem: ``x @ W.T`` (this family's layout), bf16 or fp8 scaled."""
    problem = linear.example_problem(m, n, k, dtype)
    return refuse_problem(problem) or problem


def refuse_problem(problem: TdmGemmProblem) -> str | None:
    reason = linear.dtype_reason(problem)
    if reason:
        return reason
    k_unit = 128 if problem.dtype == "float8_e4m3fn" else 32
    if problem.k % k_unit:
        return f"K={problem.k} is not a multiple of {k_unit} (TDM tiles span whole K steps)"
    return common.size_reason(problem.m * problem.k, problem.k * problem.n, problem.m * problem.n,
                              elem_bytes=max(_bits(problem) / 8, 4))


_CONFIGS_16 = (TdmGemmConfig(128, 128, 64, 2, 2), TdmGemmConfig(64, 64, 64, 2, 2), TdmGemmConfig(64, 128, 32, 2, 2),
               TdmGemmConfig(16, 128, 64, 1, 4), TdmGemmConfig(16, 64, 32, 1, 2))
_CONFIGS_8 = (TdmGemmConfig(128, 128, 128, 2, 2), TdmGemmConfig(64, 64, 128, 2, 2), TdmGemmConfig(16, 128, 128, 1, 4),
              TdmGemmConfig(16, 64, 128, 1, 2))


def configs(problem: TdmGemmProblem, target: str) -> list[TdmGemmConfig]:
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    table = _CONFIGS_8 if _bits(problem) == 8 else _CONFIGS_16
    return [c for c in common.fitting(table, problem.m, problem.n) if problem.k % c.block_k == 0] or \
        [c for c in table if problem.k % c.block_k == 0][-1:]


ALL_CONFIGS = tuple(dict.fromkeys(_CONFIGS_16 + _CONFIGS_8))


def refuse_config(problem: TdmGemmProblem, config: TdmGemmConfig, target: str = "gfx1250") -> str | None:
    if problem.k % config.block_k:
        return f"K={problem.k} is not a multiple of block_k={config.block_k}"
    t = tiling(problem, config)
    waves = t.threads // t.mma.wave
    if waves > min(config.block_m, config.block_n):
        return f"{waves} waves cannot split a {config.block_m}- or {config.block_n}-row tile by rows"
    return t.reason()


# ------------------------------------------------------------------------------------ render

def kernel_name(problem: TdmGemmProblem, config: TdmGemmConfig) -> str:
    scale = "" if problem.scaling == "none" else f"_{problem.scaling}scaled"
    return (f"flydsl_tdm_gemm_{problem.dtype}_{problem.out_dtype}{scale}{'_bias' if problem.bias else ''}_"
            f"{config.name()}")


def render(problem: TdmGemmProblem, config: TdmGemmConfig, target: str = "gfx1250") -> KernelSource:
    return common.render_launcher(__name__, NAME, problem, config, target, kernel_name(problem, config),
                                  tiling(problem, config), problem.m, problem.n, refuse_problem(problem) or refuse_config(problem, config))


# ------------------------------------------------------------------------------------- kernel


@functools.lru_cache(maxsize=None)
def build_launcher(dtype: str, out_dtype: str, bias: bool, scaling: str, config: TdmGemmConfig) -> Any:
    """The ``@flyc.jit`` launcher of one static variant. Arguments: C, A, B, BIAS, SA, SB (flat
    views), M, N, K, row strides of A and B (elements), C's strides, bias stride over N, scale
    strides (0: one value), byte sizes of C, BIAS, SA, SB, alpha, beta."""
    import flydsl.compiler as flyc
    import flydsl.expr as fx

    from inductor_ext.templates.flydsl import dsl

    t = tiling(TdmGemmProblem(1, 1, 128, dtype, out_dtype, bias, scaling=scaling), config)
    reason = t.reason()
    if reason:
        raise ValueError(f"{NAME}: {reason}")
    store = "uint8" if t.elem_bits == 8 else dtype
    smem_elem = fx.Uint8 if t.elem_bits == 8 else dsl.numeric(dtype)

    Smem = dsl.smem_ab(t, smem_elem)

    @flyc.kernel
    def flydsl_tdm_gemm(C: fx.Tensor, A: fx.Tensor, B: fx.Tensor, BIAS: fx.Tensor, SA: fx.Tensor, SB: fx.Tensor,
                        M: fx.Int32, N: fx.Int32, K: fx.Int32, sam: fx.Int32, sbn: fx.Int32, scm: fx.Int32,
                        scn: fx.Int32, sxn: fx.Int32, ssa: fx.Int32, ssb: fx.Int32, c_bytes: fx.Int32,
                        x_bytes: fx.Int32, sa_bytes: fx.Int32, sb_bytes: fx.Int32, alpha: fx.Float32,
                        beta: fx.Float32):
        tid = fx.thread_idx.x
        m0, n0 = t.program_tile(fx.block_idx.x, fx.block_idx.y)
        wave_m, wave_n, lane = t.wave_of(tid)
        lds = fx.SharedAllocator().allocate(Smem).peek()
        lds_a, lds_b = lds.a.ptr, lds.b.ptr
        acc = dsl.zero_acc(t)
        for k0 in range(0, K, t.block_k):
            dsl.tdm_stage(t, A, lds_a, rows=t.block_m, row0=m0, k0=k0, rows_lim=M, stride_row=sam)
            dsl.tdm_stage(t, B, lds_b, rows=t.block_n, row0=n0, k0=k0, rows_lim=N, stride_row=sbn)
            dsl.tdm_wait()
            for ks in fx.range_constexpr(t.k_steps):
                a_ops = [dsl.read_operand(t, lds_a, t.a_row_base(wave_m), rm, ks, lane, store) for rm in range(t.reps_m)]
                b_ops = [dsl.read_operand(t, lds_b, t.b_col_base(wave_n), rn, ks, lane, store) for rn in range(t.reps_n)]
                for i in fx.range_constexpr(t.reps_m * t.reps_n):
                    acc[i] = dsl.mma(t, a_ops[i // t.reps_n], b_ops[i % t.reps_n], acc[i])
            fx.gpu.barrier()  # the next step's TDM copies overwrite the tiles
        dsl.store_tile(t, acc, dsl.rsrc(C, c_bytes), tid, m0=m0, n0=n0, row_ok=lambda r: r < M, n_lim=N, scm=scm,
                       scn=scn, out=out_dtype,
                       bias=(dsl.rsrc(BIAS, x_bytes), 0, sxn, out_dtype) if bias else None, alpha=alpha, beta=beta,
                       scales=(dsl.rsrc(SA, sa_bytes), ssa, dsl.rsrc(SB, sb_bytes), ssb) if scaling != "none" else None)

    @flyc.jit
    def launch(C: fx.Tensor, A: fx.Tensor, B: fx.Tensor, BIAS: fx.Tensor, SA: fx.Tensor, SB: fx.Tensor,
               M: fx.Int32, N: fx.Int32, K: fx.Int32, sam: fx.Int32, sbn: fx.Int32, scm: fx.Int32, scn: fx.Int32,
               sxn: fx.Int32, ssa: fx.Int32, ssb: fx.Int32, c_bytes: fx.Int32, x_bytes: fx.Int32, sa_bytes: fx.Int32,
               sb_bytes: fx.Int32, alpha: fx.Float32, beta: fx.Float32, stream: fx.Stream = fx.Stream(None)):
        flydsl_tdm_gemm(C, A, B, BIAS, SA, SB, M, N, K, sam, sbn, scm, scn, sxn, ssa, ssb, c_bytes, x_bytes,
                        sa_bytes, sb_bytes, alpha, beta).launch(
            grid=((M + t.block_m - 1) // t.block_m, (N + t.block_n - 1) // t.block_n, 1),
            block=(t.threads, 1, 1), stream=stream)

    return launch


# ------------------------------------------------------------------------------ tier I, tier D


def _compile_job(job: dict[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    """Builder for ``runtime.flydsl`` (runs in its subprocess)."""
    p, config = TdmGemmProblem(**job["problem"]), TdmGemmConfig(**job["config"])
    launch = build_launcher(p.dtype, p.out_dtype, p.bias, p.scaling, config)
    data = "uint8" if _bits(p) == 8 else p.dtype
    c, x = common.placeholder(p.out_dtype), common.placeholder(p.out_dtype)
    a, b = common.placeholder(data), common.placeholder(data)
    sa, sb = common.placeholder("float32"), common.placeholder("float32")
    return launch, (c, a, b, x, sa, sb, 256, 256, 256, 256, 256, 256, 1, 1, 1, 1, 1 << 17, 512, 1024, 1024, 1.0, 1.0)


def compile_asm(problem: TdmGemmProblem, config: TdmGemmConfig, target: str = "gfx1250", *,
                cache: str | None = None) -> dict[str, str]:
    return isa_many([(problem, config, target)], cache=cache)[0]


def isa_many(jobs: list[tuple[TdmGemmProblem, TdmGemmConfig, str]], *,
             cache: str | None = None) -> list[dict[str, str]]:
    return common.compile_isa(__name__, NAME, TARGETS, jobs, reason=lambda p, c, t: refuse_problem(p) or refuse_config(p, c),
                              static=lambda p: replace(p, m=1, n=1, k=4096, alpha=1.0, beta=1.0), name=kernel_name,
                              cache=cache)


def call(problem: TdmGemmProblem, config: TdmGemmConfig, target: str, *tensors: Any) -> Any:
    """Launch on a gfx1250 GPU (tier D). ``tensors`` in the op's order: (A, B) for mm, (bias, A, B)
    for addmm, (A, B, scale_a, scale_b, bias) for scaled_mm."""
    import torch

    a, b, bias, sa, sb = linear.unpack_tensors(problem, tensors, NAME)
    common.check_device(NAME, a)
    m, n, k = problem.m, problem.n, problem.k
    c = torch.empty((m, n), dtype=getattr(torch, problem.out_dtype), device=a.device)
    if not common.aligned(16, a, b):
        raise ValueError(f"{NAME}: A and B must start 16-byte aligned for the Tensor Data Mover")
    x = bias if bias is not None else c
    sa = sa if sa is not None else torch.ones(1, device=a.device)
    sb = sb if sb is not None else torch.ones(1, device=a.device)
    raw = (lambda t: t.view(torch.uint8)) if _bits(problem) == 8 else (lambda t: t)
    launch = build_launcher(problem.dtype, problem.out_dtype, problem.bias, problem.scaling, config)
    launch(common.flat(c), common.flat(raw(a)), common.flat(raw(b)), common.flat(x), common.flat(sa), common.flat(sb),
           m, n, k, a.stride(0), b.stride(1), c.stride(0), c.stride(1), x.stride(-1),
           0 if sa.numel() == 1 else sa.stride(0), 0 if sb.numel() == 1 else sb.stride(-1),
           *(common.span_bytes(v) for v in (c, x, sa, sb)), problem.alpha, problem.beta, common.stream())
    return c


FAMILY = Family.of_module(__name__)
