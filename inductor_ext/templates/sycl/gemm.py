"""SYCL dense GEMM / gemv template: C = alpha * (A @ B) (+ beta * bias) for fp32 / fp16 / bf16,
fp32 accumulation, any strides (transposed and sliced operands included).

Two kernels, one family (the config's ``kind`` picks):

- ``tiled``: a work-group computes a ``tile_m x tile_n`` tile of C. Each step over K stages a
  ``tile_k``-deep slice of A and of B in work-group local memory (zero-filled past the edges, so
  no lane branches around a barrier); each 16-lane sub-group then computes ``sg_rows`` rows x
  ``16 * lane_cols`` columns, lane ``l`` owning columns ``l, l + 16, ...``. Every lane reads one
  A value per step from local memory and the sub-group shares them with ``select_from_group``.
- ``gemv`` (M <= 8, decode): each sub-group computes one column of C for all M rows: its lanes
  split K, and ``reduce_over_group`` adds their partial sums. No local memory, no barrier.

Kernels are SYCL free functions (``nd_range_kernel<1>``), compiled at run time by
``runtime/sycl``; ``call()`` launches them on torch's XPU queue, or on Intel's OpenCL CPU device
for CPU tensors (tier C, ``options={"interpret": True}``). M, N, K, the strides, alpha and beta are
kernel arguments, so one build serves every shape of a (dtype, bias, config): a decision's
candidates are built together by ``prebuild()`` (one compiler run), later shapes find them built.

``compile_asm()`` shows the SPIR-V module Intel's run-time compiler produced (what an Intel GPU's
driver compiles to its ISA; there is no GPU ISA without one), with its sub-group operations.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Sequence

from inductor_ext.targets.intel import SYCL_LOCAL_MEMORY_LIMIT, SYCL_SUB_GROUP_SIZE, SYCL_WORK_GROUP_LIMIT
from inductor_ext.templates.allowed import flag, integer, number, one_of, size
from inductor_ext.templates.base import KernelSource
from inductor_ext.templates.family import Family, OpSpec, TensorSpec
from inductor_ext.templates.lang.sycl import HELPERS, HELPERS_NAME, SYCL

if TYPE_CHECKING:
    import torch

NAME = "sycl.gemm"
# Claimed where tier C passes: the kernels generated for xpu, run on Intel's OpenCL CPU device
# (tests/test_sycl_gemm.py).
TARGETS = ("xpu",)
OPS = ("mm", "addmm")
CHOICE_KIND = "extern"
CPU_EXECUTOR = "Intel's OpenCL CPU device"  # how interpret mode runs it on CPU tensors

DTYPES = ("float32", "float16", "bfloat16")
GEMV_MAX_M = 8
LANES = SYCL_SUB_GROUP_SIZE

# Kernel parameters, in order, with the runtime's kinds.
PARAMS = (
    ("A", "ptr"), ("B", "ptr"), ("C", "ptr"), ("BIAS", "ptr"), ("M", "i64"), ("N", "i64"), ("K", "i64"),
    ("stride_am", "i64"), ("stride_ak", "i64"), ("stride_bk", "i64"), ("stride_bn", "i64"),
    ("stride_cm", "i64"), ("stride_cn", "i64"), ("stride_bias_m", "i64"), ("stride_bias_n", "i64"),
    ("alpha", "f32"), ("beta", "f32"),
)
PARAM_KINDS = tuple(kind for _, kind in PARAMS)


@dataclass(frozen=True)
class GemmProblem:
    """C[m, n] = alpha * (A[m, k] @ B[k, n]) (+ beta * bias, broadcast to [m, n]); one dtype."""

    m: int = size()
    n: int = size()
    k: int = size()
    dtype: str = one_of(DTYPES, "float32")
    bias: bool = flag(False)
    alpha: float = number(1.0)
    beta: float = number(1.0)

    @property
    def adds_bias(self) -> bool:
        """Whether the kernel reads the bias: addmm with beta == 0 ignores it (NaNs included), as torch."""
        return self.bias and self.beta != 0


@dataclass(frozen=True)
class GemmConfig:
    kind: str = one_of(("tiled", "gemv"), "tiled")
    # tiled: the work-group tile, the K slice staged per step, one sub-group's rows, one lane's columns
    # (0 where the kind does not use the field; check() says what fits together)
    tile_m: int = integer(0, low=0, high=1024)
    tile_n: int = integer(0, low=0, high=1024)
    tile_k: int = integer(0, low=0, high=1024)
    sg_rows: int = integer(0, low=0, high=LANES)
    lane_cols: int = integer(0, low=0, high=64)
    # gemv: rows each sub-group keeps (>= M), sub-groups (columns) per work-group
    rows: int = integer(0, low=0, high=GEMV_MAX_M)
    sub_groups: int = integer(0, low=0, high=SYCL_WORK_GROUP_LIMIT // LANES)

    def name(self) -> str:
        if self.kind == "gemv":
            return f"gemv_r{self.rows}_s{self.sub_groups}"
        return f"tiled_{self.tile_m}x{self.tile_n}x{self.tile_k}_r{self.sg_rows}_c{self.lane_cols}"

    def work_group(self) -> int:
        if self.kind == "gemv":
            return self.sub_groups * LANES
        return (self.tile_m // self.sg_rows) * (self.tile_n // (LANES * self.lane_cols)) * LANES

    def check(self) -> str | None:
        """None when the config is well formed, else what is wrong."""
        if self.kind == "gemv":
            if self.rows not in (1, 2, 4, 8) or not 1 <= self.sub_groups <= SYCL_WORK_GROUP_LIMIT // LANES:
                return f"gemv needs rows in 1, 2, 4, 8 and 1..{SYCL_WORK_GROUP_LIMIT // LANES} sub-groups: {self}"
            return None
        if self.kind != "tiled":
            return f"kind {self.kind!r} is not 'tiled' or 'gemv'"
        if min(self.tile_m, self.tile_n, self.tile_k, self.sg_rows, self.lane_cols) < 1:
            return f"tiled needs positive tile_m, tile_n, tile_k, sg_rows and lane_cols: {self}"
        if self.sg_rows > LANES or self.tile_m % self.sg_rows:
            return f"sg_rows {self.sg_rows} must be 1..{LANES} and divide tile_m {self.tile_m}"
        if self.lane_cols < 1 or self.tile_n % (LANES * self.lane_cols):
            return f"tile_n {self.tile_n} must be a multiple of {LANES} x lane_cols {self.lane_cols}"
        if self.work_group() > SYCL_WORK_GROUP_LIMIT:
            return f"work-group {self.work_group()} exceeds {SYCL_WORK_GROUP_LIMIT}"
        if 4 * (self.tile_m * (self.tile_k + 1) + self.tile_k * self.tile_n) > SYCL_LOCAL_MEMORY_LIMIT:
            return f"tiles of {self} exceed {SYCL_LOCAL_MEMORY_LIMIT} bytes of local memory"
        return None


def _tensor_dtype(t: TensorSpec | None) -> str | None:
    return t.dtype if t is not None else None


def problem_for(spec: OpSpec) -> GemmProblem | str:
    """The problem of an ``mm`` (inputs: A, B) or ``addmm`` (bias, A, B; alpha, beta), or why this
    family skips it."""
    if spec.op not in OPS:
        return f"sycl.gemm serves {OPS}, not {spec.op}"
    if spec.op == "mm":
        a, b = spec.inputs
        bias = None
    else:
        bias, a, b = spec.inputs
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return "sycl.gemm needs 2-D A and B"
    if bias is not None and (len(bias.shape) > 2 or any(s not in (1, d) for s, d in
                                                        zip(reversed(bias.shape), (b.shape[1], a.shape[0])))):
        return f"bias of shape {bias.shape} does not broadcast to [{a.shape[0]}, {b.shape[1]}]"
    dtypes = {_tensor_dtype(a), _tensor_dtype(b), spec.out.dtype} | ({bias.dtype} if bias is not None else set())
    if len(dtypes) != 1:
        return f"sycl.gemm needs one dtype for A, B, bias and C; got {sorted(d for d in dtypes if d)}"
    problem = GemmProblem(a.shape[0], b.shape[1], a.shape[1], a.dtype, bias=bias is not None,
                          alpha=float(spec.scalars.get("alpha", 1.0)), beta=float(spec.scalars.get("beta", 1.0)))
    return refuse_problem(problem) or problem


def refuse_problem(problem: GemmProblem) -> str | None:
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if min(problem.m, problem.n, problem.k) <= 0:
        return f"empty problem {problem.m}x{problem.n}x{problem.k}"
    return None


_TILED_CONFIGS = (
    GemmConfig("tiled", 64, 64, 16, 8, 2),  # 256 work-items, 32 accumulators per lane
    GemmConfig("tiled", 32, 64, 16, 8, 2),  # 128 work-items
    GemmConfig("tiled", 16, 64, 32, 4, 2),  # short M: 128 work-items, deeper K slices
)
_GEMV_SUB_GROUPS = 8
_GEMV_CONFIGS = tuple(GemmConfig("gemv", rows=rows, sub_groups=_GEMV_SUB_GROUPS) for rows in (1, 2, 4, 8))
ALL_CONFIGS = _GEMV_CONFIGS + _TILED_CONFIGS  # every config a compiled graph may call (registered by name)
Problem, Config = GemmProblem, GemmConfig


def configs(problem: GemmProblem, target: str) -> list[GemmConfig]:
    """Default candidates, best guess first: gemv for decode shapes, then tiles that fit."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    found = []
    if problem.m <= GEMV_MAX_M:
        rows = 1 << max(problem.m - 1, 0).bit_length()
        found.append(GemmConfig("gemv", rows=rows, sub_groups=_GEMV_SUB_GROUPS))
    fitting = [c for c in _TILED_CONFIGS if c.tile_m <= max(16, 2 * problem.m)]
    return found + (fitting or [_TILED_CONFIGS[-1]])


def refuse_config(problem: GemmProblem, config: GemmConfig, target: str) -> str | None:
    """None when ``config`` can compute ``problem``, else why not (a gemv keeps at most ``rows`` rows)."""
    reason = config.check()
    if reason is None and config.kind == "gemv" and problem.m > config.rows:
        reason = f"gemv with {config.rows} rows cannot serve M={problem.m}"
    return reason


def kernel_name(problem: GemmProblem, config: GemmConfig) -> str:
    """Names what the source depends on (dtype, bias, config), never the shape: one build per name."""
    return f"ext_sycl_gemm_{problem.dtype}{'_bias' if problem.adds_bias else ''}_{config.name()}"


def _signature(name: str, dtype: str) -> str:
    types = {"A": dtype, "B": dtype, "C": dtype, "BIAS": dtype}
    params = []
    for param, kind in PARAMS:
        if kind == "ptr":
            params.append(SYCL.pointer_param(types[param], param, const=param != "C"))
        else:
            params.append(SYCL.scalar_param("int64" if kind == "i64" else "float32", param))
    return SYCL.kernel_signature(name, params, 1, SYCL_SUB_GROUP_SIZE)


def _epilogue(problem: GemmProblem, value: str, indent: str) -> str:
    bias = (f"{indent}v += beta * {SYCL.widen('BIAS[m * stride_bias_m + n * stride_bias_n]', problem.dtype)};\n"
            if problem.adds_bias else "")
    return (f"{indent}float v = alpha * {value};\n{bias}"
            f"{indent}C[m * stride_cm + n * stride_cn] = {SYCL.cast('v', problem.dtype)};\n")


_TILED = """\
#include "{helpers}"

// sycl.gemm, tiled: C = alpha * (A @ B){bias_note}, fp32 accumulation.
{signature} {{
  constexpr int TILE_M = {tile_m}, TILE_N = {tile_n}, TILE_K = {tile_k};
  constexpr int SG_ROWS = {sg_rows}, LANE_COLS = {lane_cols}, LANES = {lanes};
  constexpr int SG_N = TILE_N / (LANES * LANE_COLS), WORK_GROUP = {work_group};
  const auto item = sycl::ext::oneapi::this_work_item::get_nd_item<1>();
  const auto sg = item.get_sub_group();
  // +1 column: the lanes of a sub-group read different rows of one column without bank conflicts
  auto& a_tile = *sycl::ext::oneapi::group_local_memory_for_overwrite<float[TILE_M][TILE_K + 1]>(item.get_group());
  auto& b_tile = *sycl::ext::oneapi::group_local_memory_for_overwrite<float[TILE_K][TILE_N]>(item.get_group());
  const int64_t tiles_n = (N + TILE_N - 1) / TILE_N;
  const int64_t m0 = static_cast<int64_t>(item.get_group_linear_id() / tiles_n) * TILE_M;
  const int64_t n0 = static_cast<int64_t>(item.get_group_linear_id() % tiles_n) * TILE_N;
  const int lid = item.get_local_linear_id();
  const int lane = sg.get_local_linear_id();
  const int row0 = (sg.get_group_linear_id() / SG_N) * SG_ROWS;
  const int col0 = (sg.get_group_linear_id() % SG_N) * LANES * LANE_COLS;
  float acc[SG_ROWS][LANE_COLS] = {{}};
  // Every work-item runs every step: the barriers below are in uniform control flow.
  for (int64_t k0 = 0; k0 < K; k0 += TILE_K) {{
    for (int e = lid; e < TILE_M * TILE_K; e += WORK_GROUP) {{
      const int64_t m = m0 + e / TILE_K, k = k0 + e % TILE_K;
      a_tile[e / TILE_K][e % TILE_K] = (m < M && k < K) ? {load_a} : 0.0f;
    }}
    for (int e = lid; e < TILE_K * TILE_N; e += WORK_GROUP) {{
      const int64_t k = k0 + e / TILE_N, n = n0 + e % TILE_N;
      b_tile[e / TILE_N][e % TILE_N] = (k < K && n < N) ? {load_b} : 0.0f;
    }}
    sycl::group_barrier(item.get_group());
#pragma unroll
    for (int kk = 0; kk < TILE_K; ++kk) {{
      const float a_lane = a_tile[row0 + lane % SG_ROWS][kk];  // lane r holds row r
      float b[LANE_COLS];
#pragma unroll
      for (int j = 0; j < LANE_COLS; ++j) b[j] = b_tile[kk][col0 + lane + LANES * j];
#pragma unroll
      for (int r = 0; r < SG_ROWS; ++r) {{
        const float a = sycl::select_from_group(sg, a_lane, r);
#pragma unroll
        for (int j = 0; j < LANE_COLS; ++j) acc[r][j] += a * b[j];
      }}
    }}
    sycl::group_barrier(item.get_group());
  }}
  for (int r = 0; r < SG_ROWS; ++r) {{
    for (int j = 0; j < LANE_COLS; ++j) {{
      const int64_t m = m0 + row0 + r, n = n0 + col0 + lane + LANES * j;
      if (m < M && n < N) {{
{epilogue}      }}
    }}
  }}
}}
"""

_GEMV = """\
#include "{helpers}"

// sycl.gemm, gemv (M <= {rows}): C = alpha * (A @ B){bias_note}, fp32 accumulation. One sub-group
// per column of C: its lanes split K, reduce_over_group adds their partial sums.
{signature} {{
  constexpr int ROWS = {rows}, SUB_GROUPS = {sub_groups}, LANES = {lanes};
  const auto item = sycl::ext::oneapi::this_work_item::get_nd_item<1>();
  const auto sg = item.get_sub_group();
  const int lane = sg.get_local_linear_id();
  const int64_t n = static_cast<int64_t>(item.get_group_linear_id()) * SUB_GROUPS + sg.get_group_linear_id();
  const int64_t n_in = n < N ? n : N - 1;  // columns past N compute a copy; their store is masked
  float acc[ROWS] = {{}};
  for (int64_t k = lane; k < K; k += LANES) {{
    const float b = {load_b_n_in};
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {{
      if (r < M) acc[r] += {load_a_r} * b;
    }}
  }}
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {{
    const float total = sycl::reduce_over_group(sg, acc[r], sycl::plus<float>());
    const int64_t m = r;
    if (lane == 0 && m < M && n < N) {{
{epilogue}    }}
  }}
}}
"""


def render(problem: GemmProblem, config: GemmConfig, target: str = "xpu") -> KernelSource:
    """The SYCL source computing ``problem`` with ``config``, and its launch."""
    reason = refuse_problem(problem) or config.check()
    if reason:
        raise ValueError(f"sycl.gemm cannot serve {problem} with {config}: {reason}")
    if target not in TARGETS:
        raise ValueError(f"sycl.gemm renders for {TARGETS}, not {target!r}")
    name = kernel_name(problem, config)
    widen = functools.partial(SYCL.widen, dtype=problem.dtype)
    common = {"helpers": HELPERS_NAME, "signature": _signature(name, problem.dtype), "lanes": LANES,
              "bias_note": " + beta * bias" if problem.adds_bias else ""}
    if config.kind == "gemv":
        if problem.m > config.rows:
            raise ValueError(f"sycl.gemm gemv with {config.rows} rows cannot serve M={problem.m}")
        source = _GEMV.format(**common, rows=config.rows, sub_groups=config.sub_groups,
                              load_b_n_in=widen("B[k * stride_bk + n_in * stride_bn]"),
                              load_a_r=widen("A[r * stride_am + k * stride_ak]"),
                              epilogue=_epilogue(problem, "total", " " * 6))
        groups = -(-problem.n // config.sub_groups)
    else:
        source = _TILED.format(**common, tile_m=config.tile_m, tile_n=config.tile_n, tile_k=config.tile_k,
                               sg_rows=config.sg_rows, lane_cols=config.lane_cols, work_group=config.work_group(),
                               load_a=widen("A[m * stride_am + k * stride_ak]"),
                               load_b=widen("B[k * stride_bk + n * stride_bn]"),
                               epilogue=_epilogue(problem, "acc[r][j]", " " * 8))
        groups = -(-problem.m // config.tile_m) * -(-problem.n // config.tile_n)
    launch = {"nd_range_kernel": 1, "global_size": [groups * config.work_group()],
              "local_size": [config.work_group()], "params": list(PARAM_KINDS), "includes": [HELPERS_NAME]}
    return KernelSource(name=name, source=source, template=NAME, config=asdict(config), launch=launch,
                        language="sycl")


_kernels: dict[tuple[str, str, str], Any] = {}  # (device, name, source) -> built runtime kernel


def _device(device: "str | torch.device") -> str:
    """"cpu", or "xpu:<index>" (a bare "xpu" is torch's current XPU): what a build is for."""
    import torch

    device = torch.device(device)
    if device.type == "xpu" and device.index is None:
        device = torch.device("xpu", torch.xpu.current_device())
    return str(device)


def refuse_here() -> str | None:
    """None when these kernels can run here, else what to install (Intel's SYCL runtime wheels)."""
    from inductor_ext.runtime import sycl

    return sycl.missing()


def prebuild(pairs: Sequence[tuple[GemmProblem, GemmConfig]], target: str, device_type: str) -> None:
    """Build the kernels of several (problem, config) pairs in one compiler run for tensors on
    ``device_type`` ("xpu", or "cpu": Intel's OpenCL CPU device); ``call()`` then finds them built.
    A run of the compiler costs seconds, most of it fixed, so one run for a decision's candidates
    is much cheaper than one each. Raises the compiler's error when one of them does not compile
    (``call()`` then builds each on its own, and only the broken one fails)."""
    from inductor_ext.runtime import sycl

    device = _device(device_type)
    program = sycl.Program(device, prelude="", includes={HELPERS_NAME: HELPERS})
    pending = {}
    for problem, config in pairs:
        ks = _rendered(problem, config, target)
        key = (device, ks.name, ks.source)
        if key not in _kernels and key not in pending:
            # each source includes the helper header once (#pragma once)
            pending[key] = program.add_kernel(ks.name, ks.source, PARAM_KINDS)
    program.build()
    _kernels.update(pending)


@functools.lru_cache(maxsize=1024)
def _rendered(problem: GemmProblem, config: GemmConfig, target: str) -> KernelSource:
    """render(), once per problem and config: call() runs on every step of a compiled graph."""
    return render(problem, config, target)


def _kernel(ks: KernelSource, device: str) -> Any:
    key = (device, ks.name, ks.source)
    if key not in _kernels:
        from inductor_ext.runtime import sycl

        _kernels[key] = sycl.compile_kernel(ks.source, ks.name, PARAM_KINDS, device=device,
                                            includes={HELPERS_NAME: HELPERS})
    return _kernels[key]


def call(problem: GemmProblem, config: GemmConfig, target: str, *tensors: "torch.Tensor") -> "torch.Tensor":
    """C [m, n] for the op's tensors in its order: ``mm`` (A, B), ``addmm`` (bias, A, B; the bias
    broadcasts to [m, n]). Renders, builds (once per source and device) and launches: CPU tensors
    run on Intel's OpenCL CPU device, xpu tensors on torch's current XPU queue."""
    import torch

    if len(tensors) != (3 if problem.bias else 2):
        raise ValueError(f"sycl.gemm {problem}: takes {'(bias, A, B)' if problem.bias else '(A, B)'}, "
                         f"got {len(tensors)} tensors")
    bias, a, b = tensors if problem.bias else (None, *tensors)
    if tuple(a.shape) != (problem.m, problem.k) or tuple(b.shape) != (problem.k, problem.n):
        raise ValueError(f"sycl.gemm {problem}: got A {tuple(a.shape)} and B {tuple(b.shape)}")
    dtypes = {t.dtype for t in tensors}
    if str(a.dtype).removeprefix("torch.") != problem.dtype or len(dtypes) != 1:
        raise ValueError(f"sycl.gemm {problem}: got tensors of {sorted(map(str, dtypes))}")
    if len({t.device for t in tensors}) != 1:
        raise ValueError(f"sycl.gemm {problem}: tensors on {sorted({str(t.device) for t in tensors})}")
    ks = _rendered(problem, config, target)
    kernel = _kernel(ks, _device(a.device))
    c = torch.empty((problem.m, problem.n), dtype=a.dtype, device=a.device)
    bias_arg = bias.expand(problem.m, problem.n) if bias is not None and problem.adds_bias else c
    kernel(a, b, c, bias_arg, problem.m, problem.n, problem.k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
           c.stride(0), c.stride(1), bias_arg.stride(0), bias_arg.stride(1), problem.alpha, problem.beta,
           global_size=ks.launch["global_size"], local_size=ks.launch["local_size"])
    return c


def key_instructions(problem: GemmProblem, config: GemmConfig, target: str) -> list[tuple[str, str]]:
    """What ``inductor-ext asm sycl.gemm --target xpu`` looks for in the SPIR-V: every kernel runs
    on 16-lane sub-groups; a gemv adds its lanes' partial sums with reduce_over_group (a float add
    on the sub-group scope, 3), a tile broadcasts A with select_from_group (a sub-group shuffle)
    from work-group local memory it stages between barriers."""
    found = [("spirv", rf"OpExecutionMode %\S+ SubgroupSize {SYCL_SUB_GROUP_SIZE}\b")]
    if config.kind == "gemv":
        return found + [("spirv", r"OpGroupFAdd %float %uint_3 Reduce")]
    return found + [("spirv", r"OpSubgroupShuffleINTEL"), ("spirv", r"OpVariable %\S+ Workgroup"),
                    ("spirv", r"OpControlBarrier")]


def compile_asm(problem: GemmProblem, config: GemmConfig, target: str) -> dict[str, str]:
    """{"spirv": text}: the SPIR-V module Intel's run-time compiler builds from this kernel's
    source (the device-independent form; an Intel GPU's driver compiles it to the GPU's ISA,
    which needs the GPU). Built through the same runtime as ``call()``, on the OpenCL CPU device."""
    from inductor_ext.runtime import sycl
    from inductor_ext.runtime.sycl import spirv

    reason = refuse_problem(problem) or refuse_config(problem, config, target)
    if reason:
        raise ValueError(f"sycl.gemm cannot serve {problem} with {config}: {reason}")
    spirv.disassembler()  # say what is missing before compiling
    ks = render(problem, config, target)
    program = sycl.Program("cpu", prelude="", includes={HELPERS_NAME: HELPERS})
    program.add_kernel(ks.name, ks.source, PARAM_KINDS)
    images = program.device_images()
    return {"spirv": "\n".join(spirv.disassemble(image) for image in images)}


FAMILY = Family.of_module(__name__)
