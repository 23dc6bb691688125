"""Lowers ``inductor_ext::nvfp4_gemm`` (made by nvfp4_alpha_fold) to an autotuned choice:
the unfused ATen path (``_scaled_mm`` then the epilogue) or ext's NVFP4 Triton templates.

Both templates read the operands as ``_scaled_mm`` had them: fp4 codes, and e4m3 scales in
cuBLAS's blocked layout, read in place (no un-swizzle kernel).
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.kernel.mm_common import mm_grid
from torch._inductor.kernel_inputs import KernelInputs
from torch._inductor.lowering import lowerings, register_lowering
from torch._inductor.select_algorithm import ExternKernelChoice, TritonTemplate, autotune_select_algorithm
from torch._inductor.virtualized import V

from inductor_ext.lowering import pdl_consumers
from inductor_ext.lowering.prepared import Prepared
from inductor_ext.kernels import nvfp4_ops  # noqa: F401  (defines the op lowered here)
from inductor_ext.templates.triton import nvfp4_dequant_gemm, nvfp4_gemm

aten = torch.ops.aten
prims = torch.ops.prims
OP = torch.ops.inductor_ext.nvfp4_gemm.default
ATEN_CHOICE = ExternKernelChoice(OP, name="nvfp4_gemm_aten", has_out_variant=False)


class NvFp4KernelInputs(KernelInputs):
    """The nvfp4_gemm inputs (a, b, scale_a, scale_b, alpha[, bias]) and its output layout."""

    def __init__(self, nodes: list[Any], layout: ir.Layout, scalars: dict[str, Any]) -> None:
        super().__init__(nodes, scalars=scalars)
        self._layout = layout

    def out_dtype(self) -> torch.dtype:
        return self._layout.dtype

    def output_layout(self, flexible: bool = True) -> ir.Layout:
        return self._layout


class NvFp4Adapter:
    """One NVFP4 template family as an ExtChoices adapter."""

    OPS = ("nvfp4_gemm",)

    def __init__(self, module: ModuleType, name: str) -> None:
        self.TEMPLATE_MODULE = module
        self.FAMILY = module.FAMILY
        self.template = TritonTemplate(name=name, grid=mm_grid, source=module.inductor_source())

    def prepare(self, kernel_inputs: KernelInputs, op_name: str) -> Prepared | str:
        a, b_t, sa, sb, alpha, *rest = kernel_inputs.nodes()  # _scaled_mm's order
        bias = rest[0] if rest else None
        m, k_half = a.get_size()
        n = b_t.get_size()[1]
        if not all(getattr(x, "is_number", True) for x in (m, n, k_half)):
            return "dynamic shapes are not supported yet"
        activation, out_dtype = kernel_inputs.get_scalar("activation"), kernel_inputs.get_scalar("out_dtype")
        common = dict(m=int(m), n=int(n), k=2 * int(k_half), out_dtype=str(out_dtype).removeprefix("torch."),
                      bias=bias is not None,
                      bias_dtype=str(bias.get_dtype()).removeprefix("torch.") if bias is not None else None,
                      activation=None if activation == "none" else activation, scale_layout="blocked")
        if self.TEMPLATE_MODULE is nvfp4_dequant_gemm:
            common["a_dtype"] = "nvfp4"
        problem = (nvfp4_gemm.Nvfp4GemmProblem if self.TEMPLATE_MODULE is nvfp4_gemm
                   else nvfp4_dequant_gemm.Nvfp4DequantGemmProblem)(**common)
        reason = self.TEMPLATE_MODULE.supports(problem)
        if reason:
            return reason
        # Every choice takes the inputs as the ATen choice does (Inductor benchmarks them all on
        # one set of example inputs): a, b (_scaled_mm's [K/2, N] view), scale_a, scale_b, alpha, bias.
        inputs = [a, b_t, sa, sb, alpha] + ([bias] if bias is not None else [])
        layout = ir.FixedLayout(a.get_device(), out_dtype, [int(m), int(n)])
        return Prepared(problem, tuple(inputs), layout, {})

    def append(self, choices: list[Any], prepared: Prepared, config: Any, target: str) -> Any | None:
        if self.TEMPLATE_MODULE.check_config(*_check_args(self.TEMPLATE_MODULE, config, prepared.problem, target)):
            return None
        kwargs = dict(self.TEMPLATE_MODULE.constexprs(prepared.problem, config))
        # Inductor renders template kwargs as source text: strings need quotes.
        kwargs["ACTIVATION"] = repr(kwargs["ACTIVATION"])
        if self.TEMPLATE_MODULE is nvfp4_dequant_gemm:
            kwargs["DOT_DTYPE"] = nvfp4_dequant_gemm.dot_dtype(prepared.problem)
        before = len(choices)
        self.template.maybe_append_choice(choices, input_nodes=prepared.inputs, layout=prepared.layout,
                                          num_stages=config.num_stages, num_warps=config.num_warps,
                                          **pdl_consumers.template_launch_kwargs(prepared.problem), **kwargs)
        return choices[-1] if len(choices) > before else None

    def config_to_dict(self, config: Any) -> dict[str, Any]:
        return dataclasses.asdict(config)

    def config_from_dict(self, data: dict[str, Any]) -> Any:
        cls = nvfp4_gemm.Nvfp4GemmConfig if self.TEMPLATE_MODULE is nvfp4_gemm else nvfp4_dequant_gemm.Nvfp4DequantGemmConfig
        return cls(**data)


def _check_args(module: ModuleType, config: Any, problem: Any, target: str) -> tuple[Any, ...]:
    return (config, problem, target) if module is nvfp4_dequant_gemm else (config, target)


ADAPTERS = {
    nvfp4_gemm.FAMILY: NvFp4Adapter(nvfp4_gemm, "ext_nvfp4_gemm"),
    nvfp4_dequant_gemm.FAMILY: NvFp4Adapter(nvfp4_dequant_gemm, "ext_nvfp4_dequant_gemm"),
}


@register_lowering(OP, type_promotion_kind=None)
def lower_nvfp4_gemm(a: Any, b: Any, scale_a: Any, scale_b: Any, alpha: Any, bias: Any,
                     activation: str, out_dtype: torch.dtype, alpha_dtype: torch.dtype) -> Any:
    if alpha_dtype != torch.float32:  # the graph rounded alpha first (torchao): do the same
        alpha = lowerings[prims.convert_element_type](lowerings[prims.convert_element_type](alpha, alpha_dtype),
                                                      torch.float32)
    nodes = [a, b, scale_a, scale_b, alpha] + ([bias] if bias is not None else [])
    nodes = [ir.ExternKernel.realize_input(x) for x in nodes]
    m, n = a.get_size()[0], b.get_size()[1]
    layout = ir.FixedLayout(a.get_device(), out_dtype, [m, n])
    scalars = {"activation": activation, "out_dtype": out_dtype}
    kernel_inputs = NvFp4KernelInputs(nodes, layout, scalars)
    # alpha is already rounded here, so the ATen path takes it as fp32
    aten_kwargs = {"bias": None, "activation": activation, "out_dtype": out_dtype, "alpha_dtype": torch.float32}
    if bias is not None:
        aten_kwargs.pop("bias")
    choices = [ATEN_CHOICE.bind(tuple(nodes[:5]) + ((nodes[5],) if bias is not None else ()), layout, **aten_kwargs)]
    offer = getattr(V.choices, "offer", None)
    if offer is not None:
        choices = offer("nvfp4_gemm", kernel_inputs, choices)
    node, _ = autotune_select_algorithm("nvfp4_gemm", choices, nodes, layout)
    return node

