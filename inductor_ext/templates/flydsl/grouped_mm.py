"""FlyDSL ragged grouped GEMM for MoE on gfx950 (and gfx1250, on WMMA): ``F.grouped_mm(A, B, offs=offs)`` with A (T, K) holding
the tokens of every expert back to back, B (G, K, N) one matrix per expert and ``offs[g]`` the end
row of expert g; rows ``offs[g-1]:offs[g]`` of the result are ``A[those rows] @ B[g]`` (+ ``bias[g]``).
bf16/fp16 in; out in the same dtype or fp32 (``out_dtype``); fp32 accumulation on
``v_mfma_f32_16x16x32_{bf16,f16}``.

The grid does not depend on ``offs`` (it lives on the device): one workgroup per
``block_m x block_n`` tile of the (T, N) result. A workgroup counts, from ``offs``, the groups its
rows touch (usually one or two) and runs the K loop once per group with that group's B, its rows
masked to the group: every row below ``offs[-1]`` is written exactly once, by the group that
owns it; rows from ``offs[-1]`` on are not written (ATen leaves them undefined too). Both
layouts of A (K- or T-contiguous) and of each B[g] (K- or N-contiguous) are served, like
``flydsl.gemm``, whose K step this reuses.

Tier I: compiled for gfx950 and gfx1250; the tests assert the MFMA/WMMA and the loads. The host-side model
(``testing/flydsl_model.py``) runs this grid with the tiling's own index functions: writes once,
group boundaries (empty groups, a group ending inside a tile, rows past ``offs[-1]``), numerics vs
``kernels.matmul.grouped_mm_reference``. Tier D (``call``) needs a ROCm GPU.
"""

# No "from __future__ import annotations": FlyDSL reads the kernels' and structs' annotations as objects.
import functools
from dataclasses import dataclass, replace
from typing import Any

from inductor_ext.targets import amd
from inductor_ext.templates.allowed import flag, one_of, size
from inductor_ext.templates.base import KernelSource
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.flydsl import common
from inductor_ext.templates.flydsl import gemm
from inductor_ext.templates.flydsl.gemm import ALL_CONFIGS, DTYPES, GemmConfig, GemmProblem
from inductor_ext.templates.flydsl.tiling import GemmTiling

NAME = "flydsl.grouped_mm"
# Claimed only where tier I passes (tests/test_flydsl_grouped_mm.py).
TARGETS = ("gfx950", "gfx1250")
OPS = ("grouped_mm",)  # ext's lowering of aten._grouped_mm (lowering/ops/grouped_mm.py)
CHOICE_KIND = "extern"
OUT_DTYPES = ("bfloat16", "float16", "float32")

GroupedMmConfig = GemmConfig


@dataclass(frozen=True)
class GroupedMmProblem:
    """out[T, N]: rows offs[g-1]:offs[g] = A[rows] @ B[g] (+ bias[g]); G groups."""

    t: int = size()  # rows of A (tokens of all groups)
    n: int = size()
    k: int = size()
    groups: int = size()
    dtype: str = one_of(DTYPES, "bfloat16")
    out_dtype: str = one_of(OUT_DTYPES, "bfloat16")
    a_k_major: bool = flag(True)
    b_k_major: bool = flag(False)
    vec_ok: bool = flag(True)
    bias: bool = flag(False)


Problem, Config = GroupedMmProblem, GroupedMmConfig
KEY_INSTRUCTIONS = amd.key_instructions({
    "gfx950": ("mfma_bf16", "global_load_16b", "lds_read_16b", "store_2b"),
    "gfx1250": ("wmma_bf16", "global_load_16b", "lds_read_16b", "store_2b"),
})


def tiling(problem: GroupedMmProblem, config: GemmConfig, target: str = "gfx950") -> GemmTiling:
    return gemm.tiling(_as_gemm(problem), config, target)


def problem_for(spec: OpSpec) -> GroupedMmProblem | str:
    """``grouped_mm`` (mat_a, mat_b, offs, bias; ``out_dtype``) with a 2-D ragged A and a 3-D B."""
    if spec.op not in OPS:
        return f"{NAME} serves {OPS}, not {spec.op}"
    a, b, offs, bias = (*spec.inputs, None, None, None, None)[:4]
    if a is None or b is None or offs is None:
        return "grouped_mm needs A, B and offs"
    if len(a.shape) != 2 or len(b.shape) != 3:
        return (f"{NAME} serves the ragged MoE form (A 2-D [T, K] sliced by offs, B 3-D [G, K, N]); "
                f"got A {len(a.shape)}-D, B {len(b.shape)}-D")
    if offs.dtype != "int32" or len(offs.shape) != 1 or offs.shape[0] != b.shape[0]:
        return f"offs must be int32 [G={b.shape[0]}], got {offs.dtype} {offs.shape}"
    if a.dtype != b.dtype or a.dtype not in DTYPES:
        return f"{NAME} takes A and B of one dtype in {DTYPES}, got {a.dtype}, {b.dtype}"
    t, k = a.shape
    g, _, n = b.shape
    if bias is not None and (tuple(bias.shape) != (g, n) or bias.dtype != spec.out.dtype):
        return f"bias must be [G, N] = [{g}, {n}] in the output dtype, got {bias.shape} {bias.dtype}"
    a_k_major, a_vec = common.major(a.stride, 1, 0, k)
    b_k_major, b_vec = common.major(b.stride[1:], 0, 1, k)
    if b.stride[0] % 8:
        b_vec = False  # each group's matrix must start 16-byte aligned for 16-byte loads
    problem = GroupedMmProblem(t, n, k, g, a.dtype, spec.out.dtype, a_k_major, b_k_major, a_vec and b_vec,
                               bias is not None)
    return refuse_problem(problem) or problem


def refuse_problem(problem: GroupedMmProblem) -> str | None:
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if problem.out_dtype not in (problem.dtype, "float32"):
        return f"out_dtype {problem.out_dtype} must be the input dtype or float32"
    if min(problem.t, problem.n, problem.k, problem.groups) <= 0:
        return f"empty problem T={problem.t} N={problem.n} K={problem.k} G={problem.groups}"
    return common.size_reason(problem.t * problem.k, problem.groups * problem.k * problem.n, problem.t * problem.n,
                              elem_bytes=4)


def configs(problem: GroupedMmProblem, target: str) -> list[GemmConfig]:
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    table = [c for c in ALL_CONFIGS if (c.vec > 1) == problem.vec_ok]
    # MoE groups are short: rows per group ~ T / G; prefer tiles no taller than that.
    return common.fitting(table, max(16, problem.t // problem.groups), problem.n)


def _as_gemm(problem: GroupedMmProblem) -> GemmProblem:
    return GemmProblem(problem.t, problem.n, problem.k, problem.dtype, problem.a_k_major, problem.b_k_major,
                       problem.vec_ok)


def refuse_config(problem: GroupedMmProblem, config: GemmConfig, target: str = "gfx950") -> str | None:
    return gemm.refuse_config(_as_gemm(problem), config, target)


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> GroupedMmProblem | str:
    """``inductor-ext asm``'s problem for an MxNxK shape: M tokens over 8 experts, (K, N) weights."""
    problem = GroupedMmProblem(m, n, k, 8, dtype or "bfloat16", dtype or "bfloat16")
    return refuse_problem(problem) or problem


# ------------------------------------------------------------------------------------ render

def kernel_name(problem: GroupedMmProblem, config: GemmConfig) -> str:
    layout = ("k" if problem.a_k_major else "m") + ("k" if problem.b_k_major else "n")
    return (f"flydsl_grouped_mm_{problem.dtype}_{problem.out_dtype}_{layout}{'_bias' if problem.bias else ''}_"
            f"{config.name()}")


def render(problem: GroupedMmProblem, config: GemmConfig, target: str = "gfx950") -> KernelSource:
    name = kernel_name(problem, config) + ("" if target == "gfx950" else f"_{target}")
    return common.render_launcher(__name__, NAME, problem, config, target, name, tiling(problem, config, target),
                                  problem.t, problem.n, refuse_problem(problem) or refuse_config(problem, config, target))


# ------------------------------------------------------------------------------------- kernel


@functools.lru_cache(maxsize=None)
def build_launcher(dtype: str, out_dtype: str, a_k_major: bool, b_k_major: bool, bias: bool,
                   config: GemmConfig, target: str = "gfx950") -> Any:
    """The ``@flyc.jit`` launcher of one static variant. Arguments: C, A, B, OFFS, BIAS (flat
    views), T, N, K, G, element strides of A (t, k), B (g, k, n), C (t, n), BIAS (g, n), byte sizes."""
    import flydsl.compiler as flyc
    import flydsl.expr as fx

    from inductor_ext.templates.flydsl import dsl

    t = tiling(GroupedMmProblem(1, 1, 1, 1, dtype, out_dtype, a_k_major, b_k_major), config, target)
    reason = t.reason()
    if reason:
        raise ValueError(f"{NAME}: {reason}")

    Smem = dsl.smem_ab(t, dsl.numeric(dtype))

    @flyc.kernel
    def flydsl_grouped_mm(C: fx.Tensor, A: fx.Tensor, B: fx.Tensor, OFFS: fx.Tensor, BIAS: fx.Tensor, T: fx.Int32,
                          N: fx.Int32, K: fx.Int32, G: fx.Int32, sat: fx.Int32, sak: fx.Int32, sbg: fx.Int32,
                          sbk: fx.Int32, sbn: fx.Int32, sct: fx.Int32, scn: fx.Int32, sxg: fx.Int32, sxn: fx.Int32,
                          a_bytes: fx.Int32, b_bytes: fx.Int32, o_bytes: fx.Int32, c_bytes: fx.Int32,
                          x_bytes: fx.Int32):
        tid = fx.thread_idx.x
        m0, n0 = t.program_tile(fx.block_idx.x, fx.block_idx.y)
        lds = fx.SharedAllocator().allocate(Smem).peek()
        lds_a, lds_b = lds.a.ptr, lds.b.ptr
        rs_a, rs_b, rs_c = dsl.rsrc(A, a_bytes), dsl.rsrc(B, b_bytes), dsl.rsrc(C, c_bytes)
        rs_o = dsl.rsrc(OFFS, o_bytes)
        # Groups this tile's rows touch: g_first owns row m0, g_last the tile's last row.
        m_last = (m0 + t.block_m <= T).select(m0 + t.block_m, T) - 1
        g_first = fx.Int32(0)
        g_last = fx.Int32(0)
        for g in range(G):
            end = fx.Int32(dsl.load(fx.T.i32, rs_o, g * 4, g < G))
            g_first = g_first + (end <= m0).select(fx.Int32(1), fx.Int32(0))
            g_last = g_last + (end <= m_last).select(fx.Int32(1), fx.Int32(0))
        g_last = (g_last < G).select(g_last, G - 1)  # rows from offs[-1] on belong to no group
        for g in range(g_first, g_last + 1):
            start = fx.Int32(dsl.load(fx.T.i32, rs_o, (g - 1) * 4, g > 0))  # offs[-1] reads 0
            end = fx.Int32(dsl.load(fx.T.i32, rs_o, g * 4, g < G))
            acc = dsl.zero_acc(t)
            for k0 in range(0, K, t.block_k):
                acc = dsl.k_step(t, acc, tid, lds_a, lds_b, rs_a, rs_b, m0=m0, n0=n0, k0=k0, k_lim=K,
                                 row_ok=lambda r: r < T, col_ok=lambda c: c < N,
                                 a_strides=(sat, sak), b_strides=(sbn, sbk), elem=dtype, b_base=g * sbg)
            dsl.store_tile(t, acc, rs_c, tid, m0=m0, n0=n0, row_ok=lambda r: (r >= start) & (r < end) & (r < T),
                           n_lim=N, scm=sct, scn=scn, out=out_dtype,
                           bias=(dsl.rsrc(BIAS, x_bytes), 0, sxn, out_dtype, g * sxg) if bias else None,
                           alpha=fx.Float32(1.0), beta=fx.Float32(1.0))

    @flyc.jit
    def launch(C: fx.Tensor, A: fx.Tensor, B: fx.Tensor, OFFS: fx.Tensor, BIAS: fx.Tensor, T: fx.Int32, N: fx.Int32,
               K: fx.Int32, G: fx.Int32, sat: fx.Int32, sak: fx.Int32, sbg: fx.Int32, sbk: fx.Int32, sbn: fx.Int32,
               sct: fx.Int32, scn: fx.Int32, sxg: fx.Int32, sxn: fx.Int32, a_bytes: fx.Int32, b_bytes: fx.Int32,
               o_bytes: fx.Int32, c_bytes: fx.Int32, x_bytes: fx.Int32, stream: fx.Stream = fx.Stream(None)):
        flydsl_grouped_mm(C, A, B, OFFS, BIAS, T, N, K, G, sat, sak, sbg, sbk, sbn, sct, scn, sxg, sxn, a_bytes,
                          b_bytes, o_bytes, c_bytes, x_bytes).launch(
            grid=((T + t.block_m - 1) // t.block_m, (N + t.block_n - 1) // t.block_n, 1),
            block=(t.threads, 1, 1), stream=stream)

    return launch


# ------------------------------------------------------------------------------ tier I, tier D


def _compile_job(job: dict[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    """Builder for ``runtime.flydsl`` (runs in its subprocess)."""
    p, config = GroupedMmProblem(**job["problem"]), GemmConfig(**job["config"])
    launch = build_launcher(p.dtype, p.out_dtype, p.a_k_major, p.b_k_major, p.bias, config, job["target"])
    c, x = common.placeholder(p.out_dtype), common.placeholder(p.out_dtype)
    a, b, offs = common.placeholder(p.dtype), common.placeholder(p.dtype), common.placeholder("int32")
    return launch, (c, a, b, offs, x, 256, 256, 256, 8, 256, 1, 65536, 1, 256, 256, 1, 256, 1,
                    1 << 17, 1 << 20, 32, 1 << 18, 1 << 12)


def compile_asm(problem: GroupedMmProblem, config: GemmConfig, target: str = "gfx950", *,
                cache: str | None = None) -> dict[str, str]:
    """The compiled kernel for ``target`` (``amdgcn``, ``hsaco_b64``, ``metadata``); sizes are runtime."""
    return isa_many([(problem, config, target)], cache=cache)[0]


def isa_many(jobs: list[tuple[GroupedMmProblem, GemmConfig, str]], *, cache: str | None = None) -> list[dict[str, str]]:
    return common.compile_isa(__name__, NAME, TARGETS, jobs,
                              reason=lambda p, c, t: refuse_problem(p) or refuse_config(p, c, t),
                              static=lambda p: replace(p, t=1, n=1, k=1, groups=1, vec_ok=True), name=kernel_name,
                              cache=cache)


def call(problem: GroupedMmProblem, config: GemmConfig, target: str, a: Any, b: Any, offs: Any, bias: Any = None,
         *rest: Any) -> Any:
    """Launch on a gfx950 or gfx1250 GPU (tier D), in ``grouped_mm``'s argument order."""
    import torch

    common.check_device(NAME, a)
    t, k = a.shape
    g, _, n = b.shape
    c = torch.empty((t, n), dtype=getattr(torch, problem.out_dtype), device=a.device)
    if config.vec > 1 and not common.aligned(16, a, b):
        config = replace(config, vec=1)
    x = bias if bias is not None else c
    launch = build_launcher(problem.dtype, problem.out_dtype, problem.a_k_major, problem.b_k_major, problem.bias,
                            config, target)
    launch(common.flat(c), common.flat(a), common.flat(b), common.flat(offs), common.flat(x), t, n, k, g,
           a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1),
           x.stride(0) if bias is not None else 0, x.stride(-1), *(common.span_bytes(v) for v in (a, b, offs, c, x)),
           common.stream())
    return c


FAMILY = Family.of_module(__name__)
