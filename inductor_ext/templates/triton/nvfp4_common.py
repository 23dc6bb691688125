"""What the two Triton NVFP4 GEMM families share: ``nvfp4_gemm`` (native block16 MMA, Blackwell)
and ``nvfp4_dequant_gemm`` (operands decoded on chip, Hopper). Not a family itself.

Both compute out = act(alpha * (A @ B^T) + bias) with NVFP4 operands (``inductor_ext.kernels.nvfp4``:
packed e2m1 uint8 ``[rows, K // 2]``, one float8_e4m3fn scale per ``BLOCK_SIZE`` elements of K), so
they share:
- the problem rules: ``check_shape`` (whole scale blocks) and ``check_epilogue`` (out and bias
  dtypes, activation, scale layout), and ``name_parts`` of the kernel names;
- the tile config (``Nvfp4TileConfig``, ``check_tile``, ``check_mma_rows``), how candidates are
  picked (``pick_configs``) and how a policy's tile becomes a config (``tile_config``);
- the kernel's parameters: the standalone frame (``standalone``), its ``signature`` and the
  arguments ``run_gemm`` launches it with, all in one order; and the Inductor frame
  (``inductor_frame``) around the same body;
- kernel text around the families' main loops: the tile prologue (``TILE_ROWS``, ``PACKED_K``),
  the scale addressing (``scale_pointers``), the accumulator before and after the K loop with the
  PDL calls (``MAIN_LOOP_ENTRY``, ``MAIN_LOOP_EXIT``) and the fp32 epilogue (``epilogue``).

Programmatic dependent launch (PDL): the ``use_pdl`` field of either family's problem sets the
``USE_PDL`` constexpr, as in ``triton.gemm``: ``tl.extra.cuda.gdc_wait()`` after the index, pointer
and scale-address setup, right before the first global load (the first K tile of the operands; the
Inductor frame loads ALPHA after the main loop for this reason), and
``tl.extra.cuda.gdc_launch_dependents()`` right after the K loop, before alpha, bias, activation
and the store. ``render()`` adds the compile option ``launch_pdl=True`` to ``KernelSource.launch``.
It is a problem field, not a config field: it depends on the GEMM's place in the graph
(``inductor_ext.autotune.pdl_policy.use_pdl``) and is the same for every candidate config.
"""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from inductor_ext.templates.allowed import flag, integer
from inductor_ext.templates.base import KernelSource, Tile
from inductor_ext.templates.triton.launch import FP, PROGRAM_TILE, bias_args, dtype_name, launch, launch_options

if TYPE_CHECKING:  # annotations only: the module itself never imports torch at load
    import torch

    from inductor_ext.kernels.nvfp4 import NVFP4Tensor

OUT_DTYPES = ("bfloat16", "float16", "float32")
BIAS_DTYPES = ("bfloat16", "float16", "float32")
# None, relu, gelu (erf form, F.gelu), gelu_tanh (F.gelu(approximate="tanh")), silu
ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")
SCALE_LAYOUTS = ("plain", "blocked")
BLOCK_SIZE = 16  # NVFP4: one e4m3 scale per 16 elements of K


# ----------------------------------------------------------------------------- problem rules


def problem_fields(spec: Any) -> dict[str, Any]:
    """The ``inductor_ext::nvfp4_gemm`` op (a, b, scale_a, scale_b, alpha, bias, in _scaled_mm's
    order, with its scales in the blocked layout) as the fields both families' problems share."""
    a, b_t, _, _, _, bias = spec.inputs
    activation = spec.scalars["activation"]
    return dict(m=a.shape[0], n=b_t.shape[1], k=2 * a.shape[1], out_dtype=spec.scalars["out_dtype"],
                bias=bias is not None, bias_dtype=bias.dtype if bias is not None else None,
                activation=None if activation == "none" else activation, scale_layout="blocked")


def inductor_kwargs(constexprs: dict[str, object]) -> dict[str, object]:
    """A family's constexprs as Inductor renders template kwargs: strings quoted."""
    return {**constexprs, "ACTIVATION": repr(constexprs["ACTIVATION"])}



def check_shape(problem: Any) -> str | None:
    """Why ``problem``'s M, N, K cannot be served (empty, or partial scale blocks), else None."""
    if min(problem.m, problem.n, problem.k) <= 0:
        return f"empty problem {problem.m}x{problem.n}x{problem.k}"
    if problem.k % BLOCK_SIZE:
        return (f"K={problem.k} is not a multiple of {BLOCK_SIZE}: NVFP4 GEMMs take whole 16-element "
                f"scale blocks (partial last blocks are for reference math only)")
    return None


def check_epilogue(problem: Any) -> str | None:
    """Why ``problem``'s output, bias, activation or scale layout cannot be served, else None."""
    if problem.out_dtype not in OUT_DTYPES:
        return f"out_dtype {problem.out_dtype} not in {OUT_DTYPES}"
    if problem.bias and problem.result_bias_dtype not in BIAS_DTYPES:
        return f"bias dtype {problem.result_bias_dtype} not in {BIAS_DTYPES}"
    if problem.activation not in ACTIVATIONS:
        return f"activation {problem.activation!r} not in {ACTIVATIONS}"
    if problem.scale_layout not in SCALE_LAYOUTS:
        return f"scale_layout {problem.scale_layout!r} not in {SCALE_LAYOUTS}"
    return None


def name_parts(problem: Any) -> list[str]:
    """The kernel-name parts after a family's prefix and dtypes: bias, activation, layout, PDL."""
    parts = []
    if problem.bias:
        parts.append(f"bias_{FP[problem.result_bias_dtype]}")
    if problem.activation:
        parts.append(problem.activation)
    if problem.scale_layout != "plain":
        parts.append(problem.scale_layout)
    if problem.use_pdl:
        parts.append("pdl")
    return parts


# ----------------------------------------------------------------------------- configs


@dataclass(frozen=True)
class Nvfp4TileConfig:
    """The tile both families' configs are (each family subclasses it under its own name)."""

    block_m: int = integer(low=16, high=1024, power_of_two=True)
    block_n: int = integer(low=16, high=1024, power_of_two=True)
    # in elements (BLOCK_K // 2 bytes, BLOCK_K // 16 scales per row per step)
    block_k: int = integer(low=16, high=1024, power_of_two=True)
    group_m: int = integer(8, low=1, high=64)
    num_warps: int = integer(4, low=1, high=32, power_of_two=True)
    num_stages: int = integer(3, low=1, high=16)
    swap_ab: bool = flag(False)  # compute acc^T = B A^T: a small M sits on the MMA's N side

    def name(self) -> str:
        swap = "_swap" if self.swap_ab else ""
        return (f"{self.block_m}x{self.block_n}x{self.block_k}_g{self.group_m}_w{self.num_warps}"
                f"_s{self.num_stages}{swap}")


ConfigT = TypeVar("ConfigT", bound=Nvfp4TileConfig)


def check_tile(config: Nvfp4TileConfig) -> str | None:
    """Why the block sizes cannot be rendered (not powers of two >= 16), else None."""
    for name in ("block_m", "block_n", "block_k"):
        value = getattr(config, name)
        if value < 16 or value & (value - 1):
            return f"{name}={value} must be a power of two >= 16"
    return None


def check_mma_rows(config: Nvfp4TileConfig, minimum: int, why: str) -> str | None:
    """Why the rows on the MMA's M side (BLOCK_N with swap_ab, else BLOCK_M) are too few for the
    target's MMA (fewer than ``minimum``; ``why`` says what happens then), else None."""
    rows = config.block_n if config.swap_ab else config.block_m
    if rows < minimum:
        return f"{rows} rows on the MMA's M side ({'BLOCK_N with swap_ab' if config.swap_ab else 'BLOCK_M'}): {why}"
    return None


def spill_reason(config: Nvfp4TileConfig, target: str | None,
                 spills: dict[str, dict[Any, int]]) -> str | None:
    """Why ``config`` is not offered on ``target`` when the family measured it spilling registers
    to local memory (``spills``: target -> {config: STL + LDL count}, from tier I), else None."""
    count = spills.get(target or "", {}).get(config)
    if count is None:
        return None
    return (f"{config.name()} spills registers to local memory on {target} ({count} STL/LDL in its SASS, "
            "measured with Triton 3.9 by tests/test_tier_i_configs.py); not offered")


def pick_configs(problem: Any, target: str, targets: Sequence[str], cpu: Sequence[ConfigT], gpu: Sequence[ConfigT],
                 small_m: Sequence[ConfigT], usable: Callable[[ConfigT], bool]) -> list[ConfigT]:
    """A family's ``configs()``: all of ``cpu`` in the interpreter; on the GPU target the first
    ``small_m`` (swap-AB) config that fits a small M, then the ``gpu`` configs not much wider than
    N (at least the last), keeping those ``usable`` (the family's check_config) accepts."""
    if target not in targets:
        raise ValueError(f"target {target!r} is not one of {targets}")
    if target == "cpu":
        return list(cpu)
    out: list[ConfigT] = []
    if problem.m <= 64:
        out += [c for c in small_m if c.block_m >= min(problem.m, 64)][:1]
    fitting = [c for c in gpu if c.block_n <= max(64, 2 * problem.n)]
    return [c for c in out + (fitting or [gpu[-1]]) if usable(c)]


def tile_config(tile: Tile, cls: type[ConfigT]) -> ConfigT | None:
    """A policy's tile as a ``cls`` config (GROUP_M 1 for swap-AB tiles, else 8); None for
    split-K, which neither family supports. The family still applies its check_config."""
    if tile.split_k != 1:
        return None
    return cls(tile.block_m, tile.block_n, tile.block_k, 1 if tile.swap_ab else 8,
               tile.num_warps, tile.num_stages, swap_ab=tile.swap_ab)


# ----------------------------------------------------------------------------- kernel text

# After PROGRAM_TILE: rows of A and B that are safe to load. Leaves rm_safe, rn_safe.
TILE_ROWS = PROGRAM_TILE + """\
    # Lanes past M/N reload a valid row (no mask on the hot loads); the store mask drops them.
    rm_safe = rm % M
    rn_safe = rn % N
"""

# The packed K axes of one BLOCK_K step: rkp over bytes, rks over scales.
PACKED_K = """\
    # Two e2m1 codes per byte along K (low nibble first), one e4m3 scale per 16 codes.
    rkp = tl.arange(0, BLOCK_K // 2)
    rks = tl.arange(0, BLOCK_K // 16)
"""

# Scale rows per operand: the safe row index and the plain layout's strides.
_SCALE_ROWS = {"a": ("rm_safe", "stride_asm", "stride_ask"), "b": ("rn_safe", "stride_bsn", "stride_bsk")}


def scale_pointers(operands: str, step: str, indent: int = 4, tile_stride: bool = True) -> str:
    """Kernel text addressing the scales of ``operands`` ("a", "b" or "ab") in either layout.

    Inputs: ``<x>_scale_base`` (uint8 pointers), rm_safe / rn_safe, rks, K and the plain strides.
    Leaves ``<x>_s_ptrs`` [rows, BLOCK_K // 16] and the per-K-step increment named
    ``step.format(x)``. With ``tile_stride`` it computes ``tile_stride`` (bytes per row of 128x4
    tiles) first; without, it uses the one an earlier call left.
    """
    blocked: list[str] = []
    plain: list[str] = []
    for x in operands:
        rows, stride_rows, stride_k = _SCALE_ROWS[x]
        blocked += [f"{x}_s_rows = ({rows} // 128) * tile_stride + ({rows} % 32) * 16 + ({rows} // 32 % 4) * 4",
                    f"{x}_s_ptrs = {x}_scale_base + {x}_s_rows[:, None] + ((rks // 4) * 512 + rks % 4)[None, :]"]
        plain.append(f"{x}_s_ptrs = {x}_scale_base + {rows}[:, None] * {stride_rows} + rks[None, :] * {stride_k}")
    blocked += [f"{step.format(x)} = BLOCK_K // 64 * 512" for x in operands]
    plain += [f"{step.format(x)} = BLOCK_K // 16 * {_SCALE_ROWS[x][2]}" for x in operands]
    if tile_stride:
        blocked[:0] = ["# kernels.nvfp4.to_blocked: 128x4 tiles of 512 bytes, row-major over (row tile, col tile);",
                       "# entry (r, c) of a tile at (r % 32) * 16 + (r // 32) * 4 + c.",
                       "tile_stride = tl.cdiv(K // 16, 4) * 512"]
    text = "\n".join(["if BLOCKED_SCALES:", *("    " + line for line in blocked),
                      "else:", *("    " + line for line in plain)]) + "\n"
    return textwrap.indent(text, " " * indent)


# Before the K loop: the fp32 accumulator (transposed with SWAP_AB), then the PDL wait.
MAIN_LOOP_ENTRY = """\
    if SWAP_AB:
        acc_t = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if USE_PDL:
        # PDL: all above is index math; wait for the previous kernel right before the first load.
        tl.extra.cuda.gdc_wait()
"""

# After the K loop: the PDL launch, acc [BLOCK_M, BLOCK_N], and the store's indices and mask.
MAIN_LOOP_EXIT = """\
    if USE_PDL:
        # PDL: the main loop is done; the next kernel may start its prologue during the epilogue.
        tl.extra.cuda.gdc_launch_dependents()
    if SWAP_AB:
        acc = tl.trans(acc_t)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
"""

_EPILOGUE_AFTER_ALPHA = """\
    acc = acc * alpha
    if HAS_BIAS:
        bias = tl.load(BIAS + rn_safe * stride_bias).to(tl.float32)
        acc = acc + bias[None, :]
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == "gelu":  # erf form
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    elif ACTIVATION == "gelu_tanh":  # 0.5 * x * (1 + tanh(u)) == x * sigmoid(2 * u)
        acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    elif ACTIVATION == "silu":
        acc = acc * tl.sigmoid(acc)
"""


def epilogue(alpha: str) -> str:
    """The fp32 epilogue: alpha, then bias, then the activation, all before the one rounding.
    Inputs: acc, alpha, rn_safe; BIAS, stride_bias; constexprs HAS_BIAS, ACTIVATION. ``alpha``
    says in its comment what alpha is for the family."""
    return f"    # alpha ({alpha}) in fp32, before bias and activation.\n" + _EPILOGUE_AFTER_ALPHA


# ----------------------------------------------------------------------------- frames


def standalone(flags: str = "", preamble: str = "") -> str:
    """The standalone module text (``str.format`` fields: name, body, epilogue, and any in
    ``preamble``): the kernel's parameters in the order of ``signature`` and ``run_gemm``.
    ``flags`` adds operand constexprs after EVEN_K; ``preamble`` module lines after the imports."""
    return f"""\
import triton
import triton.language as tl
{preamble}

@triton.jit
def {{name}}(
    A, A_SCALE, B, B_SCALE, C, BIAS, M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk, stride_asm, stride_ask, stride_bsn, stride_bsk,
    stride_cm, stride_cn, stride_bias, alpha,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, {flags}BLOCKED_SCALES: tl.constexpr, SWAP_AB: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, USE_PDL: tl.constexpr,
):
{{body}}{{epilogue}}\
    tl.store(C + idx_m * stride_cm + idx_n * stride_cn, acc.to(C.dtype.element_ty), mask=mask)
"""


# The Inductor frame; <NAME> marks what inductor_frame() fills in. Jinja braces are doubled for
# the str.format that puts the body and epilogue in.
_INDUCTOR_FRAME = """\
<DEF_KERNEL>
    # inductor_ext template: <FAMILY>
    M = {{{{size("A", 0)}}}}
    N = {{{{size("B", 1)}}}}
    K = 2 * {{{{size(<PACKED_K>)}}}}
    if M * N == 0:
        return
    stride_am = {{{{stride("A", 0)}}}}
    stride_ak = {{{{stride("A", 1)}}}}
    stride_bn = {{{{stride("B", 1)}}}}
    stride_bk = {{{{stride("B", 0)}}}}
<SCALE_STRIDES>\
{{% if HAS_BIAS %}}\
    stride_bias = {{{{stride("BIAS", -1)}}}}
{{% else %}}\
    BIAS = <BIAS_STAND_IN>
    stride_bias = 0
{{% endif %}}\
{body}\
    # after the main loop, so that with USE_PDL the first global load comes after gdc_wait()
    alpha = tl.load(ALPHA).to(tl.float32)
{epilogue}\
    {{{{store_output(("idx_m", "idx_n"), "acc", "mask", val_shape=("BLOCK_M", "BLOCK_N"))}}}}
"""


def inductor_frame(family: str, def_kernel: str, packed_k: str, scale_strides: str, bias_stand_in: str) -> str:
    """The Inductor template frame (``str.format`` fields: body, epilogue) of a family.

    ``def_kernel``: the jinja choosing the ``def_kernel`` inputs; ``packed_k``: the ``size()``
    arguments of the packed K dimension; ``scale_strides``: the jinja setting stride_asm/ask/bsn/bsk;
    ``bias_stand_in``: the input BIAS names without HAS_BIAS (never read).
    """
    text = _INDUCTOR_FRAME
    for mark, value in (("<DEF_KERNEL>", def_kernel), ("<FAMILY>", family), ("<PACKED_K>", packed_k),
                        ("<SCALE_STRIDES>", scale_strides), ("<BIAS_STAND_IN>", bias_stand_in)):
        text = text.replace(mark, value)
    return text


# ----------------------------------------------------------------------------- render and run


def kernel_constexprs(problem: Any, config: Nvfp4TileConfig, **operand_flags: bool) -> dict[str, object]:
    """A family's ``constexprs()``; ``operand_flags`` (e.g. A_NVFP4) come after EVEN_K."""
    return {
        "BLOCK_M": config.block_m,
        "BLOCK_N": config.block_n,
        "BLOCK_K": config.block_k,
        "GROUP_M": config.group_m,
        "EVEN_K": problem.k % config.block_k == 0,
        **operand_flags,
        "BLOCKED_SCALES": problem.scale_layout == "blocked",
        "SWAP_AB": config.swap_ab,
        "HAS_BIAS": problem.bias,
        "ACTIVATION": problem.activation,
        "USE_PDL": problem.use_pdl,
    }


def launch_values(problem: Any, a_packed: bool) -> dict[str, int]:
    """The integer arguments ``run_gemm`` passes for contiguous operands (A [M, K] or packed
    [M, K // 2], B [N, K // 2], C [M, N], plain scales [rows, K // 16] or blocked ones with
    strides 0), which Triton's launch specialises on (1 -> a constant, multiples of 16 ->
    aligned): what ``inductor-ext asm`` and tier I compile with, so that the unit K and N strides
    are constants as on the device. Inductor's frame renders static strides as literals."""
    m, n, k = problem.m, problem.n, problem.k
    blocked = problem.scale_layout == "blocked"
    return {"M": m, "N": n, "K": k, "stride_am": k // 2 if a_packed else k, "stride_ak": 1,
            "stride_bn": k // 2, "stride_bk": 1, "stride_asm": 0 if blocked else k // 16,
            "stride_ask": 0 if blocked else 1, "stride_bsn": 0 if blocked else k // 16,
            "stride_bsk": 0 if blocked else 1, "stride_cm": n, "stride_cn": 1, "stride_bias": 1}


def check_render(family: str, targets: Sequence[str], problem: Any, config: Any, target: str,
                 reason: str | None) -> None:
    """Raise ValueError when ``target`` is not one of ``targets``, or with ``reason`` (the family's
    refuse_problem / check_config verdict) when there is one."""
    if target not in targets:
        raise ValueError(f"target {target!r} is not one of {targets}")
    if reason:
        raise ValueError(f"{family} cannot serve {problem} with {config}: {reason}")


def kernel_source(family: str, name: str, source: str, problem: Any, config: Nvfp4TileConfig,
                  consts: dict[str, object], a_type: str) -> KernelSource:
    """The rendered kernel: ``source`` (a ``standalone`` frame) with the shared signature, where
    A is of Triton type ``a_type``, and the launch options."""
    signature = {
        "A": a_type, "A_SCALE": "*fp8e4nv", "B": "*u8", "B_SCALE": "*fp8e4nv",
        "C": f"*{FP[problem.out_dtype]}", "BIAS": f"*{FP[problem.result_bias_dtype]}",
        **{s: "i32" for s in ("M", "N", "K", "stride_am", "stride_ak", "stride_bn", "stride_bk",
                              "stride_asm", "stride_ask", "stride_bsn", "stride_bsk",
                              "stride_cm", "stride_cn", "stride_bias")},
        "alpha": "fp32",
        **{c: "constexpr" for c in consts},
    }
    return KernelSource(
        name=name,
        source=source,
        template=family,
        config=asdict(config),
        constexprs=consts,
        signature=signature,
        launch=launch_options(problem, config),
    )


def run_gemm(render: Callable[[Any, Any, str], KernelSource], make_problem: Callable[..., Any],
             a_arg: "torch.Tensor", a_scales: "torch.Tensor | None", b: "NVFP4Tensor", config: Nvfp4TileConfig, *,
             alpha: float, bias: "torch.Tensor | None", activation: str | None, out_dtype: "torch.dtype",
             scale_layout: str, target: str, use_pdl: bool) -> "torch.Tensor":
    """Render with the family's ``render`` the problem ``make_problem(m, n, k, out_dtype=..., ...)``
    makes, and launch it on ``a_arg [M, ...] @ b^T``: what both families' ``run()`` share once
    they have checked K and chosen alpha and the output dtype.

    ``a_arg`` is passed as A as it is (packed uint8 codes or bf16/fp16 activations, any strides);
    ``a_scales`` are A's scales, or None when A has none (B's then stand in for A_SCALE, unread,
    with strides 0). With ``scale_layout="blocked"`` the plain scales are swizzled with
    ``to_blocked`` first and the kernel reads the swizzled copies.
    """
    import torch

    from inductor_ext.kernels.nvfp4 import to_blocked

    qb = b.qdata.view(torch.uint8)
    m, (n, kp) = a_arg.shape[0], qb.shape
    k = 2 * kp
    problem = make_problem(m, n, k, out_dtype=dtype_name(out_dtype), bias=bias is not None,
                           bias_dtype=dtype_name(bias.dtype) if bias is not None else None,
                           activation=activation, scale_layout=scale_layout, use_pdl=use_pdl)
    ks = render(problem, config, target)
    blocked = scale_layout == "blocked"
    sb = b.scales.view(torch.float8_e4m3fn)
    sb_arg = to_blocked(sb) if blocked else sb
    if a_scales is None:
        sa_arg, a_strides = sb_arg, (0, 0)
    else:
        sa = a_scales.view(torch.float8_e4m3fn)
        sa_arg, a_strides = (to_blocked(sa) if blocked else sa), (sa.stride(0), sa.stride(1))
    scale_strides = (0, 0, 0, 0) if blocked else a_strides + (sb.stride(0), sb.stride(1))
    c = torch.empty((m, n), dtype=out_dtype, device=a_arg.device)
    bias_arg, stride_bias = bias_args(bias, c)
    launch(ks, config, m, n,
           a_arg, sa_arg, qb, sb_arg, c, bias_arg, m, n, k,
           a_arg.stride(0), a_arg.stride(1), qb.stride(0), qb.stride(1), *scale_strides,
           c.stride(0), c.stride(1), stride_bias, float(alpha))
    return c
