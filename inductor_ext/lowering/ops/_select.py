"""The lowering body every op module shares: ATen's choice, plus whatever ext's choices handler
offers for the op, autotuned by Inductor; and the one question an op module that wraps one of
Inductor's own lowerings asks first (does ext's handler serve this op in this compile?).

Outside ext's handler (another backend, or Inductor's own handler) only ATen's choice exists;
``getattr`` because Inductor's ``InductorChoices`` has no ``offer``/``serves``.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch._inductor import ir
from torch._inductor.kernel_inputs import KernelInputs
from torch._inductor.select_algorithm import ExternKernelChoice, autotune_select_algorithm
from torch._inductor.virtualized import V


class FixedKernelInputs(KernelInputs):
    """An op's input nodes, scalars and fixed output layout: Inductor's ``KernelInputs`` for an op
    ext lowers itself, so ``ExtChoices.offer`` reads them like Inductor's own."""

    def __init__(self, nodes: list[Any], layout: ir.Layout, scalars: dict[str, Any],
                 arg_names: tuple[str, ...] | None = None) -> None:
        super().__init__(nodes, scalars=scalars)
        self._layout = layout
        self.arg_names = arg_names  # each node's argument name, where the op binds by name (``_spec.TensorArgs``)

    def out_dtype(self) -> torch.dtype:
        return self._layout.dtype

    def output_layout(self, flexible: bool = True) -> ir.Layout:
        return self._layout


class OpChoice(ExternKernelChoice):
    """ATen's choice for one of ext's ``torch.library`` ops: the op called as it is. Under Inductor's
    C++ wrapper (``cpp_wrapper=True``) it is Inductor's ``FallbackKernel``, which the C++ wrapper calls
    through the dispatcher; a plain extern kernel there becomes a call of ``aoti_torch_cpu_<op>``,
    a C shim only ATen's own ops have (the wrapper's C++ build failed). Under the Python wrapper it
    stays the extern kernel named after the choice (``extern_kernels.<name>(``), as dumps read it.

    ``inline``: the op's own torch code, where a lowering inlines it when ATen's choice wins (the
    graph then holds what Inductor makes of that code, not the op's Python body: ``_attention``)."""

    def __init__(self, op: torch._ops.OpOverload, name: str, inline: Callable[..., Any] | None = None) -> None:
        super().__init__(op, name=name, has_out_variant=False, op_overload=op)
        self.inline = inline

    @property
    def use_fallback_kernel(self) -> bool:
        return bool(getattr(V.graph, "cpp_wrapper", False))

    @use_fallback_kernel.setter
    def use_fallback_kernel(self, value: bool) -> None:  # Inductor's __init__ sets it; the wrapper decides
        pass


def serves(op: str) -> bool:
    """Whether this compile's choices handler is ext's and offers a template family for ``op``."""
    asks = getattr(V.choices, "serves", None)
    return asks is not None and asks(op)


def select(op: str, aten: Any, nodes: list[Any], layout: ir.Layout, scalars: dict[str, Any],
           names: tuple[str, ...] | None = None) -> tuple[Any, Any]:
    """Inductor's autotuned pick among ``aten`` (ATen's choice, bound to ``nodes`` and ``layout``)
    and the choices ext's handler adds for ``op`` (``scalars`` as the families read them; ``names``,
    each node's argument name, where the op binds them by name): the node and the winning choice."""
    choices = [aten]
    offer = getattr(V.choices, "offer", None)
    if offer is not None:
        choices = offer(op, FixedKernelInputs(nodes, layout, scalars, names), choices)
    return autotune_select_algorithm(op, choices, nodes, layout, input_gen_fns=attending_masks(nodes, op))


def attending_masks(nodes: list[Any], op: str = "") -> dict[int, Any] | None:
    """Example values for the boolean inputs (attention masks). Inductor's example value of a bool
    tensor is all False, a mask that hides every key: a kernel that skips what a mask hides then
    skips everything, and is timed doing nothing (ATen's SDPA still does all its work). A prefill's
    mask over several queries (``prefill_attention``, a mask with a query dim over 1) is timed
    causal, the mask a decoder's prefill passes (Hugging Face builds it in the graph, its values
    unknown here): a kernel that skips hidden blocks is timed as it runs there, and one that loses
    on a mask that hides little serves ATen's SDPA for such a mask when it runs
    (``templates/cpp/flash_attention.call``). Any other mask attends everywhere: every choice does
    its whole work."""
    gen = {i: (_causal if op == "prefill_attention" and _queries(node) > 1 else _all_true)
           for i, node in enumerate(nodes) if node.get_dtype() == torch.bool}
    return gen or None


def _queries(node: Any) -> int:
    """A mask's query dim (its second to last), as its size hint; 1 for a mask of fewer dims."""
    size = node.get_size()
    return int(V.graph.sizevars.optimization_hint(size[-2])) if len(size) >= 2 else 1


def _causal(node: Any) -> torch.Tensor:
    """Inductor's example value of ``node``, True where key j is visible to query i: j <= i (aligned
    top-left, as SDPA's ``is_causal``: a prompt's prefill into a static cache sees the slots written
    so far). A mask that shows a query more at run time (a prefill after earlier tokens) makes the
    AVX2 kernel call ATen's SDPA, where the kernel would lose."""
    mask = _all_true(node)
    lq, lk = mask.shape[-2:]
    if 0 in mask.stride()[-2:]:  # one row or column for all: no causal pattern fits it
        return mask
    # a dim broadcast (stride 0) holds one copy: written once, through its first index
    once = mask[tuple(0 if stride == 0 else slice(None) for stride in mask.stride()[:-2])]
    once.copy_(torch.ones(lq, lk, dtype=torch.bool).tril().expand(once.shape))
    return mask


def _all_true(node: Any) -> torch.Tensor:
    """Inductor's example value of ``node`` (its sizes, strides and offset), every element True."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    example = AlgorithmSelectorCache.benchmark_example_value(node)
    storage = torch.ones(example.untyped_storage().nbytes(), dtype=torch.bool)
    return storage.as_strided(example.shape, example.stride(), example.storage_offset())
