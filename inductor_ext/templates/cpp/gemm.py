"""Inductor's C++ GEMM template for the CPU, offered beside ATen with its micro-kernel as the
tuned config: C = A @ B (mm), beta * bias + alpha * (A @ B) (addmm), per-batch A @ B (bmm).

Inductor 2.15 renders this template (``cpp_gemm_template.py``: thread and cache blocking around
a register-blocked micro-GEMM on AMX, AVX-512 or AVX2) only under max-autotune, with one
micro-kernel picked by a fixed ranking. Here each micro-kernel (ISA and register block
``block_m x block_n x block_k``) is one config, and ext's autotuning picks among them and ATen
with its margin, cache and dumps. Where a GEMM is large, a config may also fix the template's
cache blocking, which Inductor otherwise derives from the cache sizes with fixed factors (its
"TODO: tune"): the block of A rows, B columns and depth each thread's loops keep in cache. The
C++ source is Inductor's: this module describes the problems and configs as plain data, and
``lowering/cpp_gemm.py`` hands them to Inductor (``CHOICE_KIND = "inductor_template"``).

The weight is packed once at compile time (blocked, VNNI for AMX) when it is a compile-time
constant: under Inductor's freezing (inference under ``torch.no_grad()``), which the ``cpu``
preset turns on. A weight that is not constant would be repacked on every call, outside what
autotuning measures, so mm/addmm are served only with constant weights; bmm (both operands
usually activations) is served as Inductor serves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from inductor_ext.templates.allowed import flag, integer, number, one_of, size
from inductor_ext.templates.family import Family, OpSpec

NAME = "cpp.gemm"
TARGETS = ("cpu",)
OPS = ("mm", "addmm", "bmm")
CHOICE_KIND = "inductor_template"
INDUCTOR_TEMPLATE = "cpp_gemm"  # the Inductor template lowering hands through (lowering/cpp_gemm.py)
RUNS_ON_CPU = True  # its kernels are CPU kernels: no interpreter involved
# Inductor's template takes a symbolic M (and bmm's batch) at run time, blocking threads and
# caches then; N and K it needs static (``problem_for`` refuses them symbolic).
DYNAMIC_SHAPES = True

DTYPES = ("float32", "bfloat16")
ISAS = ("amx", "avx512", "avx2")

# Register blockings (block_m, block_n, block_k) of Inductor 2.15's micro-GEMMs by ISA and input
# dtype (cpp_micro_gemm.py); lowering checks each against Inductor before offering it.
_BLOCKINGS: dict[tuple[str, str], tuple[tuple[int, int, int], ...]] = {
    ("amx", "bfloat16"): ((32, 16, 32), (32, 32, 32), (48, 16, 32), (16, 48, 32)),
    ("avx512", "float32"): ((8, 48, 1), (8, 32, 1), (16, 16, 1)),
    ("avx512", "bfloat16"): ((8, 48, 1), (8, 32, 1), (16, 16, 1)),
    ("avx2", "float32"): ((4, 24, 1), (4, 16, 1), (8, 8, 1)),
    ("avx2", "bfloat16"): ((4, 24, 1), (4, 16, 1), (8, 8, 1)),
}


@dataclass(frozen=True)
class CppGemmProblem:
    """One GEMM as the template sees it: ``batch`` > 1 only for bmm."""

    op: str = one_of(OPS)  # "mm", "addmm" or "bmm"
    m: int = size()
    n: int = size()
    k: int = size()
    dtype: str = one_of(DTYPES, "float32")
    batch: int = size(1)
    alpha: float = number(1.0)  # addmm only
    beta: float = number(1.0)  # addmm only
    constant_weight: bool = flag(False)  # B is a compile-time constant (frozen): packed once
    dynamic_m: bool = flag(False)  # M is symbolic: Inductor blocks for the actual M at run time


@dataclass(frozen=True)
class CppGemmConfig:
    """The micro-kernel (its ISA and register block) and, optionally, the cache blocking: rows,
    columns and depth of a cache block, multiples of the register block; 0 leaves all three to
    Inductor's heuristic."""

    isa: str = one_of(ISAS)
    block_m: int = integer(low=1, high=64)
    block_n: int = integer(low=1, high=64)
    block_k: int = integer(low=1, high=64)
    cache_m: int = integer(0, low=0, high=1 << 20)
    cache_n: int = integer(0, low=0, high=1 << 20)
    cache_k: int = integer(0, low=0, high=1 << 20)

    def name(self) -> str:
        micro = f"{self.isa}_{self.block_m}x{self.block_n}x{self.block_k}"
        return f"{micro}_cache{self.cache_m}x{self.cache_n}x{self.cache_k}" if self.cache_blocked() else micro

    def cache_blocked(self) -> bool:
        return bool(self.cache_m or self.cache_n or self.cache_k)


Problem, Config = CppGemmProblem, CppGemmConfig


def problem_for(spec: OpSpec) -> CppGemmProblem | str:
    if spec.op not in OPS:
        return f"{NAME} serves {', '.join(OPS)}, not {spec.op}"
    a, b = spec.inputs[-2:]
    if a is None or b is None:
        return f"{spec.op} without both operands"
    if spec.op != "bmm" and not b.constant:
        return ("the weight is not a compile-time constant: the C++ GEMM template packs it once under "
                "freezing (inference under torch.no_grad() with the cpu preset); ATen serves training")
    if a.dtype != b.dtype or spec.out.dtype != a.dtype:
        return f"mixed dtypes {a.dtype} @ {b.dtype} -> {spec.out.dtype}"
    if a.stride[-1] != 1:
        return "A is not row-major (its last stride is not 1)"
    symbolic = [name for name, dim in (("K", -2), ("N", -1)) if b.dynamic and b.dynamic[dim]]
    if symbolic:
        return (f"{' and '.join(symbolic)} symbolic (dynamic shapes): Inductor's C++ GEMM template takes only M "
                "(and bmm's batch) at run time")
    if spec.op == "bmm":
        problem = CppGemmProblem("bmm", a.shape[1], b.shape[2], a.shape[2], a.dtype, batch=a.shape[0],
                                 dynamic_m=bool(a.dynamic and a.dynamic[1]))
    else:
        alpha, beta = float(spec.scalars.get("alpha", 1.0)), float(spec.scalars.get("beta", 1.0))
        problem = CppGemmProblem(spec.op, a.shape[0], b.shape[1], a.shape[1], a.dtype, alpha=alpha, beta=beta,
                                 constant_weight=True, dynamic_m=bool(a.dynamic and a.dynamic[0]))
    return refuse_problem(problem) or problem


def refuse_problem(problem: CppGemmProblem) -> str | None:
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if min(problem.m, problem.n, problem.k, problem.batch) <= 0:
        return f"empty problem {problem.batch}x{problem.m}x{problem.n}x{problem.k}"
    return None


def host_isas() -> tuple[str, ...]:
    """The micro-kernel ISAs this machine runs, best first (torch's own CPU capability checks)."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if capability == "AVX512":
        return ("amx", "avx512") if torch.cpu._is_amx_tile_supported() else ("avx512",)
    return ("avx2",) if capability == "AVX2" else ()


def refuse_config(problem: CppGemmProblem, config: CppGemmConfig, target: str) -> str | None:
    """AMX multiplies pairs of K elements (VNNI2), and only plain products (alpha == 1). A fixed
    cache blocking is whole register blocks, and needs the sizes it blocks known when compiling."""
    if config.isa == "amx" and (problem.k % 2 or problem.alpha != 1.0):
        return f"AMX needs an even K and alpha == 1 (K={problem.k}, alpha={problem.alpha})"
    if config.cache_blocked():
        blocks = ((config.cache_m, config.block_m), (config.cache_n, config.block_n), (config.cache_k, config.block_k))
        if any(size <= 0 or size % block for size, block in blocks):
            return (f"cache blocking {config.cache_m}x{config.cache_n}x{config.cache_k} is not whole register "
                    f"blocks of {config.block_m}x{config.block_n}x{config.block_k}")
        if problem.dynamic_m:
            return "M is symbolic (dynamic shapes): Inductor picks the cache blocking at run time"
    return None


# Micro-kernels that lose where they were measured, so autotuning neither builds nor times them
# (each C++ build costs seconds of a first compile). From the candidate times in the autotune records
# of GPT-2 and Llama-shaped prefill and decode GEMMs, M = 1, 16, 256 and 512, on AVX-512 hosts
# without AMX (every decision: `inductor-ext tune show` lists them):
# - fp32, M >= 16: the 16x16 block ran 1.1-2.1x faster than 8x48 and 8x32 in every decision
#   (512x768x2304: 10.8 ms against 21.3 and 21.8), though Inductor's ranking picks 8x48 there;
# - fp32, M == 1: 16x16 ran 1.05-1.5x slower than 8x48 or 8x32 (15 of its 16 rows are padding);
# - bf16 on a host with AVX512-BF16 dot products: at M >= 16 oneDNN's bf16 GEMM (ATen) ran 1.5-4.4x
#   faster than the best vector micro-kernel, which widens bf16 to fp32 (512x768x3072: 6.3 ms against
#   27.7), so none is timed there.
# AVX2 and AMX were not measured: every micro-kernel is timed there. ATen is always timed.
RULED_OUT_M = 16  # the rows from which the prefill rules hold (the measured M: 16, 256, 512)

# Cache blockings tried beside Inductor's on large fp32 AVX-512 GEMMs, for the 16x16 micro-kernel
# (the one kept there, above). Inductor's heuristic keeps a B panel of up to 80% of L1 (depth 409
# of K=768 on a 32 KiB L1) with A blocks of 10 register rows; a depth of 128 with all of a thread's
# rows ran 1.07-1.10x faster on every K=768 GEMM measured at M = 256 and 512 (N = 2304, 32000,
# 50257; 512x768x50257: 245 against 265 ms) and 0.93-0.95x at K=3072 (`bench/cpp_cache_blocking.py`,
# 2-core AVX-512 host) — so they are candidates, timed, never assumed; only on GEMMs large enough (a
# vocabulary's projection) that a few percent repays two more C++ builds and timings in a compile.
CACHE_BLOCKINGS = ((512, 16, 128), (512, 32, 128))  # (rows, columns, depth) of a cache block
CACHE_BLOCKED_MIN_M = 256
CACHE_BLOCKED_MIN_MACS = 1 << 32  # M * N * K: 4.3e9 multiply-adds, ~25 ms on a 2-core AVX-512 host


def _native_bf16_dot() -> bool:
    import torch

    return torch.cpu._is_avx512_bf16_supported() and not torch.cpu._is_amx_tile_supported()


def refuse_measured(problem: CppGemmProblem, config: CppGemmConfig, target: str) -> str | None:
    """Why autotuning leaves ``config`` out for ``problem`` on this host (measured to lose, above),
    or None. Not a refusal: a cached or forced config still serves."""
    if config.isa != "avx512":
        return None
    block = (config.block_m, config.block_n)
    if problem.dtype == "float32" and problem.m >= RULED_OUT_M and block != (16, 16):
        return (f"at M={problem.m} (>= {RULED_OUT_M}) the 16x16 AVX-512 fp32 micro-kernel ran 1.1-2.1x faster "
                f"than {config.block_m}x{config.block_n} in every measured GEMM")
    if problem.dtype == "float32" and problem.m == 1 and block == (16, 16):
        return ("at M=1 the 16x16 AVX-512 fp32 micro-kernel ran 1.05-1.5x slower than 8x48 or 8x32 in every "
                "measured GEMM")
    if problem.dtype == "bfloat16" and problem.m >= RULED_OUT_M and _native_bf16_dot():
        return (f"at M={problem.m} (>= {RULED_OUT_M}) oneDNN's bf16 GEMM (AVX512-BF16 dot products) ran 1.5-4.4x "
                "faster than every AVX-512 bf16 micro-kernel measured")
    return None


def configs(problem: CppGemmProblem, target: str) -> list[CppGemmConfig]:
    """The micro-kernels this host runs for the problem's dtype, best guess first: AMX first for
    bf16 from M=16 on (its tiles are 16 rows), vector kernels first below that (decode)."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    isas = [isa for isa in host_isas() if (isa, problem.dtype) in _BLOCKINGS]
    if problem.m < 16:
        isas.sort(key=lambda isa: isa == "amx")
    found = [CppGemmConfig(isa, *blocking) for isa in isas for blocking in _BLOCKINGS[(isa, problem.dtype)]]
    found += _cache_blocked(problem, isas)
    return [c for c in found if refuse_config(problem, c, target) is None]


def _cache_blocked(problem: CppGemmProblem, isas: list[str]) -> list[CppGemmConfig]:
    """The cache-blocking candidates (``CACHE_BLOCKINGS``) for a large fp32 mm/addmm, where
    ``isas`` (this host's, for the problem's dtype) include AVX-512."""
    if "avx512" not in isas or problem.dtype != "float32" or problem.op == "bmm" \
            or problem.m < CACHE_BLOCKED_MIN_M or problem.m * problem.n * problem.k < CACHE_BLOCKED_MIN_MACS:
        return []
    return [CppGemmConfig("avx512", 16, 16, 1, *blocking) for blocking in CACHE_BLOCKINGS]


FAMILY = Family.of_module(__name__)
