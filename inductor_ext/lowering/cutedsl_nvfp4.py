"""Offers the CuTeDSL NVFP4 GEMM (``templates/cutedsl/nvfp4_gemm.py``, quack's block-scaled
tcgen05 GEMM) as a choice for ``inductor_ext::nvfp4_gemm`` on sm_100a, beside ATen and the
Triton templates.

quack's kernel is a compiled CuTeDSL function, not Triton source Inductor can render, so each
config becomes an extern choice calling ``inductor_ext::nvfp4_gemm_cutedsl`` (defined here)
with the config as arguments. Inductor benchmarks it like any other choice and, when it wins,
the generated wrapper calls the op. Served: alpha from device memory (fp32), an optional bf16
bias, bf16 output, no activation (quack's linear epilogue is ``alpha * acc + bias``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor
from torch._inductor import ir
from torch._inductor.kernel_inputs import KernelInputs
from torch._inductor.select_algorithm import ExternKernelChoice

from inductor_ext.lowering.prepared import Prepared
from inductor_ext.templates.cutedsl import nvfp4_gemm as cutedsl_nvfp4

FAMILY = cutedsl_nvfp4.FAMILY
# Where quack's kernel runs (tests widen it to check the lowering's generated code on CPU).
DEVICE_TYPES = ("cuda",)


@torch.library.custom_op("inductor_ext::nvfp4_gemm_cutedsl", mutates_args=())
def nvfp4_gemm_cutedsl(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, alpha: Tensor,
                       bias: Tensor | None, tile_m: int, tile_n: int, cluster_m: int, cluster_n: int,
                       dynamic_persistent: bool) -> Tensor:
    """``alpha * (a @ b) (+ bias)`` in bf16 by quack's kernel; ``b`` is ``_scaled_mm``'s
    [K/2, N] view of a K-major weight."""
    if not a.is_cuda:
        raise RuntimeError(f"{FAMILY} runs only on an sm_100 GPU; got tensors on {a.device}")
    config = cutedsl_nvfp4.NvFp4GemmConfig(tile_m, tile_n, cluster_m, cluster_n, dynamic_persistent)
    return launch(a, b, scale_a, scale_b, alpha, bias, config)


def launch(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, alpha: Tensor, bias: Tensor | None,
           config: cutedsl_nvfp4.NvFp4GemmConfig) -> Tensor:
    """The op's arguments (``_scaled_mm``'s) as the template's: B back to its [N, K/2] rows."""
    return cutedsl_nvfp4.run(a, b.t(), scale_a, scale_b, config, alpha=alpha, bias=bias)


@nvfp4_gemm_cutedsl.register_fake
def _(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, alpha: Tensor, bias: Tensor | None,
      tile_m: int, tile_n: int, cluster_m: int, cluster_n: int, dynamic_persistent: bool) -> Tensor:
    return a.new_empty((a.shape[0], b.shape[1]), dtype=torch.bfloat16)


OP = torch.ops.inductor_ext.nvfp4_gemm_cutedsl.default


class CuteDslNvFp4Adapter:
    """The CuTeDSL NVFP4 family as an ExtChoices adapter (see triton_nvfp4.NvFp4Adapter)."""

    OPS = ("nvfp4_gemm",)
    FAMILY = FAMILY
    TEMPLATE_MODULE = cutedsl_nvfp4

    def prepare(self, kernel_inputs: KernelInputs, op_name: str) -> Prepared | str:
        a, b_t, sa, sb, alpha, *rest = kernel_inputs.nodes()
        bias = rest[0] if rest else None
        if kernel_inputs.device_type not in DEVICE_TYPES:
            return f"{FAMILY} runs only on an sm_100 GPU (there is no CPU interpreter for CuTeDSL)"
        m, k_half = a.get_size()
        n = b_t.get_size()[1]
        if not all(getattr(x, "is_number", True) for x in (m, n, k_half)):
            return "dynamic shapes are not supported yet"
        if kernel_inputs.get_scalar("activation") != "none":
            return f"activation {kernel_inputs.get_scalar('activation')!r}: quack's epilogue is alpha * acc + bias only"
        if bias is not None and bias.get_dtype() != torch.bfloat16:
            return f"bias dtype {bias.get_dtype()} is not bfloat16"
        # quack reads B K-major: _scaled_mm's [K/2, N] operand must be the transpose of a
        # contiguous [N, K/2] weight, i.e. strides (1, K/2).
        if [int(s) for s in b_t.get_stride()] != [1, int(k_half)]:
            return f"B strides {list(b_t.get_stride())} are not K-major (expected [1, {int(k_half)}])"
        if [int(s) for s in a.get_stride()] != [int(k_half), 1]:
            return f"A strides {list(a.get_stride())} are not K-major (expected [{int(k_half)}, 1])"
        out_dtype = kernel_inputs.get_scalar("out_dtype")
        problem = cutedsl_nvfp4.NvFp4GemmProblem(
            m=int(m), n=int(n), k=2 * int(k_half), out_dtype=str(out_dtype).removeprefix("torch."),
            alpha="tensor", bias=bias is not None)
        reason = cutedsl_nvfp4.supports(problem)
        if reason:
            return reason
        inputs = (a, b_t, sa, sb, alpha) + ((bias,) if bias is not None else ())
        return Prepared(problem, inputs, ir.FixedLayout(a.get_device(), out_dtype, [int(m), int(n)]))

    def append(self, choices: list[Any], prepared: Prepared, config: cutedsl_nvfp4.NvFp4GemmConfig,
               target: str) -> Any | None:
        if target not in cutedsl_nvfp4.TARGETS or cutedsl_nvfp4.config_supports(prepared.problem, config):
            return None
        kwargs = dataclasses.asdict(config)
        if not prepared.problem.bias:
            kwargs = {"bias": None, **kwargs}
        choice = self._choice(config).bind(prepared.inputs, prepared.layout, **kwargs)
        choice.description = f"{FAMILY} {config.name()}"  # what dumps show as its config
        choices.append(choice)
        return choice

    @staticmethod
    def _choice(config: cutedsl_nvfp4.NvFp4GemmConfig) -> ExternKernelChoice:
        name = f"ext_cutedsl_nvfp4_gemm_{config.name()}"
        return ExternKernelChoice.lookup(name) or ExternKernelChoice(
            OP, name=name, has_out_variant=False, op_overload=OP)

    def config_to_dict(self, config: cutedsl_nvfp4.NvFp4GemmConfig) -> dict[str, Any]:
        return dataclasses.asdict(config)

    def config_from_dict(self, data: dict[str, Any]) -> cutedsl_nvfp4.NvFp4GemmConfig:
        return cutedsl_nvfp4.NvFp4GemmConfig(**data)


ADAPTERS = {FAMILY: CuteDslNvFp4Adapter()}

# Compiled graphs call the winning config as ``extern_kernels.<name>``; a graph loaded from
# Inductor's FX graph cache in a new process runs no lowering, so every config is registered
# when this module is imported (the backend imports it before any compile or cache lookup).
for _config in cutedsl_nvfp4.ALL_CONFIGS:
    CuteDslNvFp4Adapter._choice(_config)
