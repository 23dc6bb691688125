"""Candidate policy from NVIDIA's nvMatmulHeuristics (pip ``nvidia-matmul-heuristics``,
import name ``nvMatmulHeuristics``): an analytic model that ranks GEMM kernel configurations for
a problem on a given GPU, without running anything -- so it answers on our GPU-less machines.

The library calls we use (wheel 0.1.0.27, Python wrapper ``NvMatmulHeuristicsInterface``):

* ``NvMatmulHeuristicsInterface(backend=NvMatmulHeuristicsTarget.TRITON, precision=...)`` -- one
  handle per process (``nvMatmulHeuristicsCreate``). The TRITON backend models Triton's kernel
  space (no clusters, ``warp`` tile = one Triton warp's share of the CTA tile).
* ``createHardwareDescriptor()`` + ``setHardwarePredefinedGpu(hw, NvMatmulHeuristicsNvidiaGpu.X)``
  -- the GPU we ask about. Always explicit: with a NULL descriptor the library uses the current
  CUDA device, and without one (our machines) it silently answers for a generic GPU. The library
  also accepts enum values it does not know without complaint, so the mapping below names enum
  members and never passes a computed number.
* ``loadInternalDiscoverySet(layout, hw)`` -- loads the library's built-in profile for
  (backend, precision, layout), once per combination, before querying.
* ``get_with_mnk(m, n, k, layout, count, hw)`` -- ``nvMatmulHeuristicsGetGemmConfig``: the
  top-``count`` configurations, best first, each a ``GemmConfig`` (cta/warp/instr tiles, stages,
  split_k, swizzle, cta order, cluster) plus the model's estimated runtime
  (``nvMatmulHeuristicsEstimateRuntime``). The precision string is set on the interface before
  the call (``iface.precision``), as the wrapper reads it from there.

Precision strings (nvMatmulHeuristics.h): A/B letter, compute letter, C/D letter, or five
letters A, B, C, compute, D; ``T`` bf16, ``H`` fp16, ``S`` fp32, ``F`` TF32 tensor-core compute,
``Q``/``R`` fp8 e4m3/e5m2, ``O`` fp4. bf16 -> ``TST``, fp16 -> ``HSH``, fp32 -> ``SSS``, or ``SFS``
where the problem allows TF32 (``allow_tf32``: torch's fp32 matmul precision) and the target has
TF32 tensor cores, as the template then runs it; bf16 in with fp32 out -> ``TSS``,
NVFP4 x NVFP4 -> bf16 ``OOTST``. Only strings the header lists are sent (the library answers
unlisted ones without complaint, as something else); anything else (e.g. bf16 x NVFP4) gets no
nvMatmulHeuristics candidates. Layout: ``problem.layout`` when the problem has one ("NN", "NT",
"TN", "TT": whether A / B are read transposed), else NN, row major (A[M, K] and B[K, N] row
major, C row major) -- what ``GemmProblem`` describes.

How a library configuration becomes a ``Tile`` (fields always in the problem's frame):
block_m/n/k = the CTA tile; num_stages = load stages; num_warps = CTA tile / warp tile
(M and N), rounded to a power of two in [1, 16]; split_k = the library's split-K factor.
Swizzle, CTA order and cluster have no ``Tile`` field and are dropped. The library's
configuration struct has no swap-AB field, so these tiles never set ``swap_ab``; swap-AB
candidates come from ``decode_policy``. Several library configurations that differ only in
what ``Tile`` cannot say collapse into one tile (first kept).

Library quirks met on 0.1.0.27 (why the code is shaped as it is): destroying a handle after it
has answered a query segfaults (also at interpreter exit), so the one handle lives for the
process and is never destroyed; an unknown precision string answers all-zero tiles instead of an
error, which we treat as an error.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from inductor_ext import targets
from inductor_ext.templates.base import Tile
from inductor_ext.templates.family import Family

log = logging.getLogger(__name__)

NAME = "nvmatmulheuristics"

# Target -> the library's GPU enum member name (each target's ``nvmmh_gpu`` in ``targets``).
# Explicit on purpose: a target without one gets no nvMatmulHeuristics candidates rather than a
# generic GPU's.
TARGET_GPU: dict[str, str] = {name: t.nvmmh_gpu for name, t in targets.all_targets().items() if t.nvmmh_gpu}

# Short names accepted by ``gpu=``, next to the enum member names themselves.
GPU_ALIASES: dict[str, str] = {
    "H100": "H100_SXM",
    "H200": "H200_SXM",
    "H20": "H20_SXM",
    "A100": "A100_SXM_80GB",
}

# Our dtype names -> the library's precision letters (nvMatmulHeuristics.h).
_PRECISION_LETTER = {"bfloat16": "T", "float16": "H", "float32": "S",
                     "float8_e4m3fn": "Q", "float8_e5m2": "R", "nvfp4": "O"}

# The precision strings nvMatmulHeuristics.h lists as supported. The library answers other
# strings too (as some other precision, or with all-zero tiles), so we only ever send these.
SUPPORTED_PRECISIONS = frozenset({
    "BSS", "BSB", "BII", "HSS", "HSH", "HHH", "TST", "TSS", "SFS", "SSS", "DDD", "CCC", "ZZZ",
    "QQTST", "QQTSQ", "QQSSS", "QRTST", "QRTSQ", "QRTSR", "RQTSR", "RQSSS", "QQHSH", "QRHSH",
    "RQHSH", "QQHSQ", "QRHSQ", "QRHSR", "RQHSQ", "RQHSR", "QRSSS", "RQTST", "RQTSQ",
    "OOTST", "OOTSO", "OOHSH", "OOHSO", "OOSSS",
})

_LAYOUTS = {"NN": "NN_ROW_MAJOR", "NT": "NT_ROW_MAJOR", "TN": "TN_ROW_MAJOR", "TT": "TT_ROW_MAJOR"}


class NvmmhUnavailable(RuntimeError):
    """The library is not installed, failed to load, or answered nonsense."""


@dataclass(frozen=True)
class NvmmhConfig:
    """One configuration as the library returned it (before it becomes a ``Tile``)."""

    cta: tuple[int, int, int]
    warp: tuple[int, int, int]
    instr: tuple[int, int, int]
    stages: int
    split_k: int
    swizzle: int
    cta_order: int
    cluster: tuple[int, int]
    runtime_s: float  # the library's runtime estimate for this config on this problem


def operand_dtypes(problem: Any, family: Family | None = None) -> tuple[str | None, str | None, str | None]:
    """(A dtype, B dtype, output dtype) of a GEMM problem of any of our template families:
    ``dtype`` (both operands) or ``a_dtype``/``b_dtype``; a family whose name says nvfp4
    has NVFP4 operands wherever the problem names none."""
    dtype = getattr(problem, "dtype", None)
    a = dtype or getattr(problem, "a_dtype", None)
    b = dtype or getattr(problem, "b_dtype", None)
    if family is not None and "nvfp4" in family.name:
        a, b = a or "nvfp4", b or "nvfp4"
    out = getattr(problem, "out_dtype", None) or dtype
    return a, b, out


def precision_for(problem: Any, target: str, family: Family | None = None) -> str | None:
    """The library's precision string for ``problem``; None when the header lists none for its
    dtypes (the policy then stays out of the way)."""
    a, b, out = (_PRECISION_LETTER.get(d) if d else None for d in operand_dtypes(problem, family))
    if a is None or b is None or out is None:
        return None
    if a == b and a in "THS":  # three letters: A/B, compute, C/D
        tf32 = a == "S" and getattr(problem, "allow_tf32", False) and targets.has(target, targets.TF32)
        compute = "F" if tf32 else "S"
        precision = f"{a}{compute}{out}"
    else:  # five letters: A, B, C, compute, D
        precision = f"{a}{b}{out}S{out}"
    return precision if precision in SUPPORTED_PRECISIONS else None


def layout_for(problem: Any) -> str:
    layout = getattr(problem, "layout", None) or "NN"
    if layout not in _LAYOUTS:
        raise ValueError(f"problem layout {layout!r} is not one of {', '.join(_LAYOUTS)}")
    return layout


def resolve_gpu(target: str, gpu: str | None = None) -> str | None:
    """The library GPU enum member name for ``target`` (or the ``gpu`` override); None when the
    target has no explicit mapping. Raises ValueError for an override the library does not know."""
    if gpu is not None:
        name = GPU_ALIASES.get(gpu.upper(), gpu.upper())
        known = _gpu_names()
        if known is not None and name not in known:
            raise ValueError(f"gpu {gpu!r} is not an nvMatmulHeuristics GPU; known: {', '.join(sorted(known))}")
        return name
    return TARGET_GPU.get(target)


def _gpu_names() -> set[str] | None:
    try:
        lib = _library()
    except NvmmhUnavailable:
        return None  # checked again (and reported) when the policy is used
    return {g.name for g in lib.NvMatmulHeuristicsNvidiaGpu if g.name != "END"}


# --- the library, one handle per process ------------------------------------------------------

_lock = threading.Lock()
_state: dict[str, Any] = {}
_reported: set[str] = set()  # reasons already logged (policies are created per compile)


def _report(reason: str) -> None:
    """Log why the policy is off, once per reason per process."""
    if reason not in _reported:
        _reported.add(reason)
        log.warning("nvMatmulHeuristics policy off: %s", reason)


def _library() -> ModuleType:
    try:
        import nvMatmulHeuristics
    except Exception as e:  # ImportError, or a broken install
        raise NvmmhUnavailable(f"cannot import nvMatmulHeuristics ({type(e).__name__}: {e})") from e
    return nvMatmulHeuristics


def _interface() -> Any:
    """The process-wide interface (created under ``_lock``)."""
    if "iface" not in _state:
        lib = _library()

        class _Interface(lib.NvMatmulHeuristicsInterface):
            def __del__(self) -> None:  # destroying a used handle segfaults: keep it for good
                pass

        try:
            _state["iface"] = _Interface(backend=lib.NvMatmulHeuristicsTarget.TRITON, precision="TST")
        except Exception as e:
            raise NvmmhUnavailable(f"nvMatmulHeuristics failed to start ({type(e).__name__}: {e})") from e
        _state["hw"] = {}
        _state["loaded"] = set()
    return _state["iface"]


def _hardware(iface: Any, gpu: str) -> Any:
    hw = _state["hw"].get(gpu)
    if hw is None:
        lib = _library()
        member = lib.NvMatmulHeuristicsNvidiaGpu[gpu]  # KeyError for a name it does not know
        hw = iface.createHardwareDescriptor()
        iface.setHardwarePredefinedGpu(hw, member)
        _state["hw"][gpu] = hw
    return hw


@functools.lru_cache(maxsize=4096)
def _query_library(m: int, n: int, k: int, precision: str, layout: str, gpu: str | None,
                   count: int) -> tuple[NvmmhConfig, ...]:
    """The library's top-``count`` answer. ``gpu=None`` asks with no hardware descriptor -- the
    generic answer on a machine without a GPU; only tests use that, to show we avoid it."""
    if min(m, n, k) <= 0 or max(m, n, k) >= 2**32:
        raise ValueError(f"problem {m}x{n}x{k} cannot be described to nvMatmulHeuristics")
    with _lock:
        iface = _interface()
        lib = _library()
        try:
            layout_enum = lib.NvMatmulHeuristicsMatmulLayout[_LAYOUTS[layout]]
            hw = _hardware(iface, gpu) if gpu is not None else None
            iface.precision = precision
            if (precision, layout, gpu) not in _state["loaded"]:
                iface.loadInternalDiscoverySet(layout_enum, hw)
                _state["loaded"].add((precision, layout, gpu))
            results = iface.get_with_mnk(m, n, k, layout_enum, count, hw)
        except Exception as e:
            raise NvmmhUnavailable(f"nvMatmulHeuristics failed on {m}x{n}x{k} {precision} "
                                   f"{layout} {gpu}: {type(e).__name__}: {e}") from e
    configs = []
    for r in results:
        c = r["kernel"]
        configs.append(NvmmhConfig(
            cta=(c.cta_tile_m, c.cta_tile_n, c.cta_tile_k),
            warp=(c.warp_tile_m, c.warp_tile_n, c.warp_tile_k),
            instr=(c.instr_tile_m, c.instr_tile_n, c.instr_tile_k),
            stages=c.stages, split_k=c.split_k or 1, swizzle=c.swizzle_factor,
            cta_order=c.cta_order, cluster=(c.cluster_m, c.cluster_n),
            runtime_s=float(r["runtime"]),
        ))
    if not configs or any(min(c.cta) <= 0 for c in configs):
        raise NvmmhUnavailable(f"nvMatmulHeuristics gave no usable configs for {m}x{n}x{k} "
                               f"{precision} {layout} {gpu} (unsupported precision?)")
    return tuple(configs)


def tile_from_config(c: NvmmhConfig) -> Tile:
    """A library configuration as a ``Tile`` (see the module docstring for the mapping)."""
    bm, bn, bk = c.cta
    wm, wn = c.warp[0], c.warp[1]
    warps = (bm // wm) * (bn // wn) if wm > 0 and wn > 0 else 4
    warps = max(1, min(16, 1 << (max(1, warps).bit_length() - 1)))  # power of two in [1, 16]
    return Tile(block_m=bm, block_n=bn, block_k=bk, num_stages=max(1, c.stages),
                num_warps=warps, split_k=max(1, c.split_k), swap_ab=False)


def nvmmh_query(problem: Any, target: str, k: int = 8, gpu: str | None = None,
                family: Family | None = None) -> list[NvmmhConfig]:
    """The library's top-``k`` configurations for ``problem`` on ``target`` (or ``gpu``);
    ``family`` helps name the operand dtypes (see ``operand_dtypes``).

    Raises NvmmhUnavailable when the library is missing or fails, ValueError when the target
    has no GPU mapping or the dtype no precision string -- never asks for a generic GPU.
    """
    gpu_name = resolve_gpu(target, gpu)
    if gpu_name is None:
        raise ValueError(f"target {target!r} has no nvMatmulHeuristics GPU; pass gpu= "
                         f"(mapped targets: {', '.join(TARGET_GPU)})")
    precision = precision_for(problem, target, family)
    if precision is None:
        raise ValueError(f"nvMatmulHeuristics has no precision for dtypes {operand_dtypes(problem, family)}")
    return list(_query_library(problem.m, problem.n, problem.k, precision, layout_for(problem),
                               gpu_name, k))


def nvmmh_tiles(problem: Any, target: str, k: int = 8, gpu: str | None = None,
                family: Family | None = None) -> list[Tile]:
    """The library's top-``k`` answer as ``Tile``s, best first, duplicates dropped (raw: before
    any template family maps them)."""
    configs = nvmmh_query(problem, target, k, gpu, family)
    return list(dict.fromkeys(tile_from_config(c) for c in configs))


class NvMatmulHeuristicsPolicy:
    """Top-k tiles from nvMatmulHeuristics for NVIDIA targets, mapped through the family.

    ``gpu`` overrides the target's GPU (an ``NvMatmulHeuristicsNvidiaGpu`` member name such as
    "H100_SXM", or an alias "H100"/"H200"/"A100"). ``top_k`` is how many configurations to ask for.
    If the library is missing or fails, ``applies()`` is False and the reason is logged once.
    """

    name = NAME

    def __init__(self, gpu: str | None = None, top_k: int = 8) -> None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        self.gpu = gpu
        self.top_k = top_k
        if gpu is not None:
            resolve_gpu("", gpu)  # reject an unknown name now, not at the first compile

    def tiles(self, problem: Any, target: str, family: Family | None = None) -> list[Tile]:
        return nvmmh_tiles(problem, target, self.top_k, self.gpu, family)

    def applies(self, family: Family, problem: Any, target: str) -> bool:
        # Targets the library models; with an explicit gpu=, also NVIDIA targets ext has no
        # entry for (e.g. sm_120), never another vendor's.
        explicit = self.gpu is not None and targets.vendor(target) in (None, "nvidia")
        if not family.takes_tiles:  # not a GEMM family: no m, n, k to ask about, no Tile to take
            return False
        if not (targets.has(target, targets.NVMMH) or explicit):
            return False
        if resolve_gpu(target, self.gpu) is None:
            _report(f"target {target} has no GPU mapping (pass gpu=)")
            return False
        if precision_for(problem, target, family) is None:
            return False  # dtypes the library has no profile for: not an error
        try:
            self.tiles(problem, target, family)  # cached; propose() reuses the answer
        except NvmmhUnavailable as e:
            _report(str(e))
            return False
        except ValueError:
            return False
        return True

    def propose(self, family: Family, problem: Any, target: str) -> list[Any]:
        try:
            tiles = self.tiles(problem, target, family)
        except (NvmmhUnavailable, ValueError) as e:
            _report(str(e))
            return []
        configs = (family.config_from_tile(t) for t in tiles)
        return list(dict.fromkeys(c for c in configs if c is not None))
