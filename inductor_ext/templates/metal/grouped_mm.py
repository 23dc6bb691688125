"""Metal ragged grouped gemv for MoE decode: ``torch._grouped_mm(a [rows, K], b [G, K, N], offs)``.

``offs`` holds cumulative row ends per expert group (rows ``offs[g-1]:offs[g]`` use ``b[g]``).
Decode has few rows, each usually routed to a different expert, so each threadgroup takes one
row and a block of output columns: it finds the row's group in ``offs``, then runs the SIMD-group
gemv over that group's weights (B contiguous along K, as ``w.transpose(-2, -1)`` is). Rows past
``offs[-1]`` are written as zeros (torch leaves them undefined).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from inductor_ext.templates.allowed import integer, one_of, size
from inductor_ext.templates.base import KernelSource, rendered
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.lang.msl import MSL
from inductor_ext.templates.metal import _msl

if TYPE_CHECKING:
    import torch

NAME = "metal.grouped_mm"
TARGETS = ("mps",)
OPS = ("grouped_mm",)  # Inductor's lowering name (lowering/ops/grouped_mm.py)
CHOICE_KIND = "extern"
CPU_EXECUTOR = _msl.CPU_EXECUTOR
KEY_INSTRUCTIONS = {"mps": [("msl", r"\bsimd_sum\(")]}  # inductor-ext asm, counted in the MSL

DTYPES = ("bfloat16", "float16", "float32")
MAX_ROWS = 64  # beyond this it is a prefill: a tiled grouped GEMM reuses weights across rows


@dataclass(frozen=True)
class Problem:
    rows: int = size()
    n: int = size()
    k: int = size()
    groups: int = size()
    dtype: str = one_of(DTYPES, "bfloat16")  # a and b
    out_dtype: str | None = one_of((None, *DTYPES), None)  # None: dtype

    @property
    def result_dtype(self) -> str:
        return self.out_dtype or self.dtype


@dataclass(frozen=True)
class Config:
    simdgroups: int = integer(4, low=1, high=32)
    columns: int = integer(2, low=1, high=16)
    vec: int = integer(8, low=4, high=32)


def problem_for(spec: OpSpec) -> Problem | str:
    """``_grouped_mm(mat_a, mat_b, offs, bias=None, out_dtype=None)`` in the 2-D x 3-D layout."""
    if spec.op != "grouped_mm":
        return f"op {spec.op} is not grouped_mm"
    a, b, offs, bias = (*spec.inputs, None, None, None, None)[:4]
    if a is None or b is None or offs is None:
        return "needs mat_a, mat_b and offs"
    if bias is not None:
        return "bias is not supported"
    if len(a.shape) != 2 or len(b.shape) != 3 or a.shape[1] != b.shape[1]:
        return f"shapes {a.shape} x {b.shape} are not [rows, K] x [G, K, N]"
    if tuple(offs.shape) != (b.shape[0],) or offs.dtype != "int32":
        return f"offs {offs.shape} {offs.dtype} is not int32 [G]"
    if a.dtype != b.dtype:
        return f"mixed dtypes {a.dtype} x {b.dtype}"
    if a.stride[1] != 1 or b.stride[1] != 1:
        return "gemv needs mat_a and mat_b contiguous along K (mat_b = w.transpose(-2, -1))"
    out = spec.out.dtype if spec.out.dtype != a.dtype else None
    return Problem(a.shape[0], b.shape[2], a.shape[1], b.shape[0], a.dtype, out)


def refuse_problem(problem: Problem) -> str | None:
    if problem.dtype not in DTYPES or problem.result_dtype not in DTYPES:
        return f"dtypes {problem.dtype} -> {problem.result_dtype} not in {DTYPES}"
    if problem.rows > MAX_ROWS:
        return f"{problem.rows} rows > {MAX_ROWS}: a prefill, not a decode grouped GEMM"
    if min(problem.rows, problem.n, problem.k, problem.groups) <= 0:
        return f"empty problem {problem}"
    return None


_CONFIGS = (Config(4, 2, 8), Config(8, 1, 8), Config(2, 4, 8))
ALL_CONFIGS = _CONFIGS  # every config a compiled graph may call (registered by name)


def configs(problem: Problem, target: str) -> list[Config]:
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    return list(_CONFIGS)


def _source(problem: Problem, c: Config) -> str:
    t, o = problem.dtype, problem.result_dtype
    params = [MSL.pointer_param(o, "out", const=False), MSL.pointer_param(t, "a", const=True),
              MSL.pointer_param(t, "b", const=True), MSL.pointer_param("int32", "offs", const=True)]
    params += [MSL.scalar_param("int64", s) for s in ("G", "N", "K", "stride_am", "stride_bg", "stride_bn", "stride_om")]
    body = _msl.gemv_body(rows=1, columns=c.columns, vec=c.vec)
    return f"""{_msl.HEADER}
// {NAME}: one row per threadgroup row, {c.simdgroups} SIMD groups x {c.columns} columns, {c.vec} k per lane.
kernel void grouped_mm_gemv(
    {_msl.signature(params)}) {{
  const long row = tgpos.y;
  const long n_first = (long(tgpos.x) * {c.simdgroups} + sg) * {c.columns};
  // The row's group: the first whose cumulative end is past it (uniform across the threadgroup).
  long g = 0;
  while (g < G && offs[g] <= row) g++;
  if (g == G) {{
    if (lane == 0)
      for (int c = 0; c < {c.columns}; c++)
        if (n_first + c < N) out[row * stride_om + n_first + c] = {_msl.store(o, MSL.literal(0.0))};
    return;
  }}
  {MSL.pointer(t, "arow[1]")} = {{a + row * stride_am}};
  {MSL.pointer(t, f"bcol[{c.columns}]")};
  // Columns past N compute on column N - 1 and are never stored.
  for (int c = 0; c < {c.columns}; c++) bcol[c] = b + g * stride_bg + {_msl.clamp_column('n_first + c')} * stride_bn;
{body}\
  if (lane == 0)
    for (int c = 0; c < {c.columns}; c++)
      if (n_first + c < N) out[row * stride_om + n_first + c] = {_msl.store(o, "acc[0][c]")};
}}
"""


def render(problem: Problem, config: Config, target: str) -> KernelSource:
    reason = refuse_problem(problem)
    if reason:
        raise ValueError(f"{NAME} cannot serve {problem}: {reason}")
    if config.vec % 4 or 32 * config.simdgroups > 1024:
        raise ValueError(f"bad config {config}")
    grid = [-(-problem.n // (config.simdgroups * config.columns)), problem.rows, 1]
    return KernelSource(name="grouped_mm_gemv", source=_source(problem, config), template=NAME,
                        config=asdict(config), launch={"grid": grid, "threadgroup": [32 * config.simdgroups, 1, 1]},
                        language="msl")


def call(problem: Problem, config: Config, target: str, a: "torch.Tensor", b: "torch.Tensor",
        offs: "torch.Tensor") -> "torch.Tensor":
    """``torch._grouped_mm(a, b, offs=offs, out_dtype=problem.result_dtype)``."""
    import torch

    from inductor_ext.runtime import metal

    if a.stride(1) != 1 or b.stride(1) != 1:
        raise ValueError(f"gemv needs a and b contiguous along K; strides {a.stride()} and {b.stride()}")
    ks = rendered(render, problem, config, target)  # once per problem and config
    out = torch.empty(problem.rows, problem.n, dtype=getattr(torch, problem.result_dtype), device=a.device)
    args: list[Any] = [out, a, b, offs, problem.groups, problem.n, problem.k, a.stride(0), b.stride(0), b.stride(2),
                       out.stride(0)]
    metal.launch(ks.source, ks.name, ks.launch["grid"], ks.launch["threadgroup"], *args)
    return out


def example_problem(m: int, n: int, k: int, dtype: str | None) -> Problem | str:
    """``inductor-ext asm --shape MxNxK``: M routed rows over 8 experts of [K, N] weights."""
    problem = Problem(m, n, k, 8, dtype or "bfloat16")
    return refuse_problem(problem) or problem


def compile_asm(problem: Problem, config: Config, target: str) -> dict[str, str]:
    """The MSL and the Metal-on-CPU executor's build of it (no Metal compiler on Linux)."""
    return _msl.compile_asm(render(problem, config, target))


FAMILY = Family.of_module(__name__)
