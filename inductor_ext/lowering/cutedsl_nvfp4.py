"""The op behind the CuTeDSL NVFP4 GEMM's extern choices (``templates/cutedsl/nvfp4_gemm.py``,
quack's block-scaled tcgen05 GEMM on sm_100a): ``inductor_ext::nvfp4_gemm_cutedsl``.

The generic extern adapter (``lowering/adapters.py``) binds one choice per config to this op with
the config as kwargs; when one wins, the generated wrapper calls it. Served: alpha from device
memory (fp32), an optional bf16 bias, bf16 output, no activation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inductor_ext.templates.cutedsl import nvfp4_gemm as cutedsl_nvfp4

NAME = cutedsl_nvfp4.NAME


@torch.library.custom_op(cutedsl_nvfp4.EXTERN_OP, mutates_args=())
def nvfp4_gemm_cutedsl(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, alpha: Tensor,
                       bias: Tensor | None, tile_m: int, tile_n: int, cluster_m: int, cluster_n: int,
                       dynamic_persistent: bool, use_pdl: bool = False) -> Tensor:
    """``alpha * (a @ b) (+ bias)`` in bf16 by quack's kernel; ``b`` is ``_scaled_mm``'s
    [K/2, N] view of a K-major weight."""
    if not a.is_cuda:
        raise RuntimeError(f"{NAME} runs only on an sm_100 GPU; got tensors on {a.device}")
    return launch(a, b, scale_a, scale_b, alpha, bias,
                  cutedsl_nvfp4.NvFp4GemmConfig(tile_m, tile_n, cluster_m, cluster_n, dynamic_persistent),
                  use_pdl=use_pdl)


def launch(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, alpha: Tensor, bias: Tensor | None,
           config: cutedsl_nvfp4.NvFp4GemmConfig, use_pdl: bool = False) -> Tensor:
    """The op's arguments (``_scaled_mm``'s) as the template's ``call`` takes them; ``use_pdl``
    picks the PDL build of the kernel and its launch attribute."""
    return cutedsl_nvfp4.call(None, config, "sm_100a", a, b, scale_a, scale_b, alpha, bias, use_pdl=use_pdl)


@nvfp4_gemm_cutedsl.register_fake
def _(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, alpha: Tensor, bias: Tensor | None,
      tile_m: int, tile_n: int, cluster_m: int, cluster_n: int, dynamic_persistent: bool,
      use_pdl: bool = False) -> Tensor:
    return a.new_empty((a.shape[0], b.shape[1]), dtype=torch.bfloat16)


OP = torch.ops.inductor_ext.nvfp4_gemm_cutedsl.default
