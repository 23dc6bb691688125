"""Makes the kernels around ext's PDL templates wait on them (``options={"pdl": "auto"}``).

A producer template compiled with ``USE_PDL`` calls ``gdc_launch_dependents`` once its last MMA
is issued, so the next kernel on the stream may start early; that kernel must then be launched
with PDL and ``gdc_wait`` before it reads the producer's output. Inductor 2.15 already does
this selectively (``config.nvgemm_pdl``, on by default): ``TritonKernel._enable_pdl_codegen``
turns on ``launch_pdl`` and the waits for a kernel that reads what the previous scheduler node
wrote, when ``NVUniversalGemmScheduling.is_pdl_enabled_template(previous_node)`` says that node
is a PDL-enabled template. It knows only its NVGEMM templates; this module teaches it ext's.

ExtChoices marks a choice whose problem has ``use_pdl`` (:func:`mark`); the mark rides on the
choice's ``make_kernel_render``, which Inductor hands to the ``TritonTemplateBuffer`` it builds
for the winner. The first mark wraps the predicate (:func:`install`, once per process; before
codegen, which is where it is asked). It still answers Inductor's own templates as before and
answers True only for buffers ext marked. Imports are lazy: Inductor's NVGEMM scheduling module
imports cutlass (half a second), which a compile that marks nothing should not pay.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

log = logging.getLogger("inductor_ext.autotune")

_MARK = "_inductor_ext_use_pdl"
_unavailable = False  # set once the predicate's module failed to import (warned once)


def template_launch_kwargs(problem: Any) -> dict[str, Any]:
    """Extra ``maybe_append_choice`` kwargs for an ext template: one with ``use_pdl`` is itself
    a consumer of the kernel before it, so it is launched with PDL (Inductor never launches a
    template so on its own). That is safe because the template reads and writes nothing before
    its ``gdc_wait`` (tier I asserts the order)."""
    return {"triton_meta": {"launch_pdl": True}} if getattr(problem, "use_pdl", False) else {}


def mark(choice: Any) -> None:
    """Record that ``choice`` (a TritonTemplateCaller) releases its dependents early."""
    try:
        setattr(choice.make_kernel_render, _MARK, True)
    except AttributeError:  # an extern choice (CuTeDSL): its node's kwargs carry use_pdl instead
        pass
    install()


def is_ext_pdl_producer(node: Any) -> bool:
    """Whether scheduler node ``node`` is (or fuses an epilogue into) an ext template marked by
    :func:`mark`."""
    from torch._inductor import ir
    from torch._inductor.scheduler import ExternKernelSchedulerNode, FusedSchedulerNode, SchedulerNode

    if isinstance(node, ExternKernelSchedulerNode):  # an ext extern op (CuTeDSL) bound with use_pdl=True
        op = getattr(node.node, "op_overload", None)
        return str(op).startswith("inductor_ext.") and getattr(node.node, "kwargs", {}).get("use_pdl") is True
    if isinstance(node, FusedSchedulerNode):
        ir_node = node.get_template_node()
    elif isinstance(node, SchedulerNode):
        ir_node = node.node
    else:
        return False
    return isinstance(ir_node, ir.TritonTemplateBuffer) and getattr(ir_node.make_kernel_render, _MARK, False)


def install() -> None:
    """Wrap Inductor's predicate so ext's producers count too (idempotent)."""
    global _unavailable
    if _unavailable:
        return
    try:
        from torch._inductor.codegen.nv_universal_gemm.nv_universal_gemm_scheduling import (
            NVUniversalGemmScheduling,
        )
    except ImportError as e:  # then no Inductor kernel waits on ext's templates: still correct
        _unavailable = True
        log.warning("ext: Inductor's NVGEMM scheduling cannot be imported (%s); kernels after ext's PDL "
                    "templates are launched without PDL", e)
        return

    current = NVUniversalGemmScheduling.is_pdl_enabled_template
    if getattr(current, _MARK, False):
        return

    @functools.wraps(current)
    def is_pdl_enabled_template(node: Any) -> bool:
        return current(node) or is_ext_pdl_producer(node)

    setattr(is_pdl_enabled_template, _MARK, True)
    NVUniversalGemmScheduling.is_pdl_enabled_template = staticmethod(is_pdl_enabled_template)
