"""CuTeDSL block-scaled NVFP4 GEMM for Blackwell (sm_100a), built on quack-kernels.

It stays one module past 600 lines on purpose: the quack parameters it picks feed both the tier-I
compile (``_build``) and the launch (``_launch_quack``), so the kernel proven is the one launched,
and the ISA cache key hashes this file's bytes as the kernel's code (``_cache_key``); split, the
compile and the launch could drift apart and the key would have to name every piece.

    out[m, n] = bf16( alpha * sum_k (qa[m, k] * sa[m, k // 16]) * (qb[n, k] * sb[n, k // 16]) + bias[n] )

``qa``/``qb`` are e2m1 (fp4) values, two per byte (``torch.float4_e2m1fn_x2``, K-major: A is
(M, K/2), B is (N, K/2), a Linear weight's layout); ``sa``/``sb`` are e4m3 scales, one per 16
consecutive K elements, in the blocked 128x4 layout tcgen05 reads (quack's
``(ceil(MN/128), ceil(K/64), 32, 4, 4)``, byte-identical to cuBLAS / torchao ``to_blocked``).
``alpha`` is the fp32 global scale, e.g. the product of the two NVFP4 per-tensor scales: it is
applied to the fp32 accumulator in the epilogue, before the bias add and the bf16 convert
(never folded into bf16 first, unlike torchao's eager path).

The kernel is quack's ``GemmDefaultSm100`` (a persistent, warp-specialised tcgen05 GEMM with
TMA loads, scale factors copied to tensor memory, and quack's linear epilogue
``D = alpha * acc + rowvec``). This module picks its parameters (NVFP4 operands/scales, bf16 D,
alpha mode, bias, tile and cluster shape, PDL) and calls quack's own compile entry for that class
(``quack.gemm_runtime.host._compile_gemm_epi``, the one ``build_gemm_epi_plan`` compiles through
when :func:`run` launches), so the kernel proven here is the one :func:`run` launches.

Tier I (no GPU): :func:`compile_for_sm100` runs ``cute.compile`` on quack's fake tensors (symbolic
M, N, K: one binary serves every shape a config supports) for ``sm_100a`` and returns the PTX,
the SASS (``cuobjdump -sass`` of the cubin) and metadata. Compiles run in a subprocess, whose
environment is set for the job (``CUTE_DSL_ARCH=sm_100a``, artifact dumps on, quack's and the
DSL's own caches off, no ``TRITON_INTERPRET``): CuTeDSL reads its settings from the environment
once per process. Results are cached on disk (gzip JSON) keyed by everything the compile reads
and the versions of quack, the DSL and this module, under ``$INDUCTOR_EXT_ISA_CACHE`` (default
``$XDG_CACHE_HOME/inductor_ext/isa``), and memoised in-process.

Programmatic dependent launch (PDL). ``NvFp4GemmProblem.use_pdl`` (the ``pdl`` option and
``autotune.pdl_policy`` set it, as for the Triton templates) decides it, through quack's own
switch: ``GemmSm100.use_pdl``, set by ``post_init_attrs=(("use_pdl", ...),)`` of quack's generic
host path (``quack.gemm_runtime.host``: ``_compile_gemm_epi`` to compile, ``build_gemm_epi_plan`` /
``run_gemm_epi_plan`` to launch; ``quack.gemm.gemm`` has no such argument and always builds with
PDL). With it on, the TMA-load and scheduler warps run ``griddepcontrol.wait`` before their first
global access, the MMA warp runs ``griddepcontrol.launch_dependents`` once its last MMA is issued,
the epilogue warps read alpha and the bias only after the accumulator barrier, and the host
function quack's ``__call__`` compiles launches with ``kernel.launch(..., use_pdl=True)``, which
CuTeDSL lowers to ``cuda.launch_cfg.programmatic_stream_serialization_allowed`` on the
``cuLaunchKernelEx`` config it builds; with it off, none of these is emitted and the launch
attribute is 0. Both are checked at tier I without a GPU (tests/test_cutedsl_pdl.py): the PTX's
order, and the host IR's launch-config lines (``host_launch`` in the compiled texts).
Why CuTeDSL's option and not cuda-python's ``cuLaunchKernelEx``: the compiled function packs the
TMA descriptors, the tile scheduler's arguments and the cluster shape and launches in one native
call; there is no Python launch to wrap, and rebuilding it with cuda-python would mean
re-deriving quack's kernel parameters by hand. ``use_pdl`` is part of the compile (the kernel
body differs), so it is in this module's cache key and in quack's (``post_init_attrs`` is an
argument of its jit-cached compile and of its plan key): a PDL and a non-PDL build never mix.
The op carries it as a kwarg, and ``lowering.pdl_consumers`` makes Inductor's kernel reading the
output wait on it; the dumps index shows it in the kernel's config (``use_pdl``).

Imports: the standard library at module level; cutlass and quack only inside the functions that
compile or launch (importing them costs seconds), torch only in :func:`run`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from inductor_ext.runtime import asm_cache
from inductor_ext.runtime import cutedsl as cutedsl_runtime
from inductor_ext.runtime.cutedsl import CuteDslCompileError
from inductor_ext.templates import device_case
from inductor_ext.templates.allowed import flag, integer, one_of, size
from inductor_ext.templates.base import KernelSource, Tile
from inductor_ext.templates.family import Family, OpSpec

__all__ = [
    "NAME", "FAMILY", "TARGETS", "NvFp4GemmProblem", "NvFp4GemmConfig", "CuteDslCompileError",
    "refuse_problem", "refuse_config", "configs", "config_from_tile", "render",
    "compile_for_sm100", "compile_many_for_sm100", "run",
]

NAME = "cutedsl.nvfp4_gemm"
# Claimed only where tier I passes (tests/test_cutedsl_nvfp4.py).
TARGETS = ("sm_100a",)
OPS = ("nvfp4_gemm",)
# quack's kernel is a compiled CuTeDSL function, not text Inductor can render: each config is an
# extern choice calling the op ``lowering/cutedsl_nvfp4.py`` defines with the config as kwargs.
CHOICE_KIND = "extern"
EXTERN_OP = "inductor_ext::nvfp4_gemm_cutedsl"
# Where quack's kernel runs (tests widen it to check the lowering's generated code on CPU).
DEVICE_TYPES = ("cuda",)

# The format, fixed by this family: NVFP4 = e2m1 values, one e4m3 scale per 16 of them.
SF_VEC_SIZE = 16
OUT_DTYPES = ("bfloat16",)
# alpha: "tensor" = fp32 scalar in device memory (a kernel pointer argument; what a compiled graph
# has: the per-tensor scales live on the device, reading them on the host would sync);
# "scalar" = fp32 kernel argument; "none" = no global scale (alpha == 1).
ALPHA_MODES = {"none": 0, "scalar": 1, "tensor": 2}  # quack's scalar modes (gemm_tvm_ffi_utils.scalar_mode)

# Packages whose versions change what is compiled (part of the cache key).
_VERSIONED = ("quack-kernels", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base",
              "nvidia-cutlass-dsl-libs-core", "nvidia-cutlass-dsl-libs-cu12", "apache-tvm-ffi")
_CACHE_FORMAT = 2  # bump when what is stored changes (2: host_launch, quack's generic host path)


# ------------------------------------------------------------------------------ problem, config


@dataclass(frozen=True)
class NvFp4GemmProblem:
    """out[m, n] = alpha * (A @ B^T)[m, n] (+ bias[n]) for NVFP4 A (m, k) and B (n, k).

    ``k`` is the logical K (fp4 elements); A and B hold k // 2 bytes per row.
    """

    m: int = size()
    n: int = size()
    k: int = size()
    out_dtype: str = one_of(OUT_DTYPES, "bfloat16")
    alpha: str = one_of(ALPHA_MODES, "tensor")  # one of ALPHA_MODES
    bias: bool = flag(False)  # a bf16 bias over N (a Linear's), added after alpha
    # waits on its producer, releases the kernel after it early and launches with the PDL
    # attribute (see "Programmatic dependent launch" above): a different build
    use_pdl: bool = flag(False)


@dataclass(frozen=True)
class NvFp4GemmConfig:
    """Tile (M, N) of one MMA (K follows from the instruction: 4 x 64 fp4 = 256) and cluster shape.

    tile_m 256 with an even cluster_m runs the 2-CTA MMA (``cta_group::2``); tile_n is a
    multiple of 64 in [64, 256] (the scale factors' tensor-memory datapath is 64-N granular).
    ``dynamic_persistent`` schedules tiles with cluster launch control instead of a static
    persistent grid.
    """

    tile_m: int = integer(128, low=64, high=256, power_of_two=True)
    tile_n: int = integer(256, low=64, high=256)
    cluster_m: int = integer(1, low=1, high=16)
    cluster_n: int = integer(1, low=1, high=16)
    dynamic_persistent: bool = flag(False)

    def name(self) -> str:
        return (f"{self.tile_m}x{self.tile_n}_c{self.cluster_m}x{self.cluster_n}"
                + ("_clc" if self.dynamic_persistent else ""))


Problem, Config = NvFp4GemmProblem, NvFp4GemmConfig


def problem_for(spec: OpSpec) -> NvFp4GemmProblem | str:
    """``inductor_ext::nvfp4_gemm`` (a, b, scale_a, scale_b, alpha, bias in _scaled_mm's order)
    as quack serves it: alpha from device memory, an optional bf16 bias, no activation, both
    operands K-major."""
    if spec.op not in OPS:
        return f"{NAME} serves {', '.join(OPS)}, not {spec.op}"
    a, b_t, _, _, _, bias = spec.inputs
    if spec.device_type not in DEVICE_TYPES:
        return f"{NAME} runs only on an sm_100 GPU (there is no CPU interpreter for CuTeDSL)"
    activation = spec.scalars["activation"]
    if activation != "none":
        return f"activation {activation!r}: quack's epilogue is alpha * acc + bias only"
    if bias is not None and bias.dtype != "bfloat16":
        return f"bias dtype torch.{bias.dtype} is not bfloat16"
    m, k_half = a.shape
    # quack reads B K-major: _scaled_mm's [K/2, N] operand must be the transpose of a contiguous
    # [N, K/2] weight, i.e. strides (1, K/2).
    if list(b_t.stride) != [1, k_half]:
        return f"B strides {list(b_t.stride)} are not K-major (expected [1, {k_half}])"
    if list(a.stride) != [k_half, 1]:
        return f"A strides {list(a.stride)} are not K-major (expected [{k_half}, 1])"
    problem = NvFp4GemmProblem(m=m, n=b_t.shape[1], k=2 * k_half, out_dtype=spec.scalars["out_dtype"],
                               alpha="tensor", bias=bias is not None)
    return refuse_problem(problem) or problem


KEY_INSTRUCTIONS = {"sm_100a": [("ptx", r"tcgen05\.mma\.cta_group::[12]\.kind::mxf4nvf4\.block_scale\.block16"),
                                ("sass", r"\bUTCOMMA\b")]}


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> NvFp4GemmProblem:
    """An MxNxK problem as the nvfp4_gemm op gives it (alpha in device memory; bf16 out)."""
    return NvFp4GemmProblem(m, n, k, out_dtype=dtype or "bfloat16", alpha="tensor")


def compile_asm(problem: NvFp4GemmProblem, config: NvFp4GemmConfig, target: str) -> dict[str, str]:
    """PTX, SASS and metadata for ``inductor-ext asm`` (CuTeDSL compiles for sm_100a only)."""
    return compile_for_sm100(problem, config)


def refuse_problem(problem: NvFp4GemmProblem) -> str | None:
    """None when the template can serve ``problem``, else the reason it cannot."""
    if min(problem.m, problem.n, problem.k) <= 0:
        return f"empty problem {problem.m}x{problem.n}x{problem.k}"
    if problem.out_dtype not in OUT_DTYPES:
        return f"out_dtype {problem.out_dtype} not in {OUT_DTYPES}"
    if problem.alpha not in ALPHA_MODES:
        return f"alpha {problem.alpha!r} not one of {tuple(ALPHA_MODES)}"
    if problem.k % 32:
        # TMA needs 16-byte rows: 32 fp4 values (quack's fake K is declared divisible by 32).
        return f"K={problem.k} is not a multiple of 32 (fp4 rows of A and B must be 16-byte aligned for TMA)"
    if problem.n % 8:
        return f"N={problem.n} is not a multiple of 8 (bf16 rows of the output must be 16-byte aligned for TMA)"
    return None


def refuse_config(problem: NvFp4GemmProblem, config: NvFp4GemmConfig, target: str | None = None) -> str | None:
    """None when ``config`` can compile ``problem``, else why not (quack's blockscaled config rule)."""
    reason = refuse_problem(problem)
    if reason:
        return reason
    if target is not None and target not in TARGETS:
        return f"{NAME} is verified for {', '.join(TARGETS)}, not {target}"
    from quack.gemm_config import GemmConfig, blockscaled_config_ok

    quack_config = GemmConfig(tile_m=config.tile_m, tile_n=config.tile_n, cluster_m=config.cluster_m,
                              cluster_n=config.cluster_n, pingpong=False, device_capacity=10,
                              is_dynamic_persistent=config.dynamic_persistent)
    if not blockscaled_config_ok(quack_config):
        return (f"config {config.name()} is not a block-scaled sm_100 config for quack "
                "(tile_m 128/256, tile_n a multiple of 64 in [64, 256], clusters up to 4x4)")
    if config.tile_m == 256 and config.cluster_m % 2:
        return f"config {config.name()}: tile_m 256 is a 2-CTA MMA and needs an even cluster_m"
    if config.cluster_m * config.cluster_n > 16:
        return f"config {config.name()}: cluster of {config.cluster_m * config.cluster_n} CTAs exceeds 16"
    return None


# Candidates, best guess first. Every one passes refuse_config and is compiled and checked at
# tier I (tests/test_cutedsl_nvfp4.py). M <= 128 fills at most one 128-row MMA, so parallelism
# comes from N: decode-like M (<= 64) tries the narrowest tiles (most CTAs) first, and a cluster
# along N (which multicasts the A tile all CTAs of a row share); larger M starts with the 2-CTA
# 256x256 MMA.
_DECODE_M = (
    NvFp4GemmConfig(128, 64, 1, 1),
    NvFp4GemmConfig(128, 128, 1, 1),
    NvFp4GemmConfig(128, 64, 1, 2),
    NvFp4GemmConfig(128, 256, 1, 1),
)
_MID_M = (
    NvFp4GemmConfig(128, 256, 1, 1),
    NvFp4GemmConfig(128, 128, 1, 1),
    NvFp4GemmConfig(128, 128, 1, 2),
    NvFp4GemmConfig(128, 64, 1, 1),
)
_LARGE_M = (
    NvFp4GemmConfig(256, 256, 2, 1),
    NvFp4GemmConfig(128, 256, 1, 1),
    NvFp4GemmConfig(256, 128, 2, 1),
    NvFp4GemmConfig(128, 128, 1, 1),
    NvFp4GemmConfig(128, 256, 2, 1),
)
ALL_CONFIGS = tuple(dict.fromkeys(_DECODE_M + _MID_M + _LARGE_M))


def configs(problem: NvFp4GemmProblem, target: str) -> list[NvFp4GemmConfig]:
    """The default candidate configs for ``problem`` on ``target``, best guess first."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    table = _DECODE_M if problem.m <= 64 else _MID_M if problem.m <= 128 else _LARGE_M
    # Tiles far wider than N only waste work; keep at least one config.
    fitting = [c for c in table if c.tile_n <= max(64, 2 * problem.n)]
    return fitting or [min(table, key=lambda c: c.tile_n)]


def config_from_tile(tile: Tile) -> NvFp4GemmConfig | None:
    """A policy's tile as this template's config; None when it is not one of the tier-I-checked
    configs (``ALL_CONFIGS``), e.g. split-K, swap-AB or a tile tcgen05 block scaling cannot run."""
    if tile.split_k != 1 or tile.swap_ab:
        return None
    config = NvFp4GemmConfig(tile.block_m, tile.block_n, 2 if tile.block_m == 256 else 1, 1)
    return config if config in ALL_CONFIGS else None


# ------------------------------------------------------------------------------------- render

_LAUNCHER = '''\
"""{family} {config_name}: launches quack's block-scaled NVFP4 GEMM (sm_100a) for
{problem!r}."""
from inductor_ext.templates.cutedsl.nvfp4_gemm import NvFp4GemmConfig, run

CONFIG = {config!r}
USE_PDL = {use_pdl!r}  # programmatic dependent launch: waits on its producer, releases its dependents


def {name}(a, b, a_scale, b_scale, alpha=None, bias=None, out=None):
    return run(a, b, a_scale, b_scale, CONFIG, alpha=alpha, bias=bias, out=out, use_pdl=USE_PDL)
'''


def kernel_name(problem: NvFp4GemmProblem, config: NvFp4GemmConfig) -> str:
    extras = f"_alpha{problem.alpha}" + ("_bias" if problem.bias else "") + ("_pdl" if problem.use_pdl else "")
    return f"cutedsl_nvfp4_gemm_{config.name()}{extras}"


def render(problem: NvFp4GemmProblem, config: NvFp4GemmConfig, target: str = "sm_100a") -> KernelSource:
    """A launcher module for (problem, config): the kernel itself is quack's, not generated text."""
    reason = refuse_problem(problem)
    if reason:
        raise ValueError(f"{NAME} cannot serve {problem}: {reason}")
    name = kernel_name(problem, config)
    source = _LAUNCHER.format(family=NAME, config_name=config.name(), problem=problem,
                              config=config, name=name, use_pdl=problem.use_pdl)
    return KernelSource(name=name, source=source, template=NAME, config=asdict(config),
                        launch={"cluster": (config.cluster_m, config.cluster_n, 1), "use_pdl": problem.use_pdl},
                        language="cutedsl")


def extern_kwargs(problem: NvFp4GemmProblem, config: NvFp4GemmConfig) -> dict[str, Any]:
    """The kwargs ``EXTERN_OP`` takes after the op's tensors: the config, and bias=None when
    the problem has none (the op's bias is optional and positional after alpha)."""
    kwargs: dict[str, Any] = {**asdict(config), "use_pdl": problem.use_pdl}
    return kwargs if problem.bias else {"bias": None, **kwargs}


def call(problem: NvFp4GemmProblem | None, config: NvFp4GemmConfig, target: str, a: Any, b: Any, scale_a: Any,
         scale_b: Any, alpha: Any, bias: Any = None, *, use_pdl: bool | None = None) -> Any:
    """What a compiled graph runs: the op's arguments (``_scaled_mm``'s) as :func:`run` takes
    them, B back to its [N, K/2] rows. ``use_pdl`` defaults to the problem's (the op, which
    has no problem, passes its kwarg)."""
    if use_pdl is None:
        use_pdl = problem.use_pdl if problem is not None else False
    return run(a, b.t(), scale_a, scale_b, config, alpha=alpha, bias=bias, use_pdl=use_pdl)


# ------------------------------------------------------------------------------------ compile


def _epi_key_overrides(problem: NvFp4GemmProblem) -> dict[str, Any]:
    """Every epilogue op of quack's ``GemmDefaultSm100`` -> its compile key for ``problem``: alpha
    in ``problem.alpha``'s mode, the bias as an (l=1, N) bf16 row vector, everything else absent
    (None leaves an op out). Passed to quack at launch too, so the key cannot depend on the
    call's values."""
    from cutlass import BFloat16
    from quack.gemm_default_epi import GemmDefaultSm100

    keys: dict[str, Any] = {}
    for op in GemmDefaultSm100._epi_ops:
        if op.name == "alpha":
            keys[op.name] = op.host_key_for_mode(ALPHA_MODES[problem.alpha])
        elif op.name == "mRowVecBroadcast":
            keys[op.name] = (BFloat16, 2) if problem.bias else None  # RowVecLoad's (dtype, ndim)
        else:
            keys[op.name] = op.host_arg_key(None)
    return keys


def _quack_compile_kwargs(problem: NvFp4GemmProblem, config: NvFp4GemmConfig) -> dict[str, Any]:
    """The arguments quack's ``build_gemm_epi_plan`` passes to its compile entry
    ``_compile_gemm_epi`` for what :func:`run` launches: 2-D K-major fp4 A and B, n-major bf16 D,
    no C, unbatched (5-D) e4m3 scale factors, and ``use_pdl`` set on the GEMM object."""
    from cutlass import BFloat16, Float4E2M1FN, Float8E4M3FN
    from quack.gemm_config import SplitKMode
    from quack.gemm_default_epi import GemmDefaultSm100
    from quack.gemm_runtime.identity import static_gemm_class_ref

    epi_keys = tuple(sorted((name, key) for name, key in _epi_key_overrides(problem).items() if key is not None))
    return dict(
        gemm_cls_ref=static_gemm_class_ref(GemmDefaultSm100), device_capacity=(10, 0),
        a_dtype=Float4E2M1FN, b_dtype=Float4E2M1FN, d_dtype=BFloat16, c_dtype=None,
        a_major="k", b_major="k", d_major="n", c_major=None,
        tile_shape_mn=(config.tile_m, config.tile_n),
        cluster_shape_mnk=(config.cluster_m, config.cluster_n, 1),
        pingpong=False, persistent=True, is_dynamic_persistent=config.dynamic_persistent,
        varlen_m=False, gather_A=False, batched=False, b_kn=False, epi_keys=epi_keys, swap_ab=False,
        use_tma_gather=False, concat_layout=(), sf_dtype=Float8E4M3FN, sf_vec_size=SF_VEC_SIZE,
        sf_batched=False, a_mma_dtype=Float4E2M1FN, b_mma_dtype=Float4E2M1FN,
        post_init_attrs=_post_init_attrs(problem), packed_cd=None, has_ag=False,
        split_k=1, split_k_mode=SplitKMode.SERIAL, transform_a_ref=None, transform_dims=None,
    )


def _post_init_attrs(problem: NvFp4GemmProblem) -> tuple[tuple[str, Any], ...]:
    """Set on quack's GEMM object before it is traced: ``use_pdl`` both ways (quack defaults to
    on), so it is always part of quack's compile and plan keys."""
    return (("use_pdl", problem.use_pdl),)


def _compile_key_fields(problem: NvFp4GemmProblem, config: NvFp4GemmConfig) -> dict[str, Any]:
    """What the compile depends on. M, N and K do not: quack's fake tensors keep them symbolic."""
    return {"out_dtype": problem.out_dtype, "alpha": problem.alpha, "bias": problem.bias,
            "use_pdl": problem.use_pdl, **asdict(config)}


def package_versions() -> dict[str, str]:
    out = {}
    for name in _VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


cache_dir = asm_cache.cache_dir


def _cache_key(problem: NvFp4GemmProblem, config: NvFp4GemmConfig) -> str:
    payload = json.dumps({
        "format": _CACHE_FORMAT,
        "family": NAME,
        "target": "sm_100a",
        "compile": _compile_key_fields(problem, config),
        "versions": package_versions(),
        "module": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "python": sys.version_info[:2],
    }, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


_memo: dict[str, dict[str, str]] = {}
_lock = threading.Lock()


def compile_for_sm100(problem: NvFp4GemmProblem, config: NvFp4GemmConfig | None = None, *,
                      cache: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Compile (problem, config) for sm_100a without a GPU; returns its texts.

    Keys: ``ptx`` (what NVVM emitted), ``sass`` (``cuobjdump -sass`` of the cubin ptxas built;
    absent only when no cuobjdump is found, ``metadata`` then says so) and ``metadata`` (JSON:
    kernel entries, config, quack arguments, versions, compile seconds, cubin size and sha256).
    ``config`` defaults to ``configs(problem, "sm_100a")[0]``.
    Raises ValueError for a problem or config this family cannot serve and
    :class:`CuteDslCompileError` when compiling fails.
    """
    return compile_many_for_sm100([(problem, config)], cache=cache)[0]


def compile_many_for_sm100(jobs: Iterable[tuple[NvFp4GemmProblem, NvFp4GemmConfig | None]], *,
                           cache: str | os.PathLike[str] | None = None,
                           timeout: float = 1800) -> list[dict[str, str]]:
    """:func:`compile_for_sm100` for several jobs; the cache misses compile in one subprocess
    (its imports take most of a cold compile's time). Raises the first failing job's error."""
    resolved = []
    for problem, config in jobs:
        reason = refuse_problem(problem)
        if reason:
            raise ValueError(f"{NAME} cannot serve {problem}: {reason}")
        config = config or configs(problem, "sm_100a")[0]
        resolved.append((problem, config, _cache_key(problem, config)))
    results: dict[str, dict[str, str]] = {}
    misses: dict[str, tuple[NvFp4GemmProblem, NvFp4GemmConfig, Path]] = {}
    root = cache_dir(cache)
    for problem, config, key in resolved:
        with _lock:
            if key in _memo:
                results[key] = _memo[key]
                continue
        path = root / f"cutedsl_nvfp4_gemm-sm_100a-{kernel_name(problem, config)}-{key[:24]}.json.gz"
        asm = _read_cache(path, key)
        if asm is not None:
            results[key] = asm
        elif key not in misses:
            misses[key] = (problem, config, path)
    if misses:
        compiled = _compile_in_subprocess([(p, c) for p, c, _ in misses.values()], timeout)
        for (key, (_, _, path)), asm in zip(misses.items(), compiled):
            _write_cache(path, key, asm)
            results[key] = asm
    with _lock:
        _memo.update(results)
    return [dict(results[key]) for _, _, key in resolved]


_read_cache, _write_cache = asm_cache.read, asm_cache.write


def _worker_env(dump_dir: str) -> dict[str, str]:
    """The compile subprocess's environment (``runtime.cutedsl.worker_env`` for sm_100a)."""
    return cutedsl_runtime.worker_env(dump_dir, "sm_100a")


def _compile_in_subprocess(jobs: list[tuple[NvFp4GemmProblem, NvFp4GemmConfig]],
                           timeout: float) -> list[dict[str, str]]:
    return cutedsl_runtime.compile_jobs(
        "inductor_ext.templates.cutedsl.nvfp4_gemm:_build",
        [{"problem": asdict(p), "config": asdict(c)} for p, c in jobs],
        arch="sm_100a", what=f"{NAME} kernel(s)", timeout=timeout)


def _build(job: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Builder for ``runtime.cutedsl`` (runs in its subprocess): quack's compile of one job."""
    from quack.gemm_runtime import host

    problem, config = NvFp4GemmProblem(**job["problem"]), NvFp4GemmConfig(**job["config"])
    reason = refuse_config(problem, config)
    if reason:
        raise ValueError(f"{NAME} {config.name()} for {problem}: {reason}")
    kwargs = _quack_compile_kwargs(problem, config)
    # quack's jit_cache wrapper may hand back a function loaded from a cached .o, which carries
    # no PTX: call the compile itself.
    compile_gemm = getattr(host._compile_gemm_epi, "__wrapped__", host._compile_gemm_epi)
    t0 = time.perf_counter()
    fn = compile_gemm(**kwargs)
    return fn, {"family": NAME, "problem": asdict(problem), "config": asdict(config),
                "quack_compile_args": {k: repr(v) for k, v in kwargs.items()},
                "versions": package_versions(), "compile_s": round(time.perf_counter() - t0, 3)}


# ---------------------------------------------------------------------------------------- run


def _blocked_scale(scale: Any, rows: int, k: int, name: str) -> Any:
    """``scale`` as quack's (ceil(rows/128), ceil(k/64), 32, 4, 4) view (any contiguous tensor of
    the blocked layout's bytes, e.g. torchao's ``to_blocked`` output, is accepted)."""
    import torch

    rm, rk = -(-rows // 128), -(-k // (4 * SF_VEC_SIZE))
    if scale.dtype != torch.float8_e4m3fn:
        raise TypeError(f"{name} must be torch.float8_e4m3fn (NVFP4 block scales), got {scale.dtype}")
    if scale.dim() == 5:
        return scale
    if not scale.is_contiguous() or scale.numel() != rm * rk * 512:
        raise ValueError(f"{name}: expected {rm * rk * 512} blocked scales for {rows} rows x K={k} "
                         f"(contiguous, 128x4 blocks), got shape {tuple(scale.shape)}")
    return scale.view(rm, rk, 32, 4, 4)


# (tensor metadata, config, alpha mode, use_pdl) -> quack's GemmEpiPlan: a warm call skips
# validation and the compile-cache lookup, as quack.gemm.gemm's own plan cache does.
_plans: dict[tuple[Any, ...], Any] = {}


def run(a: Any, b: Any, a_scale: Any, b_scale: Any, config: NvFp4GemmConfig, *,
        alpha: Any = None, bias: Any = None, out: Any = None, use_pdl: bool = False) -> Any:
    """Launch the kernel on an sm_100 GPU (tier D): ``alpha * (a @ b^T) (+ bias)`` in bf16.

    ``a`` (M, K/2) and ``b`` (N, K/2) are ``torch.float4_e2m1fn_x2``; ``a_scale``/``b_scale``
    e4m3 blocked scales (see :func:`_blocked_scale`); ``alpha`` an fp32 tensor of one element
    (compiled as alpha="tensor"), a float (alpha="scalar") or None; ``bias`` (N,) bf16.
    ``use_pdl`` builds and launches the PDL kernel (see "Programmatic dependent launch").
    """
    import torch

    if a.dtype != torch.float4_e2m1fn_x2 or b.dtype != torch.float4_e2m1fn_x2:
        raise TypeError(f"a and b must be torch.float4_e2m1fn_x2, got {a.dtype} and {b.dtype}")
    (m, k2), n = a.shape, b.shape[0]
    problem = NvFp4GemmProblem(m, n, 2 * k2, alpha="tensor" if isinstance(alpha, torch.Tensor)
                               else "none" if alpha is None else "scalar", bias=bias is not None,
                               use_pdl=bool(use_pdl))
    reason = refuse_config(problem, config)
    if reason:
        raise ValueError(reason)
    if isinstance(alpha, torch.Tensor) and (alpha.dtype != torch.float32 or alpha.numel() != 1):
        raise TypeError(f"alpha must be one fp32 value, got {alpha.dtype} with {alpha.numel()} elements")
    if out is None:
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    sfa = _blocked_scale(a_scale, m, problem.k, "a_scale")
    sfb = _blocked_scale(b_scale, n, problem.k, "b_scale")
    epi_values = {"alpha": alpha, "mRowVecBroadcast": None if bias is None else bias.view(1, n)}
    _launch_quack(problem, config, a, b, out, sfa, sfb, epi_values)
    return out


def _launch_quack(problem: NvFp4GemmProblem, config: NvFp4GemmConfig, a: Any, b: Any, out: Any,
                  sfa: Any, sfb: Any, epi_values: dict[str, Any]) -> None:
    """quack's generic host path for ``GemmDefaultSm100``: the plan (validation, then the compile
    :func:`_quack_compile_kwargs` describes, ``use_pdl`` included) and its launch."""
    from quack.cute_dsl_utils import get_device_capacity
    from quack.gemm_default_epi import GemmDefaultSm100
    from quack.gemm_runtime.host import build_gemm_epi_plan, run_gemm_epi_plan
    from quack.gemm_tvm_ffi_utils import resolve_blockscaled_formats, tensor_key, validate_blockscaled_sf

    key = (tuple(tensor_key(t) for t in (a, b, out, sfa, sfb, epi_values["mRowVecBroadcast"])), a.device,
           config, problem.alpha, problem.use_pdl)
    plan = _plans.get(key)
    if plan is None:
        device_capacity = get_device_capacity(a.device)
        fmt_a, fmt_b = resolve_blockscaled_formats("nvfp4", "nvfp4")
        sf_dtype, sf_vec_size = validate_blockscaled_sf(a, b, sfa, sfb, device_capacity, fmt_a=fmt_a, fmt_b=fmt_b)
        plan = build_gemm_epi_plan(
            GemmDefaultSm100, device_capacity, a, b, out, None, epi_values=epi_values,
            epi_key_overrides=_epi_key_overrides(problem), tile_M=config.tile_m, tile_N=config.tile_n,
            cluster_M=config.cluster_m, cluster_N=config.cluster_n, persistent=True,
            is_dynamic_persistent=config.dynamic_persistent, sf_dtype=sf_dtype, sf_vec_size=sf_vec_size,
            sf_batched=sfa.ndim == 6, a_mma_dtype=fmt_a.to_cutlass_dtype(), b_mma_dtype=fmt_b.to_cutlass_dtype(),
            post_init_attrs=_post_init_attrs(problem))
        _plans[key] = plan
    run_gemm_epi_plan(plan, a, b, out, None, epi_values, SFA=sfa, SFB=sfb)


def device_cases(target: str) -> list[device_case.DeviceCase]:
    """The device check's cases: NVFP4 x NVFP4 on decode and prefill shapes, against cuBLASLt's
    block-scaled ``torch._scaled_mm``."""

    def operands(problem: Problem) -> device_case.DeviceOperands:
        return device_case.nvfp4_operands(problem.m, problem.n, problem.k, lambda q, config, use_pdl: run(
            *q.codes, q.sa, q.sb, config, alpha=q.alpha, use_pdl=use_pdl))

    return device_case.gemm_cases(example_problem, operands)

FAMILY = Family.of_module(__name__, pdl=True)
