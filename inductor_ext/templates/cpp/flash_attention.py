"""Flash attention for the CPU as a C++ kernel of our own, offered beside ATen's SDPA for prefill
and decode.

Serves ``prefill_attention`` (``kernels/prefill_attention_ops.py``, made by the
``prefill_attention_op`` pass): several query tokens per sequence, no dropout, no mask or a boolean
one (Hugging Face builds its causal mask in the graph and passes it); and ``decode_attention``
(one query token, ``decode_attention_op``) with no mask or a boolean one: there the kernel packs
nothing and never reads a key or value the mask hides, so a static KV cache (Hugging Face's
``cache_implementation="static"``, sized for the longest generation) costs what its written slots
hold, where ATen's kernel reads every slot. The kernel (``KERNEL``,
the C++ of ``flash_attention.cpp``, rendered with the head dim and the dtype) tiles 32 queries
against 64 keys with an online softmax in fp32, skips the blocks of keys the mask hides from a whole block of
queries, and in bf16 takes its dot products with AVX512_BF16's ``vdpbf16ps``. A CPU with AVX2 but
not AVX-512 (or bf16 without AVX512_BF16) gets the same algorithm written for AVX2 + FMA
(the config's ``form``); it gains only where a mask hides blocks, so handed a mask that hides
little (``ATEN_ABOVE_VISIBLE``) it calls ATen's SDPA. A prefill's mask is timed causal
(``lowering/ops/_select.py``). Plain C++ built by g++ in about a second
(``runtime/cpu_library.py``), called through ctypes.

Why: ATen's CPU flash kernel runs ~130 GFLOP/s on this 2-core AVX-512 host, and at 512 tokens
tiles the keys in one block, so even ``is_causal`` skips nothing. In
``bench/hf_generate.py``'s GPT-2 prefill it is 72.6 of 401 ms (bf16) in every arm. Measured alone
(``bench/cpu_prefill_attention.py``): 1x12x512x64 with a causal bool mask, bf16 6.0 -> 2.3 ms,
fp32 5.8 -> 3.3 ms.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Sequence

from inductor_ext.templates.allowed import integer, number, one_of, size
from inductor_ext.templates.base import KernelSource, resource_text
from inductor_ext.templates.cpp import attention_spec
from inductor_ext.templates.family import Family, OpSpec, TensorSpec

if TYPE_CHECKING:
    import torch

NAME = "cpp.flash_attention"
TARGETS = ("cpu",)
OPS = ("prefill_attention", "prefill_attention_causal", "decode_attention")  # the second: SDPA's is_causal flag, no mask
CHOICE_KIND = "extern"
RUNS_ON_CPU = True  # a native CPU kernel: no interpreter involved
# every size and stride is a kernel argument read from the tensors (the problem fixes the head dim,
# dtype and scale): batch, heads and lengths may be symbolic
DYNAMIC_SHAPES = True
FUNCTION = "ext_flash_attention"  # the C function of every rendering

DTYPES = ("float32", "bfloat16")
HEAD_DIMS = (32, 64, 96, 128, 256)  # multiples of 32: the AVX2 form's PV tile is 32 wide
MASKS = ("none", "bool", "causal")  # causal: is_causal, aligned top-left (key j attends to query i when j <= i)
FORMS = ("avx512", "avx2")  # how the kernel is written, best first
# A boolean mask that lets a query see more than this fraction of the keys makes the form's call
# ATen's SDPA instead: the kernel's gain is the blocks it skips. AVX2 at 512 tokens (fp32 and bf16,
# bench/cpu_prefill_attention.py): 1.36-1.43x ATen's time under a causal mask (half visible), 0.81
# and 0.88x with every key visible. AVX-512 has no such share: it ran 1.1-1.9x ATen's with none hidden.
ATEN_ABOVE_VISIBLE = {"avx2": 0.7}
# g++ flags by (form, dtype): AVX-512 (F, BW for the bf16 loads, VL, DQ), bf16 also AVX512_BF16
_FLAGS = {("avx512", "float32"): ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"),
          ("avx512", "bfloat16"): ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mavx512bf16"),
          ("avx2", "float32"): ("-mavx2", "-mfma"),
          ("avx2", "bfloat16"): ("-mavx2", "-mfma")}


@dataclass(frozen=True)
class FlashAttentionProblem:
    batch: int = size()
    heads: int = size()  # query heads
    kv_heads: int = size()
    queries: int = size()
    keys: int = size()
    head_dim: int = integer(low=min(HEAD_DIMS), high=max(HEAD_DIMS))  # one of HEAD_DIMS (refuse_problem)
    value_dim: int = integer(low=min(HEAD_DIMS), high=max(HEAD_DIMS))
    dtype: str = one_of(DTYPES)
    scale: float = number()
    mask: str = one_of(MASKS, "none")


@dataclass(frozen=True)
class FlashAttentionConfig:
    """How the kernel is written: for ``avx512`` or ``avx2`` (``KERNEL``'s ``EXT_AVX512``)."""

    form: str = one_of(FORMS, "avx512")


Problem, Config = FlashAttentionProblem, FlashAttentionConfig
ALL_CONFIGS = tuple(FlashAttentionConfig(form) for form in FORMS)


def problem_for(spec: OpSpec) -> FlashAttentionProblem | str:
    reason = attention_spec.qkv_refusal(spec, NAME, OPS)
    if reason:
        return reason
    q, k, v = spec.inputs[:3]
    if any(t.stride[-1] != 1 for t in (q, k, v)):
        return "q, k and v must each have a last stride of 1"
    mask = attention_spec.mask_of(spec)
    if spec.op == "prefill_attention_causal":
        kind = "causal" if mask is None else "a mask beside the is_causal flag"
    else:
        kind = _mask_kind(mask, q, k)
    if kind not in MASKS:
        return kind
    problem = FlashAttentionProblem(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3],
                                    v.shape[3], q.dtype, float(spec.scalars["scale"]), kind)
    return refuse_problem(problem) or problem


def _mask_kind(mask: TensorSpec | None, q: TensorSpec, k: TensorSpec) -> str:
    """One of ``MASKS`` for ``mask``, or why the kernel cannot apply it."""
    if mask is None:
        return "none"
    broadcast = attention_spec.broadcast_refusal(mask, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))
    if broadcast:
        return broadcast
    if mask.dtype != "bool":
        return f"a mask of dtype {mask.dtype}: the kernel applies boolean masks (an additive one stays ATen's)"
    return "bool"


def refuse_problem(problem: FlashAttentionProblem) -> str | None:
    if problem.dtype not in DTYPES:
        return f"dtype {problem.dtype} not in {DTYPES}"
    if problem.head_dim != problem.value_dim or problem.head_dim not in HEAD_DIMS:
        return f"head dims {problem.head_dim} (q, k) and {problem.value_dim} (v): the kernel takes one of {HEAD_DIMS} for both"
    if problem.heads % problem.kv_heads:
        return f"query heads ({problem.heads}) are not a multiple of key/value heads ({problem.kv_heads})"
    if min(problem.batch, problem.queries, problem.keys) <= 0:
        return f"empty problem {problem}"
    return host_refusal(problem.dtype)


def host_refusal(dtype: str) -> str | None:
    """Why this CPU can run no form of the kernel for ``dtype``, or None."""
    if host_forms(dtype):
        return None
    import torch

    return f"this CPU has neither AVX2 nor AVX-512 (torch reports {torch.backends.cpu.get_cpu_capability()})"


def host_forms(dtype: str) -> tuple[str, ...]:
    """The forms of the kernel this CPU runs for ``dtype``, best first, as torch sees the CPU
    (``ATEN_CPU_CAPABILITY=avx2`` makes an AVX-512 host an AVX2 one for ext as for ATen)."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    forms = []
    if capability == "AVX512" and (dtype == "float32" or torch.cpu._is_avx512_bf16_supported()):
        forms.append("avx512")  # bf16 needs AVX512_BF16's vdpbf16ps
    if capability in ("AVX512", "AVX2"):
        forms.append("avx2")
    return tuple(forms)


def configs(problem: FlashAttentionProblem, target: str) -> list[FlashAttentionConfig]:
    """The best form this CPU runs: the AVX2 one would only lose beside the AVX-512 one, and each
    form offered is one more build and benchmark in a compile."""
    if target not in TARGETS:
        raise ValueError(f"target {target!r} is not one of {TARGETS}")
    return [FlashAttentionConfig(form) for form in host_forms(problem.dtype)[:1]]


def refuse_config(problem: FlashAttentionProblem, config: FlashAttentionConfig, target: str) -> str | None:
    """Why this CPU cannot run ``config`` for ``problem`` (a cached decision from another machine
    naming a form this one lacks), or None."""
    forms = host_forms(problem.dtype)
    if config.form not in forms:
        return f"form {config.form} does not run on this CPU for {problem.dtype} (it runs: {', '.join(forms) or 'none'})"
    return None


def render(problem: FlashAttentionProblem, config: FlashAttentionConfig, target: str = "cpu") -> KernelSource:
    reason = refuse_problem(problem)
    if reason:
        raise ValueError(f"{NAME} cannot render {problem}: {reason}")
    source = (KERNEL.replace("{D}", str(problem.head_dim)).replace("{BF16}", str(int(problem.dtype == "bfloat16")))
              .replace("{AVX512}", str(int(config.form == "avx512"))).replace("{CAUSAL}", str(int(problem.mask == "causal")))
              .replace("{NAME}", FUNCTION))
    return KernelSource(name=FUNCTION, source=source, template=NAME, config=asdict(config),
                        launch={"flags": list(_FLAGS[config.form, problem.dtype])}, language="cpp")


def call(problem: FlashAttentionProblem, config: FlashAttentionConfig, target: str, q: "torch.Tensor",
         k: "torch.Tensor", v: "torch.Tensor", mask: "torch.Tensor | None" = None) -> "torch.Tensor":
    """The attention of q, k, v (and ``mask``), contiguous (B, H, Lq, D) in q's dtype. Sizes and
    strides are read from the tensors; the problem fixes the head dim, dtype and scale."""
    import ctypes

    import torch

    function = _function(problem, config, target)
    b, h, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    wants_mask = problem.mask == "bool"  # "none" and "causal" take none
    if str(q.dtype) != f"torch.{problem.dtype}" or d != problem.head_dim or (mask is not None) != wants_mask \
            or (mask is not None and mask.dtype != torch.bool):
        raise ValueError(f"{NAME} built for {problem.dtype}, head dim {problem.head_dim} and mask {problem.mask!r} was "
                         f"called with {q.dtype}, head dim {d}, mask {None if mask is None else mask.dtype}")
    if mask is not None and lq > 1 and _mostly_visible(mask, ATEN_ABOVE_VISIBLE.get(config.form)):
        from inductor_ext.kernels.prefill_attention_ops import aten_prefill_attention

        return aten_prefill_attention(q, k, v, mask, scale=problem.scale)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    out = torch.empty((b, h, lq, d), dtype=q.dtype)
    mask_ptr, mask_strides = None, (0, 0, 0, 0)
    if mask is not None:
        mask = torch.broadcast_to(mask, (b, h, lq, lk))
        if mask.stride(-1) != 1:
            mask = mask.contiguous()
        mask_ptr, mask_strides = ctypes.c_void_p(mask.data_ptr()), mask.stride()
    three = ctypes.c_int64 * 3
    with torch.profiler.record_function(f"inductor_ext::{NAME}"):  # named in profiles like an op
        function(*(ctypes.c_void_p(t.data_ptr()) for t in (q, k, v)), mask_ptr, ctypes.c_void_p(out.data_ptr()),
                 *(ctypes.c_int64(n) for n in (b, h, hkv, lq, lk)), *(three(*t.stride()[:3]) for t in (q, k, v)),
                 (ctypes.c_int64 * 4)(*mask_strides), ctypes.c_float(problem.scale), ctypes.c_int(torch.get_num_threads()))
    return out


def _mostly_visible(mask: "torch.Tensor", share: float | None) -> bool:
    """Whether ``mask`` (bool, before its broadcast) lets through more than ``share`` of its
    elements; never where the form has no such share."""
    return share is not None and int(mask.count_nonzero()) > share * mask.numel()


def _function(problem: FlashAttentionProblem, config: FlashAttentionConfig, target: str) -> Any:
    """The C function serving ``problem``, built on first use: once per problem in a process, so a
    call pays no rendering. One lock: a call that comes while ``prebuild`` builds the same
    function in the background waits for it instead of running g++ a second time."""
    with _building:
        return _built(problem, config, target)


_building = threading.Lock()


@functools.lru_cache(maxsize=64)
def _built(problem: FlashAttentionProblem, config: FlashAttentionConfig, target: str) -> Any:
    from inductor_ext.runtime import cpu_library

    if why := refuse_config(problem, config, target):  # its instructions would kill the process (SIGILL)
        raise ValueError(f"{NAME} cannot run {config} here: {why}")
    kernel = render(problem, config, target)
    return cpu_library.function(kernel, tuple(kernel.launch["flags"]))


def prebuild(pairs: Sequence[tuple[FlashAttentionProblem, FlashAttentionConfig]], target: str,
             device_type: str) -> None:
    """Build (and load) each pair's function now: a compile that picked this family from a table
    or cache runs this beside its other work, so the graph's first call does not wait for g++."""
    for problem, config in pairs:
        _function(problem, config, target)


# The kernel's C++ ({D}, {BF16}, {AVX512}, {CAUSAL} and {NAME} filled in by render), read from
# flash_attention.cpp beside this module when it is imported; its text is hashed with this module's
# source into every cache key that names the family (``resource_text``). One skeleton (packing, blocks, the online softmax's bookkeeping, the output) and, under
# EXT_AVX512, each form's own register tiles, mask reads and vector helpers. The AVX2 form (8 lanes,
# 16 registers) uses smaller tiles, reads the mask into lane masks, builds 2^n in the exponent bits,
# and widens bf16 inputs to fp32 when it reads them (AVX2 has no bf16 dot product): q * scale and the
# probabilities stay fp32 there, and only the output is rounded (to nearest even, as torch rounds).
KERNEL = resource_text(__name__, "flash_attention.cpp")


def refuse_here() -> str | None:
    """What to install for this family to build its kernels, or None."""
    from inductor_ext.runtime import toolchain

    return None if toolchain.gxx() else "a C++ compiler: apt-get install g++"


FAMILY = Family.of_module(__name__)
