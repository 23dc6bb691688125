"""Triton LayerNorm: each program normalizes BLOCK_M whole rows of the [rows, columns] view the
``layer_norm`` op's lowering hands every choice (``lowering/ops/layer_norm.py``): one load of a
row into registers (BLOCK_N, the columns rounded up to a power of two), mean and biased variance
in fp32, then weight and bias (each optional) and one rounding to the input dtype.

One kernel body, two frames (as ``triton.gemm``): ``render()`` a standalone ``@triton.jit``
module (tier I, tier D through ``run``), ``inductor_source()`` Inductor's template macros, so the
choice can take an epilogue; it launches on its own grid (``grid``: one program per BLOCK_M
rows), not Inductor's GEMM grid. No GEMM tile policy applies (no ``config_from_tile``).

Tiers: I (sm_90a: the warp reductions ``shfl.sync.bfly`` and ``rsqrt``), C (Triton's
interpreter, tests/test_triton_layer_norm.py), D (``device_cases``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from inductor_ext.templates.allowed import flag, integer, number, one_of, size
from inductor_ext.templates.base import KernelSource
from inductor_ext.templates.device_case import DeviceCase, DeviceOperands
from inductor_ext.templates.family import Family, OpSpec, by_target
from inductor_ext.templates.triton.launch import FP

if TYPE_CHECKING:  # annotations only: the module never imports torch at load
    import torch

NAME = "triton.layer_norm"
# Claimed only where tier I passes (tests/test_triton_layer_norm.py).
TARGETS = ("sm_90a",)
OPS = ("layer_norm",)
CHOICE_KIND = "triton_template"
CPU_EXECUTOR = "the Triton interpreter"
DTYPES = ("float32", "float16", "bfloat16")
MAX_COLS = 8192  # a whole row stays in registers
KEY_INSTRUCTIONS = {"sm_90a": [("ptx", r"shfl\.sync\.bfly"), ("ptx", r"rsqrt\.approx")]}


@dataclass(frozen=True)
class Problem:
    rows: int = size()  # the leading dimensions, flattened
    cols: int = integer(low=1, high=MAX_COLS)  # prod(normalized_shape)
    dtype: str = one_of(DTYPES, "float32")
    weight: bool = flag(True)
    bias: bool = flag(True)
    eps: float = number(1e-5, low=0.0)


@dataclass(frozen=True)
class Config:
    block_m: int = integer(1, low=1, high=64, power_of_two=True)  # rows per program
    num_warps: int = integer(4, low=1, high=32, power_of_two=True)
    num_stages: int = integer(1, low=1, high=4)

    def name(self) -> str:
        return f"m{self.block_m}_w{self.num_warps}"


def block_n(problem: Problem) -> int:
    return 1 << max(problem.cols - 1, 0).bit_length()


def problem_for(spec: OpSpec) -> Problem | str:
    """``layer_norm(input, weight?, bias?, normalized_shape, eps)``: the input as rows x columns."""
    if spec.op not in OPS:
        return f"{NAME} serves {OPS}, not {spec.op}"
    x, w, b = spec.inputs
    shape = [int(s) for s in spec.scalars["normalized_shape"]]
    if x is None or len(shape) > len(x.shape) or list(x.shape[len(x.shape) - len(shape):]) != shape:
        return f"normalized_shape {shape} is not the trailing dims of the input"
    if any(t is not None and t.dtype != x.dtype for t in (w, b)):
        return "weight or bias of another dtype than the input"
    rows, cols = 1, 1
    for s in x.shape[:len(x.shape) - len(shape)]:
        rows *= s
    for s in shape:
        cols *= s
    if x.dtype not in DTYPES:
        return f"dtype {x.dtype} not in {DTYPES}"
    problem = Problem(rows, max(cols, 1), x.dtype, w is not None, b is not None, float(spec.scalars["eps"]))
    return supports(problem) or problem


def supports(problem: Problem) -> str | None:
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if problem.rows <= 0:
        return "no rows"
    if problem.cols > MAX_COLS:
        return f"rows of {problem.cols} elements exceed {MAX_COLS} (a row is held in registers)"
    return None


def config_supports(problem: Problem, config: Config, target: str) -> str | None:
    if config.block_m * block_n(problem) > 16384:
        return f"block_m={config.block_m} rows of {block_n(problem)} exceed 16384 elements per program"
    return None


ALL_CONFIGS = tuple(Config(m, w) for m in (1, 4, 16) for w in (4, 8))


def configs(problem: Problem, target: str) -> list[Config]:
    """Several rows per program for short rows, one for long ones; 4 or 8 warps."""
    return [c for c in ALL_CONFIGS if config_supports(problem, c, target) is None
            and (c.block_m == 1 or problem.rows >= c.block_m)]


def grid(rows, cols, meta, *, cdiv):  # noqa: ANN001, ANN201 (Inductor's SymbolicGridFn form)
    """One program per BLOCK_M rows, whatever the width."""
    return (cdiv(rows, meta["BLOCK_M"]), 1, 1)


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> Problem | str:
    """``inductor-ext asm``'s problem for an MxNxK shape: M rows of N (K unused)."""
    problem = Problem(m, n, dtype or "bfloat16")
    return supports(problem) or problem


BODY = """\
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    mask_n = rn < N
    mask = (rm < M)[:, None] & mask_n[None, :]
    x = tl.load(X + rm[:, None].to(tl.int64) * stride_xm + rn[None, :] * stride_xn, mask=mask, other=0.0)
    x = x.to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    diff = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(diff * diff, axis=1) / N
    out = diff * tl.rsqrt(var + EPS)[:, None]
    if HAS_WEIGHT:
        out = out * tl.load(W + rn * stride_w, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS:
        out = out + tl.load(B + rn * stride_b, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    idx_m = rm[:, None]
    idx_n = rn[None, :]
"""

_STANDALONE = """\
import triton
import triton.language as tl


@triton.jit
def {name}(
    X, W, B, OUT, M, N, stride_xm, stride_xn, stride_w, stride_b, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
    EPS: tl.constexpr,
):
{body}\
    tl.store(OUT + idx_m.to(tl.int64) * stride_om + idx_n, out.to(OUT.dtype.element_ty), mask=mask)
"""

_INDUCTOR = """\
{% if HAS_WEIGHT and HAS_BIAS %}{{def_kernel("X", "W", "B")}}{% elif HAS_WEIGHT %}{{def_kernel("X", "W")}}\
{% elif HAS_BIAS %}{{def_kernel("X", "B")}}{% else %}{{def_kernel("X")}}{% endif %}
    # inductor_ext template: triton.layer_norm
    M = {{size("X", 0)}}
    N = {{size("X", 1)}}
    stride_xm = {{stride("X", 0)}}
    stride_xn = {{stride("X", 1)}}
    stride_w = {% if HAS_WEIGHT %}{{stride("W", 0)}}{% else %}0{% endif %}
    stride_b = {% if HAS_BIAS %}{{stride("B", 0)}}{% else %}0{% endif %}
@BODY@\
    {{store_output(("idx_m", "idx_n"), "out", "mask", val_shape=("BLOCK_M", "BLOCK_N"))}}
"""


def constexprs(problem: Problem, config: Config) -> dict[str, object]:
    return {"BLOCK_M": config.block_m, "BLOCK_N": block_n(problem), "HAS_WEIGHT": problem.weight,
            "HAS_BIAS": problem.bias, "EPS": float(problem.eps)}


def inductor_kwargs(problem: Problem, config: Config, target: str) -> dict[str, object]:
    return constexprs(problem, config)


def inductor_source() -> str:
    return _INDUCTOR.replace("@BODY@", BODY)


def kernel_name(problem: Problem, config: Config) -> str:
    affine = ("_w" if problem.weight else "") + ("_b" if problem.bias else "")
    return f"ext_layer_norm_{problem.dtype}{affine}_{config.name()}"


def render(problem: Problem, config: Config, target: str = "sm_90a") -> KernelSource:
    """A standalone Triton module computing ``problem`` with ``config``."""
    reason = supports(problem) or config_supports(problem, config, target)
    if reason:
        raise ValueError(f"{NAME} cannot serve {problem} with {config}: {reason}")
    name = kernel_name(problem, config)
    consts = constexprs(problem, config)
    ptr = f"*{FP[problem.dtype]}"
    signature = {"X": ptr, "W": ptr, "B": ptr, "OUT": ptr,
                 **{s: "i32" for s in ("M", "N", "stride_xm", "stride_xn", "stride_w", "stride_b", "stride_om")},
                 **{c: "constexpr" for c in consts}}
    return KernelSource(name=name, source=_STANDALONE.format(name=name, body=BODY), template=NAME,
                        config=asdict(config), constexprs=consts, signature=signature,
                        launch={"num_warps": config.num_warps, "num_stages": config.num_stages})


def launch_values(problem: Problem) -> dict[str, int]:
    """A contiguous [rows, cols] input and output, contiguous weight and bias."""
    return {"M": problem.rows, "N": problem.cols, "stride_xm": problem.cols, "stride_xn": 1, "stride_w": 1,
            "stride_b": 1, "stride_om": problem.cols}


def run(x: "torch.Tensor", weight: "torch.Tensor | None", bias: "torch.Tensor | None", config: Config,
        eps: float = 1e-5, target: str = "sm_90a") -> "torch.Tensor":
    """LayerNorm over the last dim of a 2-D ``x`` (interpreter on CPU tensors, or a GPU)."""
    import torch

    from inductor_ext.runtime.triton_loader import load_kernel

    rows, cols = x.shape
    problem = Problem(rows, cols, str(x.dtype).removeprefix("torch."), weight is not None, bias is not None, eps)
    ks = render(problem, config, target)
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    w = weight if weight is not None else out
    b = bias if bias is not None else out
    load_kernel(ks)[(-(-rows // config.block_m),)](
        x, w, b, out, rows, cols, x.stride(0), x.stride(1), w.stride(-1), b.stride(-1), out.stride(0),
        **ks.constexprs, **ks.launch)
    return out


def device_cases(target: str) -> list[DeviceCase]:
    """A bf16 4096x4096 LayerNorm against ATen's ``F.layer_norm``."""

    def operands(problem: Problem) -> DeviceOperands:
        import torch

        from inductor_ext.kernels.layer_norm_ops import layer_norm_reference

        torch.manual_seed(0)
        x = torch.randn(problem.rows, problem.cols, device="cuda").bfloat16()
        w, b = (torch.randn(problem.cols, device="cuda").bfloat16() for _ in range(2))
        return DeviceOperands(lambda config, use_pdl: run(x, w, b, config, problem.eps, target),
                              layer_norm_reference(x.double(), w.double(), b.double(), [problem.cols], problem.eps),
                              lambda: torch.nn.functional.layer_norm(x, [problem.cols], w, b, problem.eps))

    problem = Problem(4096, 4096, "bfloat16")
    return [DeviceCase("rows 4096x4096", problem, lambda: operands(problem))]


FAMILY = Family(
    name=NAME, choice_kind=CHOICE_KIND, ops=OPS, targets=TARGETS, Problem=Problem, Config=Config,
    problem_for=problem_for, supports=supports, configs=configs, config_supports=config_supports,
    render=render, inductor_source=inductor_source, inductor_kwargs=inductor_kwargs, grid=grid,
    cpu_executor=CPU_EXECUTOR, example_problem=example_problem, key_instructions=by_target(KEY_INSTRUCTIONS),
    launch_values=launch_values, device_cases=device_cases, module=__name__)
