"""Triton dense GEMM template: C = epilogue(A @ B) for fp32 / fp16 / bf16.

One kernel body, two frames around it:
- ``render()`` wraps it in a standalone ``@triton.jit`` module (golden tests, ISA gates,
  interpreter numerics, ``bench/`` on a lent GPU);
- ``inductor_source()`` wraps it in Inductor's template macros (``def_kernel``/``store_output``)
  so ``lowering/`` can offer it as an autotune choice with epilogue fusion.
The body is shared text, so what the golden tests pin is what Inductor compiles.

Programmatic dependent launch (PDL): ``GemmProblem.use_pdl`` sets the ``USE_PDL`` constexpr.
With it the body calls ``tl.extra.cuda.gdc_wait()`` after its index and pointer setup, right
before the first global load of A/B (so that setup overlaps the previous kernel's tail), and
``tl.extra.cuda.gdc_launch_dependents()`` right after the K loop (so the next kernel's prologue
overlaps this epilogue; the next kernel must ``gdc_wait()`` before it reads C, and that waits for
this whole grid to finish and flush). The launch needs ``launch_pdl=True`` (a Triton compile
option): ``render()`` puts it in ``KernelSource.launch`` when ``use_pdl`` is set. ``use_pdl`` lives
on the problem, not the config, because it is decided by where the GEMM sits in the graph (M, and
whether the next kernel reads its output: ``inductor_ext.autotune.pdl_policy.use_pdl``), the same
for every candidate config; the autotune cache stores configs keyed by shapes, which do not
say who consumes the output. NVIDIA sm_90+ only (``render`` refuses it for AMD targets).

Decode on tensor cores: a ``swap_ab`` config renders ``BODY_SWAP``, which accumulates
C^T = B^T A^T, so N (>= 64 rows) sits on the wgmma / tcgen05 M side and a decode M of 1..16 on
its N side; a plain BLOCK_M 16 tile would run Ampere's mma.sync (``key_instructions`` says
which). The decode policy proposes the swap-AB tiles first for M <= 64.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from inductor_ext import targets
from inductor_ext.templates import device_case
from inductor_ext.templates.allowed import flag, integer, one_of, size
from inductor_ext.templates.base import KernelSource, Tile
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.triton.launch import FP, PROGRAM_TILE, bias_args, dtype_name, launch, launch_options

if TYPE_CHECKING:  # annotations only: the module itself never imports torch at load
    import torch

NAME = "triton.gemm"

# Claimed only where tier I passes (tests/test_gemm_template.py); "cpu" runs in the interpreter.
TARGETS = ("sm_90a", "sm_100a", "gfx950", "gfx1250", "cpu")
OPS = ("mm", "addmm")
CHOICE_KIND = "triton_template"
CPU_EXECUTOR = "the Triton interpreter"  # how interpret mode runs it on CPU tensors
# Inductor renders M, N, K and the strides as kernel arguments; a symbolic K turns EVEN_K off.
DYNAMIC_SHAPES = True

DTYPES = ("float32", "float16", "bfloat16")

_TL_DTYPE = {"float32": "tl.float32", "float16": "tl.float16", "bfloat16": "tl.bfloat16"}


@dataclass(frozen=True)
class GemmProblem:
    """C[m, n] = A[m, k] @ B[k, n] (+ bias), inputs of one dtype."""

    m: int = size()
    n: int = size()
    k: int = size()
    dtype: str = one_of(DTYPES, "float32")
    out_dtype: str | None = one_of((None, *DTYPES), None)  # None: same as dtype
    bias: bool = flag(False)  # addmm: beta * bias + alpha * (A @ B), bias broadcast over rows
    use_pdl: bool = flag(False)  # programmatic dependent launch (USE_PDL; see the module docstring)
    # fp32 operands may be rounded to TF32 (torch's fp32 matmul precision was "tf32", i.e.
    # set_float32_matmul_precision("high"/"medium"), when lowering built the problem); only
    # targets with TF32 tensor cores use it (``input_precision``). Off: full fp32, as ATen.
    allow_tf32: bool = flag(False)
    # K is symbolic (dynamic shapes; ``k`` is its hint): the K loop masks its last tile whatever K is
    k_dynamic: bool = flag(False)

    @property
    def result_dtype(self) -> str:
        return self.out_dtype or self.dtype


@dataclass(frozen=True)
class GemmConfig:
    block_m: int = integer(low=1, high=1024, power_of_two=True)
    block_n: int = integer(low=1, high=1024, power_of_two=True)
    block_k: int = integer(low=1, high=1024, power_of_two=True)
    group_m: int = integer(8, low=1, high=64)
    num_warps: int = integer(4, low=1, high=32, power_of_two=True)
    num_stages: int = integer(3, low=1, high=16)
    # compute C^T = B^T A^T: N on the MMA's M side (>= 64 rows for wgmma / tcgen05), the small
    # M on its N side (16 is enough): decode on tensor cores (BODY_SWAP)
    swap_ab: bool = flag(False)

    def name(self) -> str:
        swap = "_swap" if self.swap_ab else ""
        return f"{self.block_m}x{self.block_n}x{self.block_k}_g{self.group_m}_w{self.num_warps}_s{self.num_stages}{swap}"


Problem, Config = GemmProblem, GemmConfig


def problem_for(spec: OpSpec) -> GemmProblem | str:
    """mm (A, B) or addmm (bias, A, B); Inductor's epilogue applies addmm's bias, so the
    problem is the plain product either way."""
    if spec.op not in OPS:
        return f"{NAME} serves {', '.join(OPS)}, not {spec.op}"
    a, b = spec.inputs[-2:]
    problem = GemmProblem(a.shape[0], b.shape[1], a.shape[1], a.dtype, spec.out.dtype,
                          allow_tf32=spec.scalars.get("fp32_precision") == "tf32",
                          k_dynamic=bool(a.dynamic and a.dynamic[1]) or bool(b.dynamic and b.dynamic[0]))
    return refuse_problem(problem) or problem


def refuse_problem(problem: GemmProblem) -> str | None:
    """None when the template can serve ``problem``, else the reason it cannot."""
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if problem.result_dtype != problem.dtype:
        return f"out_dtype {problem.out_dtype} differs from input dtype {problem.dtype}"
    if min(problem.m, problem.n, problem.k) <= 0:
        return f"empty problem {problem.m}x{problem.n}x{problem.k}"
    return None


# Default candidates per target; autotune/ policies reorder or extend them.
# MMA shapes need BLOCK_M >= 64 with 4 warps for wgmma (sm_90a) and tcgen05 (sm_100a).
_GPU_CONFIGS = (
    GemmConfig(128, 128, 64, 8, 8, 3),
    GemmConfig(128, 64, 64, 8, 4, 4),
    GemmConfig(64, 128, 64, 8, 4, 4),
    GemmConfig(64, 64, 64, 8, 4, 3),
)
_AMD_CONFIGS = (
    GemmConfig(128, 128, 64, 8, 8, 2),
    GemmConfig(64, 64, 64, 8, 4, 2),
)
# The interpreter runs each program in numpy: few big tiles are fastest there.
_CPU_CONFIGS = (GemmConfig(32, 32, 32, 8, 4, 1), GemmConfig(64, 64, 32, 8, 4, 1))


def configs(problem: GemmProblem, target: str) -> list[GemmConfig]:
    """The default candidate configs for ``problem`` on ``target``, best guess first."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    table = {"sm_90a": _GPU_CONFIGS, "sm_100a": _GPU_CONFIGS, "gfx950": _AMD_CONFIGS,
             "gfx1250": _AMD_CONFIGS, "cpu": _CPU_CONFIGS}[target]
    # Tiles much larger than the problem only waste work; keep at least one config.
    fitting = [c for c in table if c.block_m <= max(16, 2 * problem.m) and c.block_n <= max(16, 2 * problem.n)]
    return fitting or [min(table, key=lambda c: c.block_m * c.block_n)]


def config_from_tile(tile: Tile) -> GemmConfig | None:
    """A policy's tile as this template's config; None for split-K (not supported)."""
    if tile.split_k != 1:
        return None
    return GemmConfig(tile.block_m, tile.block_n, tile.block_k, 8, tile.num_warps, tile.num_stages,
                      swap_ab=tile.swap_ab)


def acc_type(problem: GemmProblem) -> str:
    return "tl.float32"


def input_precision(problem: GemmProblem, target: str) -> str:
    """``tl.dot``'s input_precision: "tf32" only where ATen would use TF32 for the same op (the
    problem allows it: torch's fp32 matmul precision) and the target has TF32 tensor cores;
    "ieee" (full fp32) otherwise, as PyTorch's default ("highest") gives."""
    tf32 = problem.dtype == "float32" and problem.allow_tf32 and targets.has(target, targets.TF32)
    return "tf32" if tf32 else "ieee"


# What an NVIDIA kernel of this template drives instead of the target's MMA (wgmma on sm_90a,
# tcgen05.mma on sm_100a), as Triton 3.9 compiles it (measured: tests/test_tier_i_configs.py):
# full-fp32 ("ieee") dots have no tensor-core path and become FMAs; fewer than one warpgroup's
# 64 rows on the MMA's M side (BLOCK_M, or BLOCK_N with swap_ab: the plain decode tiles), fewer
# than 4 warps, or on sm_100a more than 8 warps (nvMatmulHeuristics proposes 16 for prefill) runs
# on Ampere's mma.sync. The swap-AB decode tiles (BLOCK_N >= 64 rows) run wgmma / tcgen05.
TC_MIN_BLOCK_M = 64
_TC_WARPS = {"sm_90a": (4, 8, 16, 32), "sm_100a": (4, 8)}
_MMA_SYNC = r"mma\.sync\.aligned\.m16n8k\d+"
_FMA = r"fma\.rn\.f32"


def key_instructions(problem: GemmProblem, config: GemmConfig, target: str) -> list[tuple[str, str]]:
    """(assembly stage, regex) of the instructions a kernel for ``config`` is claimed to use on
    ``target`` (``inductor-ext asm`` shows them; tier I asserts them for every config a policy
    offers): the target's MMA, except on NVIDIA for full-fp32 dots and tiles Triton does not put
    on wgmma/tcgen05 (see above)."""
    t = targets.get(target)
    if t.asm_key is None or t.mma_instruction is None:
        return []
    if t.vendor == "nvidia":
        if problem.dtype == "float32" and input_precision(problem, target) == "ieee":
            return [(t.asm_key, _FMA)]
        rows = config.block_n if config.swap_ab else config.block_m  # the MMA's M side
        if rows < TC_MIN_BLOCK_M or config.num_warps not in _TC_WARPS.get(target, (4, 8)):
            return [(t.asm_key, _MMA_SYNC)]
    return [(t.asm_key, t.mma_instruction)]


# Configs the policies propose that spill registers to local memory (STL + LDL in the SASS), as
# Triton 3.9 compiles them for contiguous operands (tier I: tests/test_tier_i_configs.py;
# `inductor-ext asm triton.gemm --target T --shape MxNxK --all-configs`), per target and
# precision ("ieee": full-fp32 FMAs, whose operand tiles live in registers; "tf32"; "16bit":
# bf16/fp16). refuse_config refuses them, so they are never offered.
_G = GemmConfig
SPILLS: dict[tuple[str, str], dict[GemmConfig, int]] = {
    ("sm_90a", "ieee"): {_G(16, 128, 256, 8, 4, 2): 334, _G(64, 128, 128, 8, 4, 2): 2469, _G(64, 64, 64, 8, 4, 3): 2,
                         _G(64, 64, 128, 8, 4, 3): 44, _G(128, 128, 16, 8, 4, 8): 47, _G(128, 128, 32, 8, 4, 7): 80},
    ("sm_90a", "tf32"): {_G(64, 128, 128, 8, 4, 2): 483, _G(128, 128, 64, 8, 4, 3): 108},
    ("sm_100a", "ieee"): {_G(16, 128, 256, 8, 4, 2): 211, _G(64, 128, 128, 8, 4, 2): 2417,
                          _G(128, 128, 16, 8, 4, 8): 10, _G(128, 128, 32, 8, 4, 7): 50, _G(64, 32, 32, 8, 4, 3): 6},
    ("sm_100a", "tf32"): {_G(64, 128, 128, 8, 4, 2): 391},
    ("sm_90a", "16bit"): {_G(16, 32, 64, 8, 2, 8): 2, _G(16, 128, 256, 8, 4, 2): 2},  # M = 2..16; mma.sync tiles
    ("sm_100a", "16bit"): {_G(16, 32, 64, 8, 2, 8): 2, _G(16, 128, 256, 8, 4, 2): 2},  # 54 / 126 registers
}
# swap-AB tiles: the same wide fp32 tiles, transposed
for (_target, _precision), _tiles in {
    ("sm_90a", "ieee"): {_G(16, 128, 256, 8, 4, 2, swap_ab=True): 379, _G(64, 128, 128, 8, 4, 2, swap_ab=True): 2392,
                         _G(64, 64, 128, 8, 4, 3, swap_ab=True): 30},
    ("sm_90a", "tf32"): {_G(16, 128, 256, 8, 4, 2, swap_ab=True): 1546, _G(16, 64, 256, 8, 4, 2, swap_ab=True): 118,
                         _G(64, 128, 128, 8, 4, 2, swap_ab=True): 507},
    ("sm_100a", "ieee"): {_G(16, 128, 256, 8, 4, 2, swap_ab=True): 190, _G(64, 128, 128, 8, 4, 2, swap_ab=True): 2383},
    ("sm_100a", "tf32"): {_G(16, 128, 256, 8, 4, 2, swap_ab=True): 2010, _G(16, 64, 256, 8, 4, 2, swap_ab=True): 346,
                          _G(64, 128, 128, 8, 4, 2, swap_ab=True): 390},
}.items():
    SPILLS.setdefault((_target, _precision), {}).update(_tiles)
del _target, _precision, _tiles


def refuse_config(problem: GemmProblem, config: GemmConfig, target: str) -> str | None:
    """None when ``config`` may be offered for ``problem`` on ``target``; why not for a config
    measured spilling registers there (``SPILLS``)."""
    precision = input_precision(problem, target) if problem.dtype == "float32" else "16bit"
    count = SPILLS.get((target, precision), {}).get(config)
    if count is None:
        return None
    return (f"{config.name()} spills registers to local memory on {target} for {precision} operands ({count} "
            "STL/LDL in its SASS, measured with Triton 3.9 by tests/test_tier_i_configs.py); not offered")


def pdl_target(target: str) -> bool:
    """Targets with griddepcontrol (programmatic dependent launch), and the interpreter's, where
    ``runtime/triton_interp`` makes the gdc calls no-ops."""
    return targets.has(target, targets.PDL) or targets.has(target, targets.INTERPRETER)

# The shared body. Inputs: pointers A, B; ints M, N, K and strides; constexprs BLOCK_M/N/K,
# GROUP_M, EVEN_K, ACC_TYPE, INPUT_PRECISION, USE_PDL. Leaves: acc, idx_m, idx_n, mask.
# It starts with launch.PROGRAM_TILE, the program's tile of launch.grid().
BODY = PROGRAM_TILE + """\
    rk = tl.arange(0, BLOCK_K)
    # Lanes past M/N reload a valid row (no mask on the hot loads); the store mask drops them.
    a_ptrs = A + (rm % M)[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = B + rk[:, None] * stride_bk + (rn % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    if USE_PDL:
        # PDL: all above is index math; wait for the previous kernel right before the first load.
        tl.extra.cuda.gdc_wait()
    for k_tile in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k_tile * BLOCK_K
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        acc += tl.dot(a, b, input_precision=INPUT_PRECISION, out_dtype=ACC_TYPE)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if USE_PDL:
        # PDL: the main loop is done; the next kernel may start its prologue during the epilogue.
        tl.extra.cuda.gdc_launch_dependents()
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
"""


def _swapped(body: str) -> str:
    """BODY with swap-AB: the accumulator is C^T [BLOCK_N, BLOCK_M] = B^T A^T, so N sits on the
    MMA's M side and a decode M of 1..16 on its N side; transposed back before the epilogue."""
    for old, new in (
        ("    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)\n",
         "    acc_t = tl.zeros((BLOCK_N, BLOCK_M), dtype=ACC_TYPE)  # swap-AB: C^T = B^T A^T\n"),
        ("        acc += tl.dot(a, b, input_precision=INPUT_PRECISION, out_dtype=ACC_TYPE)\n",
         "        acc_t = tl.dot(tl.trans(b), tl.trans(a), acc_t, input_precision=INPUT_PRECISION, out_dtype=ACC_TYPE)\n"),
        ("    idx_m = rm[:, None]\n", "    acc = tl.trans(acc_t)\n    idx_m = rm[:, None]\n"),
    ):
        if body.count(old) != 1:
            raise AssertionError(f"triton.gemm BODY changed: {old.strip()!r} is no longer there once")
        body = body.replace(old, new)
    return body


BODY_SWAP = _swapped(BODY)

_STANDALONE = """\
import triton
import triton.language as tl

ACC_TYPE = tl.constexpr({acc_type})


@triton.jit
def {name}(
    A, B, C, BIAS, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_bias,
    alpha, beta,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, HAS_BIAS: tl.constexpr, INPUT_PRECISION: tl.constexpr, USE_PDL: tl.constexpr,
):
{body}\
    if HAS_BIAS:
        # addmm semantics: beta * bias + alpha * (A @ B), bias broadcast over rows
        bias = tl.load(BIAS + idx_n * stride_bias, mask=idx_n < N, other=0.0).to(ACC_TYPE)
        acc = acc * alpha + bias * beta
    tl.store(C + idx_m * stride_cm + idx_n * stride_cn, acc.to(C.dtype.element_ty), mask=mask)
"""

_INDUCTOR = """\
{{{{def_kernel("A", "B")}}}}
    # inductor_ext template: triton.gemm
    M = {{{{size("A", 0)}}}}
    N = {{{{size("B", 1)}}}}
    K = {{{{size("A", 1)}}}}
    if M * N == 0:
        return
    stride_am = {{{{stride("A", 0)}}}}
    stride_ak = {{{{stride("A", 1)}}}}
    stride_bk = {{{{stride("B", 0)}}}}
    stride_bn = {{{{stride("B", 1)}}}}
{body}\
    {{{{store_output(("idx_m", "idx_n"), "acc", "mask", val_shape=("BLOCK_M", "BLOCK_N"))}}}}
"""


def kernel_name(problem: GemmProblem, config: GemmConfig) -> str:
    bias = "_bias" if problem.bias else ""
    pdl = "_pdl" if problem.use_pdl else ""
    tf32 = "_tf32" if problem.allow_tf32 and problem.dtype == "float32" else ""
    return f"ext_gemm_{problem.dtype}{tf32}{bias}{pdl}_{config.name()}"


def constexprs(problem: GemmProblem, config: GemmConfig, target: str = "cpu") -> dict[str, object]:
    """The tl.constexpr values a launch (or an Inductor template choice) needs."""
    return {
        "BLOCK_M": config.block_m,
        "BLOCK_N": config.block_n,
        "BLOCK_K": config.block_k,
        "GROUP_M": config.group_m,
        "EVEN_K": not problem.k_dynamic and problem.k % config.block_k == 0,
        "INPUT_PRECISION": input_precision(problem, target),
        "USE_PDL": problem.use_pdl,
    }


def inductor_kwargs(problem: GemmProblem, config: GemmConfig, target: str) -> dict[str, object]:
    """The TritonTemplate kwargs of a choice, as Inductor renders them into source text."""
    kwargs: dict[str, object] = constexprs(problem, config, target)
    kwargs["INPUT_PRECISION"] = repr(kwargs["INPUT_PRECISION"])  # strings need quotes, dtypes not
    kwargs["ACC_TYPE"] = acc_type(problem)
    kwargs["SWAP_AB"] = config.swap_ab  # picks the body in inductor_source()'s jinja
    return kwargs


def render(problem: GemmProblem, config: GemmConfig, target: str = "cpu") -> KernelSource:
    """A standalone Triton module computing ``problem`` with ``config``."""
    reason = refuse_problem(problem)
    if reason:
        raise ValueError(f"triton.gemm cannot serve {problem}: {reason}")
    if problem.use_pdl and not pdl_target(target):
        raise ValueError(f"triton.gemm: use_pdl needs griddepcontrol (NVIDIA sm_90+); {target} has none")
    name = kernel_name(problem, config)
    consts = constexprs(problem, config, target)
    consts["HAS_BIAS"] = problem.bias
    ptr = f"*{FP[problem.dtype]}"
    signature = {
        "A": ptr, "B": ptr, "C": f"*{FP[problem.result_dtype]}", "BIAS": ptr,
        **{s: "i32" for s in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                              "stride_cm", "stride_cn", "stride_bias")},
        "alpha": "fp32", "beta": "fp32",
        **{c: "constexpr" for c in consts},
    }
    return KernelSource(
        name=name,
        source=_STANDALONE.format(name=name, body=BODY_SWAP if config.swap_ab else BODY, acc_type=acc_type(problem)),
        template=NAME,
        config=asdict(config),
        constexprs=consts,
        signature=signature,
        launch=launch_options(problem, config),
    )


def launch_values(problem: GemmProblem) -> dict[str, int]:
    """The integer arguments ``run`` passes for contiguous A [M, K], B [K, N] and C [M, N],
    which Triton's launch specialises on (1 -> a constant, multiples of 16 -> aligned): what
    ``inductor-ext asm`` and tier I compile with, so that the unit strides are constants as on the
    device (Inductor's frame renders static strides as literals). Without them every element
    needs its own address and the registers spill."""
    m, n, k = problem.m, problem.n, problem.k
    return {"M": m, "N": n, "K": k, "stride_am": k, "stride_ak": 1, "stride_bk": n, "stride_bn": 1,
            "stride_cm": n, "stride_cn": 1, "stride_bias": 1}


def inductor_source() -> str:
    """The template text for Inductor's TritonTemplate (jinja macros around the shared body).

    For addmm the lowering passes the bias as a prefix input and Inductor's epilogue_fn applies
    it in store_output, so the body is the same for mm and addmm.
    """
    return _INDUCTOR.format(body="{% if SWAP_AB %}\n" + BODY_SWAP + "{% else %}\n" + BODY + "{% endif %}\n")


def run(a: "torch.Tensor", b: "torch.Tensor", config: GemmConfig, bias: "torch.Tensor | None" = None,
        alpha: float = 1.0, beta: float = 1.0, target: str = "cpu", use_pdl: bool = False,
        allow_tf32: bool = False) -> "torch.Tensor":
    """Render, load and launch the kernel on ``a @ b`` (interpreter on CPU, or a real GPU).

    ``use_pdl`` launches with programmatic dependent launch (in the interpreter the gdc calls
    need ``inductor_ext.runtime.triton_interp``'s fixes); ``allow_tf32`` lets fp32 inputs be
    rounded to TF32 on targets with TF32 tensor cores (``GemmProblem.allow_tf32``)."""
    import torch

    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    problem = GemmProblem(m, n, k, dtype_name(a.dtype), bias=bias is not None, use_pdl=use_pdl,
                          allow_tf32=allow_tf32)
    ks = render(problem, config, target)
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    bias_arg, stride_bias = bias_args(bias, c)
    launch(ks, config, m, n,
           a, b, c, bias_arg, m, n, k,
           a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), stride_bias,
           alpha, beta)
    return c


def device_cases(target: str) -> list[device_case.DeviceCase]:
    """The device check's cases (``templates/device_case.py``): bf16 decode and prefill against
    ``torch.mm`` (cuBLAS), and fp32 with and without TF32, numerics only: without, as full fp32
    (fp64 reference); with, within 10x of ATen's own error under ``allow_tf32``."""

    def bf16(problem: GemmProblem) -> device_case.DeviceOperands:
        from inductor_ext.kernels import matmul

        x, w = device_case.gemm_inputs(problem.m, problem.n, problem.k)
        a, b = x.bfloat16(), w.t().contiguous().bfloat16()
        return device_case.DeviceOperands(lambda config, use_pdl: run(a, b, config, target=target, use_pdl=use_pdl),
                                          matmul.mm_reference(a.double(), b.double()), lambda: torch_mm(a, b))

    def fp32(problem: GemmProblem) -> device_case.DeviceOperands:
        import torch

        from inductor_ext.kernels import matmul

        torch.manual_seed(0)
        a = torch.randn(problem.m, problem.k, device="cuda")
        b = torch.randn(problem.k, problem.n, device="cuda")
        allow = problem.allow_tf32
        return device_case.DeviceOperands(
            lambda config, use_pdl: run(a, b, config, target=target, use_pdl=use_pdl, allow_tf32=allow),
            matmul.mm_reference(a.double(), b.double()), lambda: torch_mm(a, b, allow_tf32=allow))

    cases = device_case.gemm_cases(lambda m, n, k: GemmProblem(m, n, k, "bfloat16"), bf16)
    for allow in (False, True):
        problem = GemmProblem(256, 256, 1024, "float32", allow_tf32=allow)
        cases.append(device_case.DeviceCase(
            f"fp32 256x256x1024 {'tf32' if allow else 'full'}", problem, lambda p=problem: fp32(p),
            tolerance=1e-3 if allow else 1e-4, aten_factor=10.0 if allow else None, timed=False))
    return cases


def torch_mm(a: "torch.Tensor", b: "torch.Tensor", allow_tf32: bool = False) -> "torch.Tensor":
    """ATen's mm with TF32 as ``allow_tf32`` says (reset after)."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    try:
        return torch.mm(a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before

FAMILY = Family.of_module(__name__, pdl=True)
