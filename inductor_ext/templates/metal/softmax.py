"""Metal softmax over the last dimension for few rows of a large vocabulary (decode logits).

Each thread keeps an online (max, sum of exp) over its elements; SIMD groups and then the
threadgroup combine the pairs; a second pass over the row writes ``exp(x - max) / sum``. With
``chunks == 1`` one threadgroup owns a row (one kernel). With ``chunks > 1`` a row is split over
``chunks`` threadgroups so a single row fills the GPU: ``softmax_partials`` writes each chunk's
pair to a scratch buffer, ``softmax_normalize`` combines a row's pairs and writes its chunk.
fp32 math; NaN anywhere in a row makes the row NaN, -inf entries give 0, as torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from inductor_ext.templates.allowed import integer, one_of, size
from inductor_ext.templates.base import KernelSource, rendered
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.lang.msl import MSL
from inductor_ext.templates.metal import _msl

if TYPE_CHECKING:
    import torch

NAME = "metal.softmax"
TARGETS = ("mps",)
OPS = ("softmax",)
CHOICE_KIND = "extern"
CPU_EXECUTOR = _msl.CPU_EXECUTOR
# inductor-ext asm, counted in the MSL: the SIMD-group max and sum of the online softmax, and
# the barriers of the threadgroup-wide combine.
KEY_INSTRUCTIONS = {"mps": [("msl", r"\bsimd_max\("), ("msl", r"\bsimd_sum\("), ("msl", r"\bthreadgroup_barrier\(")]}

DTYPES = ("float32", "float16", "bfloat16")
MIN_COLUMNS = 1024  # shorter rows: Inductor's fused reduction does as well
MAX_CHUNKS = 64


@dataclass(frozen=True)
class Problem:
    rows: int = size()
    n: int = size()  # softmax length (the last dimension)
    dtype: str = one_of(DTYPES, "float32")
    out_dtype: str | None = one_of((None, *DTYPES), None)  # None: dtype (half_to_float gives float32)

    @property
    def result_dtype(self) -> str:
        return self.out_dtype or self.dtype


@dataclass(frozen=True)
class Config:
    threads: int = integer(1024, low=32, high=1024)  # threads per threadgroup (a multiple of 32)
    chunks: int = integer(1, low=1, high=MAX_CHUNKS)  # threadgroups per row


def problem_for(spec: OpSpec) -> Problem | str:
    """``softmax(x, dim)`` over the last dimension of x with rows of contiguous elements."""
    if spec.op != "softmax":
        return f"op {spec.op} is not softmax"
    (x,) = spec.inputs[:1]
    if x is None or not x.shape:
        return "needs a tensor of at least one dimension"
    dim = spec.scalars.get("dim", -1)
    if dim not in (-1, len(x.shape) - 1):
        return f"softmax over dim {dim}, not the last"
    n = x.shape[-1]
    rows = 1
    for s in x.shape[:-1]:
        rows *= s
    if not x.is_contiguous:
        return "rows must be contiguous (a strided 2-D view is served through run() only)"
    out = spec.out.dtype if spec.out.dtype != x.dtype else None
    return Problem(rows, n, x.dtype, out)


def refuse_problem(problem: Problem) -> str | None:
    if problem.dtype not in DTYPES or problem.result_dtype not in DTYPES:
        return f"dtypes {problem.dtype} -> {problem.result_dtype} not in {DTYPES}"
    if problem.n < MIN_COLUMNS:
        return f"rows of {problem.n} < {MIN_COLUMNS}: Inductor's fused softmax serves short rows"
    if problem.rows <= 0:
        return "no rows"
    return None


_WHOLE = (Config(1024, 1), Config(256, 1))
_SPLIT = (Config(256, 32), Config(256, 8))
ALL_CONFIGS = _WHOLE + _SPLIT  # every config a compiled graph may call (registered by name)


def configs(problem: Problem, target: str) -> list[Config]:
    """Split rows across threadgroups when there are too few rows to fill the GPU."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    whole = list(_WHOLE)
    split = [c for c in _SPLIT if problem.n >= c.chunks * 1024]
    return split + whole if problem.rows < 8 else whole + split


_HELPERS = """
// Online softmax state: m = running max, s = sum of exp(x - m). NaN poisons s; -inf adds nothing.
static inline void online(thread float& m, thread float& s, float v) {
  if (isnan(v)) { s = NAN; return; }
  if (v <= m) { if (v != -INFINITY) s += exp(v - m); return; }
  s = s * exp(m - v) + 1.0f;
  m = v;
}

// The pair of two halves, rescaled to their common max.
static inline float rescaled(float m, float s, float to) { return m == -INFINITY ? 0.0f : s * exp(m - to); }

// Combine every thread's (m, s) over the threadgroup; every thread gets the result.
static inline float2 threadgroup_combine(float m, float s, threadgroup float* pm, threadgroup float* ps,
                                         uint sg, uint lane, uint nsg) {
  float gm = simd_max(m);
  float gs = simd_sum(rescaled(m, s, gm));
  if (lane == 0) { pm[sg] = gm; ps[sg] = gs; }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg == 0) {
    float m2 = lane < nsg ? pm[lane] : -INFINITY;
    float s2 = lane < nsg ? ps[lane] : 0.0f;
    float tm = simd_max(m2);
    float ts = simd_sum(rescaled(m2, s2, tm));
    if (lane == 0) { pm[0] = tm; ps[0] = ts; }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return float2(pm[0], ps[0]);
}
"""


def _source(problem: Problem, c: Config) -> str:
    t, o = problem.dtype, problem.result_dtype
    x_in = MSL.pointer_param(t, "x", const=True)
    out = MSL.pointer_param(o, "out", const=False)
    attrs = ", ".join([MSL.attribute("uint2", "tgpos", "threadgroup_position_in_grid"),
                       MSL.attribute("uint", "tid", "thread_index_in_threadgroup"),
                       MSL.attribute("uint", "sg", "simdgroup_index_in_threadgroup"),
                       MSL.attribute("uint", "lane", "thread_index_in_simdgroup"),
                       MSL.attribute("uint", "nsg", "simdgroups_per_threadgroup")])
    n, stride_x, stride_o = (MSL.scalar_param("int64", name) for name in ("N", "stride_x", "stride_o"))
    partial = MSL.pointer_param("float32", "partial", const=False)
    load = "load1(xr + i)"
    head = f"{_msl.HEADER}{_HELPERS}\n// {NAME}: {c.threads} threads per threadgroup, {c.chunks} threadgroup(s) per row.\n"
    if c.chunks == 1:
        return head + f"""kernel void softmax_row(
    {MSL.bind(out, 0)}, {MSL.bind(x_in, 1)},
    {MSL.bind(n, 2)}, {MSL.bind(stride_x, 3)}, {MSL.bind(stride_o, 4)},
    {attrs}) {{
  threadgroup float pm[32], ps[32];
  {MSL.pointer(t, "xr")} = x + long(tgpos.y) * stride_x;
  float m = {MSL.literal(float("-inf"))}, s = {MSL.literal(0.0)};
  for (long i = tid; i < N; i += {c.threads}) online(m, s, {load});
  const float2 tot = threadgroup_combine(m, s, pm, ps, sg, lane, nsg);
  for (long i = tid; i < N; i += {c.threads})
    out[long(tgpos.y) * stride_o + i] = {_msl.store(o, MSL.math("exp", f"{load} - tot.x") + " / tot.y")};
}}
"""
    return head + f"""// The chunk of a row threadgroup (chunk, row) owns.
static inline long chunk_begin(long chunk, long N) {{ return min(N, chunk * ((N + {c.chunks - 1}) / {c.chunks})); }}

kernel void softmax_partials(
    {MSL.bind(partial, 0)}, {MSL.bind(x_in, 1)},
    {MSL.bind(n, 2)}, {MSL.bind(stride_x, 3)},
    {attrs}) {{
  threadgroup float pm[32], ps[32];
  {MSL.pointer(t, "xr")} = x + long(tgpos.y) * stride_x;
  const long end = chunk_begin(tgpos.x + 1, N);
  float m = {MSL.literal(float("-inf"))}, s = {MSL.literal(0.0)};
  for (long i = chunk_begin(tgpos.x, N) + tid; i < end; i += {c.threads}) online(m, s, {load});
  const float2 tot = threadgroup_combine(m, s, pm, ps, sg, lane, nsg);
  if (tid == 0) {{
    partial[2 * (long(tgpos.y) * {c.chunks} + tgpos.x)] = tot.x;
    partial[2 * (long(tgpos.y) * {c.chunks} + tgpos.x) + 1] = tot.y;
  }}
}}

kernel void softmax_normalize(
    {MSL.bind(out, 0)}, {MSL.bind(x_in, 1)}, {MSL.bind(MSL.pointer_param("float32", "partial", const=True), 2)},
    {MSL.bind(n, 3)}, {MSL.bind(stride_x, 4)}, {MSL.bind(stride_o, 5)},
    {attrs}) {{
  // Every thread combines its row's {c.chunks} pairs (a few dozen loads, from cache).
  {MSL.pointer("float32", "pr")} = partial + 2 * long(tgpos.y) * {c.chunks};
  float tm = -INFINITY;
  for (int j = 0; j < {c.chunks}; j++) tm = max(tm, pr[2 * j]);
  float ts = 0.0f;
  for (int j = 0; j < {c.chunks}; j++) ts += rescaled(pr[2 * j], pr[2 * j + 1], tm);
  {MSL.pointer(t, "xr")} = x + long(tgpos.y) * stride_x;
  const long end = chunk_begin(tgpos.x + 1, N);
  for (long i = chunk_begin(tgpos.x, N) + tid; i < end; i += {c.threads})
    out[long(tgpos.y) * stride_o + i] = {_msl.store(o, MSL.math("exp", f"{load} - tm") + " / ts")};
}}
"""


def _check(config: Config) -> None:
    if config.threads % 32 or not 32 <= config.threads <= 1024 or not 1 <= config.chunks <= MAX_CHUNKS:
        raise ValueError(f"bad config {config}: threads a multiple of 32 up to 1024, 1 to {MAX_CHUNKS} chunks")


def render(problem: Problem, config: Config, target: str) -> KernelSource:
    reason = refuse_problem(problem)
    if reason:
        raise ValueError(f"{NAME} cannot serve {problem}: {reason}")
    _check(config)
    grid, tg = [config.chunks, problem.rows, 1], [config.threads, 1, 1]
    names = ["softmax_row"] if config.chunks == 1 else ["softmax_partials", "softmax_normalize"]
    return KernelSource(name=names[-1], source=_source(problem, config), template=NAME, config=asdict(config),
                        launch={"kernels": [{"name": n, "grid": grid, "threadgroup": tg} for n in names]},
                        language="msl")


def call(problem: Problem, config: Config, target: str, x: "torch.Tensor") -> "torch.Tensor":
    """``softmax(x, -1)`` in ``problem.result_dtype``; x's rows may be strided (last dim contiguous)."""
    import torch

    from inductor_ext.runtime import metal

    if x.dim() < 1 or x.shape[-1] != problem.n or x.numel() != problem.rows * problem.n:
        raise ValueError(f"x {tuple(x.shape)} does not match {problem}")
    x2 = x.reshape(problem.rows, problem.n) if x.dim() != 2 else x
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    ks = rendered(render, problem, config, target)  # once per problem and config
    out = torch.empty(problem.rows, problem.n, dtype=getattr(torch, problem.result_dtype), device=x.device)
    grid, tg = ks.launch["kernels"][0]["grid"], ks.launch["kernels"][0]["threadgroup"]
    if config.chunks == 1:
        metal.launch(ks.source, "softmax_row", grid, tg, out, x2, problem.n, x2.stride(0), out.stride(0))
    else:
        partial = torch.empty(problem.rows * config.chunks * 2, dtype=torch.float32, device=x.device)
        metal.launch(ks.source, "softmax_partials", grid, tg, partial, x2, problem.n, x2.stride(0))
        metal.launch(ks.source, "softmax_normalize", grid, tg, out, x2, partial, problem.n, x2.stride(0),
                     out.stride(0))
    return out.view(x.shape)


def example_problem(m: int, n: int, k: int, dtype: str | None) -> Problem | str:
    """``inductor-ext asm --shape MxNxK``: softmax over M rows of N (K is not used)."""
    problem = Problem(m, n, dtype or "float32")
    return refuse_problem(problem) or problem


def compile_asm(problem: Problem, config: Config, target: str) -> dict[str, str]:
    """The MSL and the Metal-on-CPU executor's build of it (no Metal compiler on Linux)."""
    return _msl.compile_asm(render(problem, config, target))


FAMILY = Family.of_module(__name__)
