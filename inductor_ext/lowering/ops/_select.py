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
    return autotune_select_algorithm(op, choices, nodes, layout, input_gen_fns=attending_masks(nodes))


def attending_masks(nodes: list[Any]) -> dict[int, Any] | None:
    """Example values for the boolean inputs (attention masks): all True. Inductor's example value
    of a bool tensor is all False, a mask that hides every key: a kernel that skips what a mask
    hides then skips everything, and is timed doing nothing (ATen's SDPA still does all its work).
    Attending everywhere, every choice does its whole work, as background tuning times it."""
    gen = {i: _all_true for i, node in enumerate(nodes) if node.get_dtype() == torch.bool}
    return gen or None


def _all_true(node: Any) -> torch.Tensor:
    """Inductor's example value of ``node`` (its sizes, strides and offset), every element True."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    example = AlgorithmSelectorCache.benchmark_example_value(node)
    storage = torch.ones(example.untyped_storage().nbytes(), dtype=torch.bool)
    return storage.as_strided(example.shape, example.stride(), example.storage_offset())
