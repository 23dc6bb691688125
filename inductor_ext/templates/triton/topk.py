"""Triton top-k over the last dimension (sampling over a vocabulary row, MoE routers over 64-256
experts): the indices of the k largest (or smallest) values of each row, sorted, ties to the lowest
index (``kernels/topk.py``'s rule). ``inductor_ext::topk_indices`` is what it serves; the
``topk_op`` pass gathers the values from the input.

One sort key per element carries both orders: an int64 whose high 32 bits are the value's bits
mapped to a signed integer of the same order (``-0.0`` made ``0.0``, NaN made one NaN above +inf,
all reversed for ``largest=False``) and whose low 32 bits are ``2**32 - 1 - index`` (a lower index
is a larger key). The k largest keys are the answer, ties included, and ``tl.topk`` (a bitonic
top-k) finds them in registers. A program takes BLOCK_M rows; it walks each row in chunks of BLOCK_N,
keeps the best K_PAD keys (k rounded up to a power of two) and merges each chunk's best into them.

Tiers: G (the rendered module), I (compiled for gfx950 by Triton: the 64-bit key compares, the
DPP / permlane lane exchanges of the bitonic network and the int64 stores asserted, no spills), C (Triton's interpreter vs
``kernels.topk.topk_reference``, exact indices). D: ``call`` on a gfx950.

Why Triton and not Helion: Helion 1.5.1's Triton backend generates ``torch.topk`` inside a kernel,
but its FlyDSL backend (the one giving gfx950 ISA) has no ``aten.topk`` lowering ("Aten lowering
codegen not registered"). To check on a gfx950: a bf16/fp16 row is loaded one element per lane
(``buffer_load_ushort``, no 16-byte loads), and a long row costs one bitonic top-k per chunk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from inductor_ext.runtime.triton_loader import load_kernel
from inductor_ext.targets import amd
from inductor_ext.templates.allowed import flag, integer, one_of, size
from inductor_ext.templates.base import KernelSource, rendered
from inductor_ext.templates.family import Family, OpSpec
from inductor_ext.templates.triton.launch import FP

if TYPE_CHECKING:  # annotations only: the module never imports torch at load
    import torch

NAME = "triton.topk"
# Claimed only where tier I passes (tests/test_triton_topk.py).
TARGETS = ("gfx950",)
OPS = ("topk",)  # inductor_ext::topk_indices (lowering/ops/topk.py), what the topk_op pass makes of torch.topk
CHOICE_KIND = "extern"
CPU_EXECUTOR = "the Triton interpreter"  # interpret mode, CPU tensors
DTYPES = ("bfloat16", "float16", "float32")
MAX_K = 64  # the best keys live in registers beside each chunk; larger k is ATen's
MAX_N = 2**31 - 1  # indices travel in the low 32 bits of a key (and offsets are int32)
KEY_INSTRUCTIONS = amd.key_instructions({"gfx950": ("cmp_i64", "dpp", "store_8b")})


@dataclass(frozen=True)
class TopkProblem:
    rows: int = size()  # the leading dimensions, flattened
    n: int = integer(low=1, high=MAX_N)  # the row length (the last dimension)
    k: int = integer(low=1, high=MAX_K)
    largest: bool = flag(True)
    dtype: str = one_of(DTYPES, "float32")


@dataclass(frozen=True)
class TopkConfig:
    block_m: int = integer(1, low=1, high=64)  # rows per program
    # elements of a row per chunk (at least K_PAD)
    block_n: int = integer(1024, low=1, high=2**16, power_of_two=True)
    num_warps: int = integer(4, low=1, high=32, power_of_two=True)

    def name(self) -> str:
        return f"m{self.block_m}_n{self.block_n}_w{self.num_warps}"


Problem, Config = TopkProblem, TopkConfig
# Routers: many short rows, several per program. Vocabularies: one long row per program, big chunks.
_SHORT = tuple(TopkConfig(m, n, 4) for n in (64, 128, 256) for m in (4, 16))
_LONG = tuple(TopkConfig(1, n, w) for n in (1024, 2048, 4096) for w in (4, 8))
ALL_CONFIGS = _SHORT + _LONG


def k_pad(k: int) -> int:
    """k rounded up to a power of two (``tl.topk`` selects powers of two)."""
    return 1 << max(k - 1, 0).bit_length()


def problem_for(spec: OpSpec) -> TopkProblem | str:
    """``topk_indices(input, k, dim, largest, sorted)``: inputs (input,)."""
    if spec.op not in OPS:
        return f"{NAME} serves {OPS}, not {spec.op}"
    (x, *_) = spec.inputs
    if x is None or not x.shape:
        return f"{NAME} takes a tensor of at least one dimension"
    dim = int(spec.scalars.get("dim", -1))
    if dim not in (-1, len(x.shape) - 1):
        return f"{NAME} selects along the last dimension only, got dim={dim} of a {len(x.shape)}-d input"
    rows = 1
    for s in x.shape[:-1]:
        rows *= s
    problem = TopkProblem(rows, x.shape[-1], int(spec.scalars["k"]), bool(spec.scalars.get("largest", True)), x.dtype)
    return refuse_problem(problem) or problem  # sorted=False is served too: sorted is one valid order


def refuse_problem(problem: TopkProblem) -> str | None:
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if problem.rows <= 0 or problem.n <= 0:
        return f"empty problem {problem.rows}x{problem.n}"
    if not 1 <= problem.k <= min(MAX_K, problem.n):
        return f"k={problem.k} is outside 1..{min(MAX_K, problem.n)} (at most {MAX_K}, at most the row length)"
    if problem.n > MAX_N:
        return f"rows of {problem.n} elements exceed {MAX_N} (32-bit indices in the sort key)"
    return None


def refuse_config(problem: TopkProblem, config: TopkConfig, target: str) -> str | None:
    if config.block_n < k_pad(problem.k):
        return f"block_n={config.block_n} is below k rounded up to a power of two ({k_pad(problem.k)})"
    return None


def configs(problem: TopkProblem, target: str) -> list[TopkConfig]:
    """Short rows: one chunk per row (the smallest BLOCK_N covering it), several rows per program.
    Long rows: one row per program, chunks of 1-4K elements."""
    if target not in TARGETS and target != "cpu":
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    if problem.n <= 256:
        fit = next(c.block_n for c in _SHORT if c.block_n >= problem.n)
        chosen = [c for c in _SHORT if c.block_n == fit]
    else:
        chosen = list(_LONG)
    return [c for c in chosen if refuse_config(problem, c, target) is None]


def example_problem(m: int, n: int, k: int, dtype: str | None = None) -> TopkProblem | str:
    """``inductor-ext asm``'s problem for an MxNxK shape: top-k of M rows of N; K is k."""
    problem = TopkProblem(m, n, k, True, dtype or "bfloat16")
    return refuse_problem(problem) or problem


# One body for every problem: constexprs pick the direction, the padding of k and single chunks.
_SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def _keys(X, row_off, cols, N, mask_m, stride_n, LARGEST: tl.constexpr):
    """The int64 sort key of each element (see the module docstring); padding gets the smallest key."""
    mask = mask_m[:, None] & (cols[None, :] < N)
    x = tl.load(X + row_off[:, None] + cols[None, :].to(tl.int64) * stride_n, mask=mask, other=0.0)
    x = x.to(tl.float32)
    bits = x.to(tl.int32, bitcast=True)
    bits = tl.where(x == 0.0, 0, bits)  # -0.0 ties with 0.0
    bits = tl.where(x != x, 0x7FC00000, bits)  # every NaN is the one NaN above +inf
    ordered = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # float order as signed int order
    if not LARGEST:
        ordered = ~ordered
    low = 0xFFFFFFFF - cols.to(tl.int64)  # the lower index, the larger key
    key = (ordered.to(tl.int64) << 32) | low[None, :]
    return tl.where(mask, key, -0x8000000000000000)


@triton.jit
def {name}(
    X, OUT, M, N, stride_m, stride_n, stride_out,
    K: tl.constexpr, K_PAD: tl.constexpr, LARGEST: tl.constexpr, ONE_CHUNK: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = rm < M
    row_off = rm.to(tl.int64) * stride_m
    cols = tl.arange(0, BLOCK_N)
    best = tl.topk(_keys(X, row_off, cols, N, mask_m, stride_n, LARGEST), K_PAD)
    if not ONE_CHUNK:
        for start in range(BLOCK_N, N, BLOCK_N):
            top = tl.topk(_keys(X, row_off, start + cols, N, mask_m, stride_n, LARGEST), K_PAD)
            both = tl.reshape(tl.join(best, top), (BLOCK_M, 2 * K_PAD))
            best = tl.topk(both, K_PAD)
    index = 0xFFFFFFFF - (best & 0xFFFFFFFF)
    rk = tl.arange(0, K_PAD)
    out_mask = mask_m[:, None] & (rk[None, :] < K)
    tl.store(OUT + rm[:, None].to(tl.int64) * stride_out + rk[None, :], index, mask=out_mask)
'''


def kernel_name(problem: TopkProblem, config: TopkConfig) -> str:
    order = "largest" if problem.largest else "smallest"
    return f"ext_topk_{problem.dtype}_{order}_k{problem.k}_{config.name()}"


def constexprs(problem: TopkProblem, config: TopkConfig) -> dict[str, object]:
    return {"K": problem.k, "K_PAD": k_pad(problem.k), "LARGEST": problem.largest,
            "ONE_CHUNK": problem.n <= config.block_n, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n}


def render(problem: TopkProblem, config: TopkConfig, target: str = "gfx950") -> KernelSource:
    """A standalone Triton module computing ``problem`` with ``config``."""
    reason = refuse_problem(problem) or refuse_config(problem, config, target)
    if reason:
        raise ValueError(f"{NAME} cannot serve {problem} with {config}: {reason}")
    name = kernel_name(problem, config)
    consts = constexprs(problem, config)
    signature = {"X": f"*{FP[problem.dtype]}", "OUT": "*i64",
                 **{s: "i32" for s in ("M", "N", "stride_m", "stride_n", "stride_out")},
                 **{c: "constexpr" for c in consts}}
    return KernelSource(name=name, source=_SOURCE.format(name=name), template=NAME, config=asdict(config),
                        constexprs=consts, signature=signature, launch={"num_warps": config.num_warps, "num_stages": 1})


def compile_asm(problem: TopkProblem, config: TopkConfig, target: str) -> dict[str, str]:
    """``inductor-ext asm``: the rendered kernel compiled by Triton for ``target`` (the amdgcn text)."""
    from inductor_ext.runtime.triton_compile import compile_for_target

    if target not in TARGETS:
        raise ValueError(f"{NAME} does not compile for {target}; it claims {TARGETS}")
    return compile_for_target(render(problem, config, target), target)


def call(problem: TopkProblem, config: TopkConfig, target: str, x: "torch.Tensor") -> "torch.Tensor":
    """The int64 indices (leading dims of ``x``, then k) of the top k of each last-dim row: the
    compiled kernel on a gfx950, Triton's interpreter on CPU tensors."""
    import torch

    if x.shape[-1] != problem.n or x.numel() != problem.rows * problem.n:
        raise ValueError(f"{NAME}: input of shape {tuple(x.shape)} is not {problem.rows} rows of {problem.n}")
    rows = x.reshape(problem.rows, problem.n)  # a view when it can be; strides go to the kernel
    out = torch.empty((problem.rows, problem.k), dtype=torch.int64, device=x.device)
    ks = rendered(render, problem, config, target)  # once per problem and config
    grid = ((problem.rows + config.block_m - 1) // config.block_m,)
    load_kernel(ks)[grid](rows, out, problem.rows, problem.n, rows.stride(0), rows.stride(1), out.stride(0),
                          **ks.constexprs, **ks.launch)
    return out.reshape(*x.shape[:-1], problem.k)


__all__ = ["NAME", "FAMILY", "TARGETS", "OPS", "CHOICE_KIND", "CPU_EXECUTOR", "Problem", "Config", "TopkProblem",
           "TopkConfig", "ALL_CONFIGS", "KEY_INSTRUCTIONS", "problem_for", "refuse_problem", "refuse_config", "configs",
           "example_problem", "kernel_name", "constexprs", "render", "compile_asm", "call", "k_pad"]


FAMILY = Family.of_module(__name__)
