"""Metal gemv for decode-time linear layers: ``out = act(x @ w.T + bias)`` for M <= 4 rows of
bf16/fp16/fp32, fp32 accumulation, bias and activation (relu, gelu, silu) fused.

``F.linear`` reaches Inductor as ``mm(x, w.t())`` / ``addmm(bias, x, w.t())``: B = w.t() is
contiguous along K, which the gemv wants (each SIMD group streams ``columns`` weight rows, its
lanes splitting K ``vec`` elements at a time, then ``simd_sum``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from inductor_ext.templates.allowed import flag, integer, one_of, size
from inductor_ext.templates.base import KernelSource, rendered
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.lang.msl import MSL
from inductor_ext.templates.metal import _msl

if TYPE_CHECKING:
    import torch

NAME = "metal.linear_gemv"
TARGETS = ("mps",)
OPS = ("mm", "addmm")
CHOICE_KIND = "extern"
CPU_EXECUTOR = _msl.CPU_EXECUTOR
# inductor-ext asm: the SIMD-group reduction that ends every gemv (counted in the MSL).
KEY_INSTRUCTIONS = {"mps": [("msl", r"\bsimd_sum\(")]}

DTYPES = ("bfloat16", "float16", "float32")
MAX_M = 4


@dataclass(frozen=True)
class Problem:
    m: int = size()
    n: int = size()
    k: int = size()
    dtype: str = one_of(DTYPES, "bfloat16")  # x, w, bias and out
    bias: bool = flag(False)  # bias [N] (addmm with beta = alpha = 1)
    activation: str | None = one_of(_msl.ACTIVATIONS, None)  # None, "relu", "gelu" (erf), "silu"


@dataclass(frozen=True)
class Config:
    simdgroups: int = integer(4, low=1, high=32)  # SIMD groups per threadgroup
    columns: int = integer(2, low=1, high=16)  # output columns per SIMD group
    vec: int = integer(8, low=4, high=32)  # consecutive k per lane per step (multiple of 4)


def problem_for(spec: OpSpec) -> Problem | str:
    """``mm(x, b)`` or ``addmm(bias, x, b)`` with B [K, N] contiguous along K (``w.t()``)."""
    if spec.op == "mm":
        (x, b), bias = spec.inputs[:2], None
    elif spec.op == "addmm":
        bias, x, b = spec.inputs[:3]
        if spec.scalars.get("alpha", 1) != 1 or spec.scalars.get("beta", 1) != 1:
            return "addmm with alpha or beta other than 1"
    else:
        return f"op {spec.op} is not mm or addmm"
    if x is None or b is None or len(x.shape) != 2 or len(b.shape) != 2:
        return "operands are not 2-D"
    m, k = x.shape
    n = b.shape[1]
    if x.dtype != b.dtype or x.dtype != spec.out.dtype:
        return f"mixed dtypes {x.dtype} x {b.dtype} -> {spec.out.dtype}"
    if x.stride[1] != 1 or b.stride[0] != 1:
        return "gemv needs x and the weight contiguous along K (F.linear's layout)"
    if bias is not None:
        # [N], [1, N], or a row broadcast over M (stride 0), as Inductor's addmm passes it
        broadcast = all(size == 1 or stride == 0 for size, stride in zip(bias.shape[:-1], bias.stride[:-1]))
        if bias.shape[-1] != n or not broadcast or bias.dtype != x.dtype:
            return f"bias {bias.shape} (strides {bias.stride}) {bias.dtype} is not one row of {n} {x.dtype}"
    return Problem(m, n, k, x.dtype, bias is not None, spec.scalars.get("activation"))


def refuse_problem(problem: Problem) -> str | None:
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if problem.m > MAX_M:
        return f"M={problem.m} > {MAX_M}: not a gemv (decode) shape"
    if min(problem.m, problem.n, problem.k) <= 0:
        return f"empty problem {problem.m}x{problem.n}x{problem.k}"
    if problem.activation not in _msl.ACTIVATIONS:
        return f"activation {problem.activation!r} not in {list(_msl.ACTIVATIONS)}"
    return None


_CONFIGS = (Config(4, 2, 8), Config(8, 1, 8), Config(2, 4, 8), Config(4, 1, 4))
ALL_CONFIGS = _CONFIGS  # every config a compiled graph may call (registered by name)


def configs(problem: Problem, target: str) -> list[Config]:
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    return list(_CONFIGS)


def _source(problem: Problem, c: Config) -> str:
    t = problem.dtype
    params = [MSL.pointer_param(t, "out", const=False), MSL.pointer_param(t, "x", const=True),
              MSL.pointer_param(t, "w", const=True)]
    if problem.bias:
        params.append(MSL.pointer_param(t, "bias", const=True))
    params += [MSL.scalar_param("int64", s) for s in ("N", "K", "stride_xm", "stride_wn", "stride_om")]
    if problem.bias:
        params.append(MSL.scalar_param("int64", "stride_bias"))
    value = "acc[r][c]"
    if problem.bias:
        value = f"{value} + load1(bias + n * stride_bias)"
    result = _msl.store(t, _msl.activation(problem.activation, "v"))
    body = _msl.gemv_body(rows=problem.m, columns=c.columns, vec=c.vec)
    return f"""{_msl.HEADER}
// {NAME}: {problem.m} rows, {c.simdgroups} SIMD groups x {c.columns} columns per threadgroup, {c.vec} k per lane.
kernel void linear_gemv(
    {_msl.signature(params)}) {{
  const long n_first = (long(tgpos.x) * {c.simdgroups} + sg) * {c.columns};
  {MSL.pointer(t, f"arow[{problem.m}]")};
  {MSL.pointer(t, f"bcol[{c.columns}]")};
  for (int r = 0; r < {problem.m}; r++) arow[r] = x + r * stride_xm;
  // Columns past N compute on column N - 1 and are never stored.
  for (int c = 0; c < {c.columns}; c++) bcol[c] = w + {_msl.clamp_column('n_first + c')} * stride_wn;
{body}\
  if (lane == 0) {{
    for (int r = 0; r < {problem.m}; r++)
      for (int c = 0; c < {c.columns}; c++) {{
        const long n = n_first + c;
        if (n < N) {{
          const float v = {value};
          out[r * stride_om + n] = {result};
        }}
      }}
  }}
}}
"""


def render(problem: Problem, config: Config, target: str) -> KernelSource:
    reason = refuse_problem(problem)
    if reason:
        raise ValueError(f"{NAME} cannot serve {problem}: {reason}")
    if config.vec % 4 or 32 * config.simdgroups > 1024:
        raise ValueError(f"bad config {config}")
    grid = [-(-problem.n // (config.simdgroups * config.columns)), 1, 1]
    return KernelSource(name="linear_gemv", source=_source(problem, config), template=NAME, config=asdict(config),
                        launch={"grid": grid, "threadgroup": [32 * config.simdgroups, 1, 1]}, language="msl")


def call(problem: Problem, config: Config, target: str, *tensors: "torch.Tensor") -> "torch.Tensor":
    """``act(x @ b + bias)``, the tensors in the op's order: ``mm(x, b)`` or ``addmm(bias, x, b)``;
    ``b`` [K, N] contiguous along K (``w.t()``); bias [N], [1, N] or a row broadcast over M
    (stride 0)."""
    import torch

    from inductor_ext.runtime import metal

    if len(tensors) != 2 + problem.bias:
        raise ValueError(f"{NAME}: expected {'(bias, x, b)' if problem.bias else '(x, b)'}, got {len(tensors)} tensors")
    bias, x, b = tensors if problem.bias else (None, *tensors)
    ks = rendered(render, problem, config, target)  # once per problem and config
    if x.stride(1) != 1 or b.stride(0) != 1:
        raise ValueError(f"gemv needs x and b contiguous along K; strides {x.stride()} and {b.stride()}")
    out = torch.empty(problem.m, problem.n, dtype=x.dtype, device=x.device)
    args: list[Any] = [out, x, b]
    if problem.bias:
        args.append(bias)
    args += [problem.n, problem.k, x.stride(0), b.stride(1), out.stride(0)]
    if problem.bias:
        args.append(bias.stride(-1))
    metal.launch(ks.source, ks.name, ks.launch["grid"], ks.launch["threadgroup"], *args)
    return out


def example_problem(m: int, n: int, k: int, dtype: str | None) -> Problem | str:
    """``inductor-ext asm --shape MxNxK``: ``F.linear`` of M rows, N outputs, K inputs."""
    problem = Problem(m, n, k, dtype or "bfloat16")
    return refuse_problem(problem) or problem


def compile_asm(problem: Problem, config: Config, target: str) -> dict[str, str]:
    """The MSL and the Metal-on-CPU executor's build of it (no Metal compiler on Linux)."""
    return _msl.compile_asm(render(problem, config, target))


FAMILY = Family.of_module(__name__)
