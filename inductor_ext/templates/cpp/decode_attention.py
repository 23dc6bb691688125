"""Decode attention for the CPU as Inductor-compiled reductions, offered beside ATen's SDPA kernel.

Serves ``decode_attention`` (``kernels/decode_attention_ops.py``, made by the ``decode_attention_op``
pass): one query token per sequence, no dropout, with or without a mask (a static KV cache's:
the slots not yet written are masked). The kernel is
``kernels/decode_attention.py`` (plain torch: two fp32 reductions over the cached keys and
values) traced and handed to Inductor as one of its subgraph choices (``SubgraphTemplate``):
Inductor compiles it to C++ for the benchmark and, if it wins, inlines it into the graph, where
its loops may fuse with their neighbours. ATen's flash kernel is the choice it must beat by the
preset's margin.

Measured in ``bench/cpu_decode.py``'s decoder (this AVX2 machine, 2 threads), Inductor
max-autotune with SDPA against the same graph with attention written this way
(``/work/notes/s25/attn_exp.py``): decode b1 fp32 2.62 -> 2.46 ms, b8 fp32 6.49 -> 6.34,
b1 bf16 2.69 -> 1.75, b8 bf16 13.07 -> 6.14 a step.
"""

from __future__ import annotations

from dataclasses import dataclass

from inductor_ext.templates.allowed import number, one_of, size
from inductor_ext.templates.cpp import attention_spec
from inductor_ext.templates.family import Family, OpSpec, TensorSpec

NAME = "cpp.decode_attention"
TARGETS = ("cpu",)
OPS = ("decode_attention",)
CHOICE_KIND = "inductor_template"
INDUCTOR_TEMPLATE = "subgraph"  # Inductor's SubgraphTemplate, through lowering/subgraph.py
RUNS_ON_CPU = True  # Inductor's C++ codegen: no interpreter involved
# plain torch traced symbolically and compiled by Inductor: batch and cache length may be symbolic
DYNAMIC_SHAPES = True

DTYPES = ("float32", "bfloat16", "float16")
# "bool": True where a query attends; "additive": added to the scores (SDPA's two kinds of mask)
MASKS = ("none", "bool", "additive")
FORMS = ("fp32_reductions",)  # kernels/decode_attention.FORMS (torch is imported lazily here)


@dataclass(frozen=True)
class DecodeAttentionProblem:
    batch: int = size()
    heads: int = size()  # query heads
    kv_heads: int = size()
    length: int = size()  # cached keys attended to
    head_dim: int = size()
    value_dim: int = size()
    dtype: str = one_of(DTYPES)
    scale: float = number()
    mask: str = one_of(MASKS, "none")


@dataclass(frozen=True)
class DecodeAttentionConfig:
    """How the kernel is written (one of ``FORMS``)."""

    form: str = one_of(FORMS, "fp32_reductions")

    def name(self) -> str:
        return self.form


Problem, Config = DecodeAttentionProblem, DecodeAttentionConfig


def problem_for(spec: OpSpec) -> DecodeAttentionProblem | str:
    reason = attention_spec.qkv_refusal(spec, NAME, OPS)
    if reason:
        return reason
    q, k, v = spec.inputs[:3]
    mask = attention_spec.mask_of(spec)
    kind = _mask_kind(mask, q, k)
    if kind not in MASKS:
        return kind
    problem = DecodeAttentionProblem(q.shape[0], q.shape[1], k.shape[1], k.shape[2], q.shape[3], v.shape[3],
                                     q.dtype, float(spec.scalars["scale"]), kind)
    if q.shape[2] != 1:
        return f"{q.shape[2]} query tokens: decode attention takes one per sequence"
    return refuse_problem(problem) or problem


def _mask_kind(mask: TensorSpec | None, q: TensorSpec, k: TensorSpec) -> str:
    """One of ``MASKS`` for ``mask``, or why the kernel cannot apply it."""
    if mask is None:
        return "none"
    broadcast = attention_spec.broadcast_refusal(mask, (q.shape[0], q.shape[1], 1, k.shape[2]))
    if broadcast:
        return broadcast
    if mask.dtype == "bool":
        return "bool"
    if mask.dtype in DTYPES:
        return "additive"
    return f"a mask of dtype {mask.dtype}: the kernel applies bool masks or adds one of {DTYPES}"


def refuse_problem(problem: DecodeAttentionProblem) -> str | None:
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if problem.heads % problem.kv_heads:
        return f"query heads ({problem.heads}) are not a multiple of key/value heads ({problem.kv_heads})"
    if min(problem.batch, problem.length, problem.head_dim, problem.value_dim) <= 0:
        return f"empty problem {problem}"
    return None


def configs(problem: DecodeAttentionProblem, target: str) -> list[DecodeAttentionConfig]:
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    return [DecodeAttentionConfig(form) for form in FORMS]


def decomposition(problem: DecodeAttentionProblem, config: DecodeAttentionConfig) -> tuple[object, dict[str, object]]:
    """The plain torch function Inductor compiles for ``config``, and its non-tensor arguments
    (it takes q, k, v and the mask, if any, first)."""
    from inductor_ext.kernels import decode_attention

    function = decode_attention.decode_attention if problem.mask == "none" else decode_attention.masked_decode_attention
    return function, {"scale": problem.scale, "form": config.form}


FAMILY = Family.of_module(__name__)
