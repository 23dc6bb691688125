"""Metal FP8 (e4m3) ``_scaled_mm``: ``out = (A @ B) * scale_a * scale_b (+ bias)``, tensorwise or
rowwise scales, e4m3 decoded in-kernel, fp32 accumulation.

Two paths, chosen by M:
- gemv (M <= 4, decode): each SIMD group owns ``columns`` output columns for all M rows; its 32
  lanes split K, ``vec`` bytes of A and B per lane per step (packed loads), ``simd_sum`` at the
  end. B must be contiguous along K (``_scaled_mm`` requires column-major B anyway).
- tiled (M > 4): ``block_m x block_n`` output tiles per threadgroup, K in ``block_k`` steps
  decoded into threadgroup memory; any strides. Either SIMT (``thread_m x thread_n`` outputs
  per thread) or, with ``mma``, 8x8 simdgroup matrices: e4m3 decodes exactly to half, so the
  tiles are staged as half and multiplied into float accumulators, one ``block_m / warps_m x
  block_n / warps_n`` sub-tile per SIMD group, staged through threadgroup memory for the epilogue.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from inductor_ext.targets.apple import THREADGROUP_MEMORY_BYTES
from inductor_ext.templates.allowed import flag, integer, one_of, size
from inductor_ext.templates.base import KernelSource, rendered
from inductor_ext.templates.family import Family, OpSpec, TensorSpec
from inductor_ext.templates.lang.msl import MSL
from inductor_ext.templates.metal import _msl

if TYPE_CHECKING:
    import torch

NAME = "metal.scaled_mm"
TARGETS = ("mps",)
OPS = ("scaled_mm",)  # Inductor's lowering name (lowering/ops/scaled_mm.py)
CHOICE_KIND = "extern"
CPU_EXECUTOR = _msl.CPU_EXECUTOR

OUT_DTYPES = ("bfloat16", "float16", "float32")
_E4M3 = "float8_e4m3fn"  # A and B
GEMV_MAX_M = 4


@dataclass(frozen=True)
class Problem:
    m: int = size()
    n: int = size()
    k: int = size()
    # "tensorwise" (one scale per operand) or "rowwise" (scale_a [M, 1], scale_b [1, N])
    scaling: str = one_of(("tensorwise", "rowwise"))
    out_dtype: str = one_of(OUT_DTYPES, "bfloat16")
    bias: bool = flag(False)  # bias [N] in out_dtype, added after scaling
    k_contiguous: bool = flag(True)  # A [M, K] and B [K, N] have stride 1 along K (B column-major)


@dataclass(frozen=True)
class Config:
    path: str = one_of(("gemv", "tiled"))
    simdgroups: int = integer(4, low=1, high=32)  # gemv: SIMD groups per threadgroup
    columns: int = integer(2, low=1, high=16)  # gemv: output columns per SIMD group
    vec: int = integer(8, low=4, high=32)  # gemv: consecutive k per lane per step (multiple of 4)
    block_m: int = integer(32, low=1, high=256)  # tiled
    block_n: int = integer(32, low=1, high=256)
    block_k: int = integer(16, low=1, high=256)
    thread_m: int = integer(4, low=1, high=16)
    thread_n: int = integer(4, low=1, high=16)
    mma: bool = flag(False)  # tiled: simdgroup matrices, warps_m x warps_n SIMD groups
    warps_m: int = integer(2, low=1, high=8)
    warps_n: int = integer(2, low=1, high=8)

    def name(self) -> str:
        """Only the fields the path uses (choice names, dumps)."""
        if self.path == "gemv":
            return f"gemv_s{self.simdgroups}_c{self.columns}_v{self.vec}"
        tile = f"{self.block_m}x{self.block_n}x{self.block_k}"
        return f"mma_{tile}_w{self.warps_m}x{self.warps_n}" if self.mma else f"tiled_{tile}_t{self.thread_m}x{self.thread_n}"

    @property
    def threads(self) -> int:
        if self.path == "gemv":
            return 32 * self.simdgroups
        if self.mma:
            return 32 * self.warps_m * self.warps_n
        return (self.block_m // self.thread_m) * (self.block_n // self.thread_n)


def _numel(t: TensorSpec) -> int:
    n = 1
    for s in t.shape:
        n *= s
    return n


def problem_for(spec: OpSpec) -> Problem | str:
    """``_scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype, ...)``."""
    if spec.op != "scaled_mm":
        return f"op {spec.op} is not scaled_mm"
    a, b, scale_a, scale_b, *rest = (*spec.inputs, None, None)
    bias, scale_result = rest[0], rest[1]
    if a is None or b is None or scale_a is None or scale_b is None:
        return "missing operand or scale"
    if a.dtype != "float8_e4m3fn" or b.dtype != "float8_e4m3fn":
        return f"operands are {a.dtype} x {b.dtype}; only float8_e4m3fn x float8_e4m3fn"
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return f"shapes {a.shape} x {b.shape} are not [M, K] x [K, N]"
    m, k = a.shape
    n = b.shape[1]
    if scale_result is not None:
        return "scale_result is not supported"
    if scale_a.dtype != "float32" or scale_b.dtype != "float32":
        return f"scales are {scale_a.dtype}/{scale_b.dtype}; only float32"
    if _numel(scale_a) == 1 and _numel(scale_b) == 1:
        scaling = "tensorwise"
    elif tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n):
        scaling = "rowwise"
    else:
        return f"scales {scale_a.shape} x {scale_b.shape} are neither tensorwise nor rowwise ([M, 1] x [1, N])"
    if bias is not None and (tuple(bias.shape) != (n,) or bias.dtype != spec.out.dtype):
        return f"bias {bias.shape} {bias.dtype} is not [N] in the output dtype {spec.out.dtype}"
    return Problem(m, n, k, scaling, spec.out.dtype, bias is not None,
                   k_contiguous=a.stride[1] == 1 and b.stride[0] == 1)


def refuse_problem(problem: Problem) -> str | None:
    if problem.out_dtype not in OUT_DTYPES:
        return f"out_dtype {problem.out_dtype} not in {OUT_DTYPES}"
    if problem.scaling not in ("tensorwise", "rowwise"):
        return f"scaling {problem.scaling!r} is neither tensorwise nor rowwise"
    if min(problem.m, problem.n, problem.k) <= 0:
        return f"empty problem {problem.m}x{problem.n}x{problem.k}"
    return None


_GEMV = (Config("gemv", 4, 2, 8), Config("gemv", 8, 1, 8), Config("gemv", 2, 4, 4))
_TILED = (Config("tiled", block_m=64, block_n=64, block_k=32, mma=True),
          Config("tiled", block_m=32, block_n=32, block_k=32, mma=True, warps_m=2, warps_n=2),
          Config("tiled", block_m=64, block_n=64, block_k=16), Config("tiled", block_m=32, block_n=32, block_k=16))
ALL_CONFIGS = _GEMV + _TILED  # every config a compiled graph may call (registered by name)


def configs(problem: Problem, target: str) -> list[Config]:
    """gemv configs for M <= 4 with B contiguous along K, tiled configs otherwise."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    if problem.m <= GEMV_MAX_M and problem.k_contiguous:
        return list(_GEMV)
    return list(_TILED)


def _check(problem: Problem, config: Config) -> None:
    if config.path == "gemv":
        if problem.m > GEMV_MAX_M or not problem.k_contiguous:
            raise ValueError(f"the gemv path serves M <= {GEMV_MAX_M} with A and B contiguous along K; got "
                             f"M={problem.m}, k-contiguous={problem.k_contiguous}")
        if config.vec % 4 or config.threads > 1024:
            raise ValueError(f"bad gemv config {config}")
    elif config.path == "tiled" and config.mma:
        sub_m, sub_n = config.block_m // config.warps_m, config.block_n // config.warps_n
        smem = 2 * (config.block_m + config.block_n) * config.block_k + 4 * config.block_m * config.block_n
        if (sub_m % 8 or sub_n % 8 or config.block_k % 8 or config.block_m % config.warps_m
                or config.block_n % config.warps_n or config.threads > 1024 or smem > THREADGROUP_MEMORY_BYTES):
            raise ValueError(f"bad mma config {config}: 8x8 multiples per SIMD group, at most 1024 threads and "
                             f"{THREADGROUP_MEMORY_BYTES} bytes of threadgroup memory ({smem})")
    elif config.path == "tiled":
        if config.block_m % config.thread_m or config.block_n % config.thread_n or config.threads > 1024:
            raise ValueError(f"bad tiled config {config}")
    else:
        raise ValueError(f"config path {config.path!r} is neither gemv nor tiled")


def _epilogue(problem: Problem, row: str, col: str, acc: str) -> str:
    """MSL: the output element value from the fp32 accumulator."""
    scale = ("scale_a[0] * scale_b[0]" if problem.scaling == "tensorwise"
             else f"scale_a[{row} * stride_sa] * scale_b[{col} * stride_sb]")
    value = f"{acc} * ({scale})"
    if problem.bias:
        value = f"{value} + load1(bias + {col} * stride_bias)"
    return _msl.store(problem.out_dtype, value)


def _params(problem: Problem, strides: list[str]) -> list[str]:
    params = [MSL.pointer_param(problem.out_dtype, "out", const=False), MSL.pointer_param(_E4M3, "a", const=True),
              MSL.pointer_param(_E4M3, "b", const=True), MSL.pointer_param("float32", "scale_a", const=True),
              MSL.pointer_param("float32", "scale_b", const=True)]
    if problem.bias:
        params.append(MSL.pointer_param(problem.out_dtype, "bias", const=True))
    params += [MSL.scalar_param("int64", s) for s in ["M", "N", "K", *strides]]
    if problem.scaling == "rowwise":
        params += [MSL.scalar_param("int64", "stride_sa"), MSL.scalar_param("int64", "stride_sb")]
    if problem.bias:
        params.append(MSL.scalar_param("int64", "stride_bias"))
    return params


def _render_gemv(problem: Problem, c: Config) -> str:
    params = _params(problem, ["stride_am", "stride_bn", "stride_om"])
    body = _msl.gemv_body(rows=problem.m, columns=c.columns, vec=c.vec)
    return f"""{_msl.HEADER}
// {NAME} gemv: {problem.m} rows, {c.simdgroups} SIMD groups x {c.columns} columns per threadgroup, {c.vec} k per lane.
kernel void scaled_mm_gemv(
    {_msl.signature(params)}) {{
  const long n_first = (long(tgpos.x) * {c.simdgroups} + sg) * {c.columns};
  {MSL.pointer(_E4M3, f"arow[{problem.m}]")};
  {MSL.pointer(_E4M3, f"bcol[{c.columns}]")};
  for (int r = 0; r < {problem.m}; r++) arow[r] = a + r * stride_am;
  // Columns past N compute on column N - 1 and are never stored.
  for (int c = 0; c < {c.columns}; c++) bcol[c] = b + {_msl.clamp_column('n_first + c')} * stride_bn;
{body}\
  if (lane == 0) {{
    for (int r = 0; r < {problem.m}; r++)
      for (int c = 0; c < {c.columns}; c++) {{
        const long n = n_first + c;
        if (n < N) out[r * stride_om + n] = {_epilogue(problem, "r", "n", "acc[r][c]")};
      }}
  }}
}}
"""


def _render_tiled(problem: Problem, c: Config) -> str:
    params = _params(problem, ["stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_om"])
    tn = c.block_n // c.thread_n
    return f"""{_msl.HEADER}
// {NAME} tiled: {c.block_m}x{c.block_n} outputs per threadgroup of {c.threads} threads, {c.thread_m}x{c.thread_n} each, k steps of {c.block_k}.
kernel void scaled_mm_tiled(
    {_msl.signature(params)}) {{
  {MSL.local_array("float32", "As", c.block_k, c.block_m)}
  {MSL.local_array("float32", "Bs", c.block_k, c.block_n)}
  const long m0 = long(tgpos.y) * {c.block_m}, n0 = long(tgpos.x) * {c.block_n};
  const uint tx = tid % {tn}, ty = tid / {tn};
  float acc[{c.thread_m}][{c.thread_n}];
  for (int i = 0; i < {c.thread_m}; i++)
    for (int j = 0; j < {c.thread_n}; j++) acc[i][j] = {MSL.literal(0.0)};
  for (long k0 = 0; k0 < K; k0 += {c.block_k}) {{
    // Decode this k step's tiles of A and B (zeros outside the matrices), k fastest.
    for (uint i = tid; i < {c.block_m * c.block_k}; i += {c.threads}) {{
      const uint kk = i % {c.block_k}, mm = i / {c.block_k};
      const long gm = m0 + mm, gk = k0 + kk;
      As[kk][mm] = (gm < M && gk < K) ? e4m3_to_float(a[gm * stride_am + gk * stride_ak]) : 0.0f;
    }}
    for (uint i = tid; i < {c.block_n * c.block_k}; i += {c.threads}) {{
      const uint kk = i % {c.block_k}, nn = i / {c.block_k};
      const long gn = n0 + nn, gk = k0 + kk;
      Bs[kk][nn] = (gn < N && gk < K) ? e4m3_to_float(b[gk * stride_bk + gn * stride_bn]) : 0.0f;
    }}
    {MSL.barrier()}
    for (uint kk = 0; kk < {c.block_k}; kk++) {{
      float av[{c.thread_m}], bv[{c.thread_n}];
      for (int i = 0; i < {c.thread_m}; i++) av[i] = As[kk][ty * {c.thread_m} + i];
      for (int j = 0; j < {c.thread_n}; j++) bv[j] = Bs[kk][tx * {c.thread_n} + j];
      for (int i = 0; i < {c.thread_m}; i++)
        for (int j = 0; j < {c.thread_n}; j++) acc[i][j] = {MSL.math("fma", "av[i]", "bv[j]", "acc[i][j]")};
    }}
    {MSL.barrier()}
  }}
  for (int i = 0; i < {c.thread_m}; i++)
    for (int j = 0; j < {c.thread_n}; j++) {{
      const long gm = m0 + ty * {c.thread_m} + i, gn = n0 + tx * {c.thread_n} + j;
      if (gm < M && gn < N) out[gm * stride_om + gn] = {_epilogue(problem, "gm", "gn", "acc[i][j]")};
    }}
}}
"""


def _render_mma(problem: Problem, c: Config) -> str:
    params = _params(problem, ["stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_om"])
    sub_m, sub_n = c.block_m // c.warps_m, c.block_n // c.warps_n
    fm, fn = sub_m // 8, sub_n // 8
    return f"""{_msl.HEADER}
// {NAME} tiled with simdgroup matrices: {c.block_m}x{c.block_n} outputs per threadgroup, {c.warps_m}x{c.warps_n} SIMD groups of
// {sub_m}x{sub_n} ({fm}x{fn} 8x8 accumulators each), k steps of {c.block_k}; e4m3 -> half is exact.
kernel void scaled_mm_mma(
    {_msl.signature(params)}) {{
  {MSL.local_array("float16", "As", f"{c.block_m} * {c.block_k}")}  // [m][k]
  {MSL.local_array("float16", "Bs", f"{c.block_k} * {c.block_n}")}  // [k][n]
  {MSL.local_array("float32", "Cs", f"{c.block_m} * {c.block_n}")}
  const long m0 = long(tgpos.y) * {c.block_m}, n0 = long(tgpos.x) * {c.block_n};
  const uint wm = sg / {c.warps_n}, wn = sg % {c.warps_n};
  simdgroup_float8x8 acc[{fm}][{fn}];
  for (int i = 0; i < {fm}; i++)
    for (int j = 0; j < {fn}; j++) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  for (long k0 = 0; k0 < K; k0 += {c.block_k}) {{
    for (uint i = tid; i < {c.block_m * c.block_k}; i += {c.threads}) {{
      const uint kk = i % {c.block_k}, mm = i / {c.block_k};
      const long gm = m0 + mm, gk = k0 + kk;
      As[mm * {c.block_k} + kk] = {MSL.cast("(gm < M && gk < K) ? e4m3_to_float(a[gm * stride_am + gk * stride_ak]) : 0.0f", "float16")};
    }}
    for (uint i = tid; i < {c.block_n * c.block_k}; i += {c.threads}) {{
      const uint kk = i % {c.block_k}, nn = i / {c.block_k};
      const long gn = n0 + nn, gk = k0 + kk;
      Bs[kk * {c.block_n} + nn] = {MSL.cast("(gn < N && gk < K) ? e4m3_to_float(b[gk * stride_bk + gn * stride_bn]) : 0.0f", "float16")};
    }}
    {MSL.barrier()}
    for (uint kk = 0; kk < {c.block_k}; kk += 8) {{
      simdgroup_half8x8 fa[{fm}], fb[{fn}];
      for (int i = 0; i < {fm}; i++) simdgroup_load(fa[i], As, {c.block_k}, ulong2(kk, wm * {sub_m} + 8 * i));
      for (int j = 0; j < {fn}; j++) simdgroup_load(fb[j], Bs, {c.block_n}, ulong2(wn * {sub_n} + 8 * j, kk));
      for (int i = 0; i < {fm}; i++)
        for (int j = 0; j < {fn}; j++) simdgroup_multiply_accumulate(acc[i][j], fa[i], fb[j], acc[i][j]);
    }}
    {MSL.barrier()}
  }}
  for (int i = 0; i < {fm}; i++)
    for (int j = 0; j < {fn}; j++)
      simdgroup_store(acc[i][j], Cs, {c.block_n}, ulong2(wn * {sub_n} + 8 * j, wm * {sub_m} + 8 * i));
  {MSL.barrier()}
  for (uint i = tid; i < {c.block_m * c.block_n}; i += {c.threads}) {{
    const long gm = m0 + i / {c.block_n}, gn = n0 + i % {c.block_n};
    if (gm < M && gn < N) out[gm * stride_om + gn] = {_epilogue(problem, "gm", "gn", "Cs[i]")};
  }}
}}
"""


def _grid(problem: Problem, c: Config) -> list[int]:
    if c.path == "gemv":
        per_group = c.simdgroups * c.columns
        return [-(-problem.n // per_group), 1, 1]
    return [-(-problem.n // c.block_n), -(-problem.m // c.block_m), 1]


def render(problem: Problem, config: Config, target: str) -> KernelSource:
    reason = refuse_problem(problem)
    if reason:
        raise ValueError(f"{NAME} cannot serve {problem}: {reason}")
    _check(problem, config)
    if config.path == "gemv":
        source, name = _render_gemv(problem, config), "scaled_mm_gemv"
    elif config.mma:
        source, name = _render_mma(problem, config), "scaled_mm_mma"
    else:
        source, name = _render_tiled(problem, config), "scaled_mm_tiled"
    return KernelSource(name=name, source=source, template=NAME, config=asdict(config),
                        launch={"grid": _grid(problem, config), "threadgroup": [config.threads, 1, 1]},
                        language="msl")


def call(problem: Problem, config: Config, target: str, a: "torch.Tensor", b: "torch.Tensor",
        scale_a: "torch.Tensor", scale_b: "torch.Tensor", bias: "torch.Tensor | None" = None) -> "torch.Tensor":
    """``torch._scaled_mm(a, b, scale_a, scale_b, bias, out_dtype=problem.out_dtype)``."""
    import torch

    from inductor_ext.runtime import metal

    ks = rendered(render, problem, config, target)  # once per problem and config
    if config.path == "gemv" and (a.stride(1) != 1 or b.stride(0) != 1):
        raise ValueError(f"the gemv path needs a and b contiguous along K; strides {a.stride()} and {b.stride()}")
    out = torch.empty(problem.m, problem.n, dtype=getattr(torch, problem.out_dtype), device=a.device)
    args: list[Any] = [out, a.view(torch.uint8), b.view(torch.uint8), scale_a, scale_b]
    if problem.bias:
        args.append(bias)
    args += [problem.m, problem.n, problem.k]
    if config.path == "gemv":
        args += [a.stride(0), b.stride(1), out.stride(0)]
    else:
        args += [a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0)]
    if problem.scaling == "rowwise":
        args += [scale_a.stride(0), scale_b.stride(1)]
    if problem.bias:
        args.append(bias.stride(0))
    metal.launch(ks.source, ks.name, ks.launch["grid"], ks.launch["threadgroup"], *args)
    return out


def example_problem(m: int, n: int, k: int, dtype: str | None) -> Problem:
    """``inductor-ext asm --shape MxNxK``: e4m3 x e4m3 with rowwise scales; ``dtype`` is the
    output dtype (default bfloat16)."""
    return Problem(m, n, k, "rowwise", dtype or "bfloat16")


def key_instructions(problem: Problem, config: Config, target: str) -> list[tuple[str, str]]:
    """inductor-ext asm, counted in the MSL: what each path is built on (the gemv's SIMD-group
    reduction, the 8x8 simdgroup-matrix multiply, the SIMT tiles' threadgroup staging)."""
    if config.path == "gemv":
        return [("msl", r"\bsimd_sum\(")]
    if config.mma:
        return [("msl", r"\bsimdgroup_multiply_accumulate\("), ("msl", r"\bsimdgroup_load\(")]
    return [("msl", r"\bthreadgroup_barrier\(")]


def compile_asm(problem: Problem, config: Config, target: str) -> dict[str, str]:
    """The MSL and the Metal-on-CPU executor's build of it (no Metal compiler on Linux)."""
    return _msl.compile_asm(render(problem, config, target))


FAMILY = Family.of_module(__name__)
