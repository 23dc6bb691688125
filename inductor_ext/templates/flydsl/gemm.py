"""FlyDSL dense GEMM for gfx950 (MI350/MI355) and gfx1250 (MI450): C = A @ B (mm) or
beta * bias + alpha * A @ B (addmm), bf16/fp16 in, same dtype out, fp32 accumulation on
``v_mfma_f32_16x16x32_{bf16,f16}`` (gfx950, wave64) or ``v_wmma_f32_16x16x32_{bf16,f16}`` (gfx1250,
wave32; per-thread buffer loads: ``flydsl.tdm_gemm`` is the Tensor Data Mover variant there).

All four layouts: A (M, K) contiguous along K or along M, B (K, N) along K (``x @ W.T`` with an
``nn.Linear`` weight) or along N. A layout only decides the direction of the 16-byte global loads
(``GemmTiling.vec`` elements along the contiguous dimension); both operands are staged in LDS
K-contiguous, so the MFMA operand reads are the same for every layout. Operands with any other
strides, or 16-byte loads that would not be aligned, use the ``vec=1`` configs (one element per
load). Tiles, waves, loads and stores follow :mod:`.tiling`, which the host-side model in
``testing/flydsl_model.py`` checks (every C element written once, K covered once, numerics
against ``kernels.matmul``).

Tier I (``compile_asm`` / ``isa_many``): FlyDSL compiles the kernel for both targets without a GPU (``runtime.flydsl``) and
the tests assert the MFMA/WMMA, the 16-byte buffer loads (or the scalar loads of ``vec=1``) and
the 16-byte LDS reads. Tier D (``call``) launches through FlyDSL on a ROCm GPU; a first
run must check the numerics against ``torch.mm`` (``bench/rocm_gemm.py`` does, before timing).
"""

# No "from __future__ import annotations": FlyDSL reads the kernels' and structs' annotations as
# objects.
import functools
from dataclasses import dataclass, replace
from typing import Any

from inductor_ext.targets import amd
from inductor_ext.templates.allowed import flag, integer, number, one_of, size
from inductor_ext.templates.base import KernelSource
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.flydsl import common
from inductor_ext.templates.flydsl.tiling import MMA, GemmTiling

NAME = "flydsl.gemm"
# Claimed only where tier I passes (tests/test_flydsl_gemm.py).
TARGETS = ("gfx950", "gfx1250")
OPS = ("mm", "addmm")
CHOICE_KIND = "extern"
DTYPES = ("bfloat16", "float16")


@dataclass(frozen=True)
class GemmProblem:
    """C[m, n] = A[m, k] @ B[k, n] (addmm: beta * bias + alpha * A @ B), one dtype throughout."""

    m: int = size()
    n: int = size()
    k: int = size()
    dtype: str = one_of(DTYPES, "bfloat16")
    a_k_major: bool = flag(True)  # A's K is contiguous (else its M is)
    b_k_major: bool = flag(False)  # B's K is contiguous (B = W.T of a Linear weight W), else its N is
    vec_ok: bool = flag(True)  # strides allow 16-byte loads along the contiguous dimension
    bias: bool = flag(False)
    alpha: float = number(1.0)
    beta: float = number(1.0)


@dataclass(frozen=True)
class GemmConfig:
    block_m: int = integer(low=1, high=1024)
    block_n: int = integer(low=1, high=1024)
    block_k: int = integer(low=1, high=1024)
    waves_m: int = integer(low=1, high=16)
    waves_n: int = integer(low=1, high=16)
    vec: int = integer(8, low=1, high=16, power_of_two=True)

    def name(self) -> str:
        return f"{self.block_m}x{self.block_n}x{self.block_k}_w{self.waves_m}x{self.waves_n}_v{self.vec}"


Problem, Config = GemmProblem, GemmConfig
# What tier I asserts and ``inductor-ext asm`` shows (keys of targets.amd.INSTRUCTIONS).
KEY_INSTRUCTIONS = amd.key_instructions({
    "gfx950": ("mfma_bf16", "global_load_16b", "lds_read_16b", "store_2b"),
    "gfx1250": ("wmma_bf16", "global_load_16b", "lds_read_16b", "store_2b"),
})


def tiling(problem: GemmProblem, config: GemmConfig, target: str = "gfx950") -> GemmTiling:
    mma = MMA[f"{target}_{'bf16' if problem.dtype == 'bfloat16' else 'fp16'}"]
    return GemmTiling(config.block_m, config.block_n, config.block_k, config.waves_m, config.waves_n, config.vec,
                      mma, problem.a_k_major, problem.b_k_major)


def problem_for(spec: OpSpec) -> GemmProblem | str:
    """The problem for an ``mm`` / ``addmm`` OpSpec, or why this family does not serve it."""
    if spec.op not in OPS:
        return f"{NAME} serves {OPS}, not {spec.op}"
    bias = spec.inputs[0] if spec.op == "addmm" else None
    a, b = spec.inputs[-2], spec.inputs[-1]
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return "mm needs two 2-D operands"
    dtypes = {a.dtype, b.dtype, spec.out.dtype} | ({bias.dtype} if bias is not None else set())
    if len(dtypes) != 1 or a.dtype not in DTYPES:
        return f"{NAME} takes one dtype of {DTYPES} for A, B, bias and C; got {sorted(dtypes)}"
    (m, k), n = a.shape, b.shape[1]
    a_k_major, a_vec = common.major(a.stride, 1, 0, k)
    b_k_major, b_vec = common.major(b.stride, 0, 1, k)
    problem = GemmProblem(m, n, k, a.dtype, a_k_major, b_k_major, a_vec and b_vec, bias is not None,
                          float(spec.scalars.get("alpha", 1.0)), float(spec.scalars.get("beta", 1.0)))
    return refuse_problem(problem) or problem


def refuse_problem(problem: GemmProblem) -> str | None:
    """None when the family can serve ``problem``, else the reason it cannot."""
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if min(problem.m, problem.n, problem.k) <= 0:
        return f"empty problem {problem.m}x{problem.n}x{problem.k}"
    return common.size_reason(problem.m * problem.k, problem.k * problem.n, problem.m * problem.n, elem_bytes=2)


# Candidates, best guess first: 256-thread tiles for large problems, narrow M for decode shapes;
# "vec=1" ones serve layouts where 16-byte loads would be misaligned.
_VEC_CONFIGS = (
    GemmConfig(128, 128, 64, 2, 2),
    GemmConfig(64, 128, 64, 2, 2),
    GemmConfig(64, 64, 64, 2, 2),
    GemmConfig(16, 128, 128, 1, 4),
    GemmConfig(16, 64, 64, 1, 2),
)
_SCALAR_CONFIGS = (
    GemmConfig(64, 64, 32, 2, 2, vec=1),
    GemmConfig(16, 64, 32, 1, 2, vec=1),
)
ALL_CONFIGS = _VEC_CONFIGS + _SCALAR_CONFIGS


def configs(problem: GemmProblem, target: str) -> list[GemmConfig]:
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    table = _VEC_CONFIGS if problem.vec_ok else _SCALAR_CONFIGS
    return common.fitting(table, problem.m, problem.n)


def refuse_config(problem: GemmProblem, config: GemmConfig, target: str = "gfx950") -> str | None:
    """None when ``config`` can compute ``problem`` on ``target``, else why not."""
    if config.vec > 1 and not problem.vec_ok:
        return f"config {config.name()} loads 16 bytes at once; these strides need vec=1"
    return tiling(problem, config, target).reason()


# ------------------------------------------------------------------------------------ render

def kernel_name(problem: GemmProblem, config: GemmConfig) -> str:
    layout = ("k" if problem.a_k_major else "m") + ("k" if problem.b_k_major else "n")
    return f"flydsl_gemm_{problem.dtype}_{layout}{'_bias' if problem.bias else ''}_{config.name()}"


def render(problem: GemmProblem, config: GemmConfig, target: str = "gfx950") -> KernelSource:
    name = kernel_name(problem, config) + ("" if target == "gfx950" else f"_{target}")
    return common.render_launcher(__name__, NAME, problem, config, target, name, tiling(problem, config, target),
                                  problem.m, problem.n, refuse_problem(problem) or refuse_config(problem, config, target))


# ------------------------------------------------------------------------------------- kernel


@functools.lru_cache(maxsize=None)
def build_launcher(dtype: str, a_k_major: bool, b_k_major: bool, bias: bool, config: GemmConfig,
                   target: str = "gfx950") -> Any:
    """The ``@flyc.jit`` launcher for one static variant (M, N, K and strides are runtime values).

    Arguments: C, A, B, BIAS (flat views), M, N, K, the element strides of A (m, k), B (k, n),
    C (m, n) and BIAS (m, n), the byte sizes of the four views, alpha, beta, stream.
    """
    import flydsl.compiler as flyc
    import flydsl.expr as fx

    from inductor_ext.templates.flydsl import dsl

    t = tiling(GemmProblem(1, 1, 1, dtype, a_k_major, b_k_major), config, target)
    reason = t.reason()
    if reason:
        raise ValueError(f"{NAME}: {reason}")

    Smem = dsl.smem_ab(t, dsl.numeric(dtype))

    @flyc.kernel
    def flydsl_gemm(C: fx.Tensor, A: fx.Tensor, B: fx.Tensor, BIAS: fx.Tensor, M: fx.Int32, N: fx.Int32,
                    K: fx.Int32, sam: fx.Int32, sak: fx.Int32, sbk: fx.Int32, sbn: fx.Int32, scm: fx.Int32,
                    scn: fx.Int32, sxm: fx.Int32, sxn: fx.Int32, a_bytes: fx.Int32, b_bytes: fx.Int32,
                    c_bytes: fx.Int32, x_bytes: fx.Int32, alpha: fx.Float32, beta: fx.Float32):
        tid = fx.thread_idx.x
        m0, n0 = t.program_tile(fx.block_idx.x, fx.block_idx.y)
        lds = fx.SharedAllocator().allocate(Smem).peek()
        lds_a, lds_b = lds.a.ptr, lds.b.ptr
        rs_a, rs_b, rs_c = dsl.rsrc(A, a_bytes), dsl.rsrc(B, b_bytes), dsl.rsrc(C, c_bytes)
        acc = dsl.zero_acc(t)
        for k0 in range(0, K, t.block_k):
            acc = dsl.k_step(t, acc, tid, lds_a, lds_b, rs_a, rs_b, m0=m0, n0=n0, k0=k0, k_lim=K,
                             row_ok=lambda r: r < M, col_ok=lambda c: c < N, a_strides=(sam, sak),
                             b_strides=(sbn, sbk), elem=dtype)
        dsl.store_tile(t, acc, rs_c, tid, m0=m0, n0=n0, row_ok=lambda r: r < M, n_lim=N, scm=scm, scn=scn,
                       out=dtype, bias=(dsl.rsrc(BIAS, x_bytes), sxm, sxn, dtype) if bias else None,
                       alpha=alpha, beta=beta)

    @flyc.jit
    def launch(C: fx.Tensor, A: fx.Tensor, B: fx.Tensor, BIAS: fx.Tensor, M: fx.Int32, N: fx.Int32, K: fx.Int32,
               sam: fx.Int32, sak: fx.Int32, sbk: fx.Int32, sbn: fx.Int32, scm: fx.Int32, scn: fx.Int32,
               sxm: fx.Int32, sxn: fx.Int32, a_bytes: fx.Int32, b_bytes: fx.Int32, c_bytes: fx.Int32,
               x_bytes: fx.Int32, alpha: fx.Float32, beta: fx.Float32, stream: fx.Stream = fx.Stream(None)):
        flydsl_gemm(C, A, B, BIAS, M, N, K, sam, sak, sbk, sbn, scm, scn, sxm, sxn, a_bytes, b_bytes, c_bytes,
                    x_bytes, alpha, beta).launch(
            grid=((M + t.block_m - 1) // t.block_m, (N + t.block_n - 1) // t.block_n, 1),
            block=(t.threads, 1, 1), stream=stream)

    return launch


# ------------------------------------------------------------------------------ tier I, tier D


def _compile_job(job: dict[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    """Builder for ``runtime.flydsl`` (runs in its subprocess): the launcher and stand-in arguments."""
    problem, config = GemmProblem(**job["problem"]), GemmConfig(**job["config"])
    launch = build_launcher(problem.dtype, problem.a_k_major, problem.b_k_major, problem.bias, config, job["target"])
    c, a, b, x = (common.placeholder(problem.dtype) for _ in range(4))
    return launch, (c, a, b, x, 64, 64, 64, 64, 1, 1, 64, 64, 1, 0, 1, 1 << 13, 1 << 13, 1 << 13, 128, 1.0, 1.0)


def compile_asm(problem: GemmProblem, config: GemmConfig, target: str = "gfx950", *,
                cache: str | None = None) -> dict[str, str]:
    """The compiled kernel for ``target`` without a GPU: ``amdgcn`` (final ISA), ``hsaco_b64``,
    ``metadata`` (see ``runtime.flydsl``). Only the static variant matters (M, N, K are runtime)."""
    return isa_many([(problem, config, target)], cache=cache)[0]


def isa_many(jobs: list[tuple[GemmProblem, GemmConfig, str]], *, cache: str | None = None) -> list[dict[str, str]]:
    return common.compile_isa(__name__, NAME, TARGETS, jobs, reason=lambda p, c, t: refuse_config(p, c, t),
                              static=lambda p: replace(p, m=1, n=1, k=1, vec_ok=True, alpha=1.0, beta=1.0),
                              name=kernel_name, cache=cache)


def call(problem: GemmProblem, config: GemmConfig, target: str, *tensors: Any) -> Any:
    """Launch on a gfx950 or gfx1250 GPU (tier D). ``tensors``: (A, B) for mm, (bias, A, B) for addmm, in the
    op's argument order; returns C (M, N) in the input dtype."""
    import torch

    bias, a, b = (tensors if problem.bias else (None, *tensors))
    common.check_device(NAME, a)
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if config.vec > 1 and not common.aligned(16, a, b):
        config = replace(config, vec=1)  # a view that starts off a 16-byte boundary: one element per load
    x = bias.expand(m, n) if bias is not None else c
    launch = build_launcher(problem.dtype, problem.a_k_major, problem.b_k_major, problem.bias, config, target)
    launch(common.flat(c), common.flat(a), common.flat(b), common.flat(x), m, n, k,
           a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
           x.stride(0), x.stride(1), *(common.span_bytes(t) for t in (a, b, c, x)),
           problem.alpha, problem.beta, common.stream())
    return c


FAMILY = Family.of_module(__name__)
