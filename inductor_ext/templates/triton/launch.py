"""How a Triton GEMM template's kernel meets its launch; shared by the families in this folder
(``gemm``, ``nvfp4_gemm``, ``nvfp4_dequant_gemm``).

- The grid is 1-D, one program per BLOCK_M x BLOCK_N tile of the output (``grid()``);
  ``PROGRAM_TILE`` is the kernel text that maps a program id back to that tile, so the two sit
  side by side.
- ``launch_options()``: the compile options ``KernelSource.launch`` carries (``launch_pdl`` for
  programmatic dependent launch).
- ``launch()``: load a rendered ``KernelSource`` and launch it on ``grid()``, what every
  family's ``run()`` ends with.

Like the families, this module never imports torch or triton at load (triton chooses between its
interpreter and its compiler when it is first imported).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from inductor_ext.runtime.triton_loader import load_kernel

if TYPE_CHECKING:  # annotations only
    import torch

    from inductor_ext.templates.base import KernelSource

# Float dtype names as Triton signatures spell them.
FP = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}

# Kernel text: the tile of the program ``tl.program_id(0)`` of ``grid()``. Inputs: ints M, N;
# constexprs BLOCK_M, BLOCK_N, GROUP_M. Leaves: rm [BLOCK_M] and rn [BLOCK_N], unmasked.
PROGRAM_TILE = """\
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    # Group programs along M so programs running together share tiles of B in L2.
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
"""


class _Launched(Protocol):
    """What the helpers read of a family's problem and config."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


def grid(m: int, n: int, config: _Launched) -> tuple[int]:
    """One program per output tile, in the order ``PROGRAM_TILE`` decodes."""
    import triton

    return (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)


def launch_options(problem: Any, config: _Launched) -> dict[str, object]:
    """``KernelSource.launch``: num_warps, num_stages and, with ``problem.use_pdl``, launch_pdl."""
    launch: dict[str, object] = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    if problem.use_pdl:
        launch["launch_pdl"] = True  # Triton compile option: launch with the PDL attribute
    return launch


def dtype_name(dtype: "torch.dtype") -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: the dtype names problems take."""
    return str(dtype).removeprefix("torch.")


def bias_args(bias: "torch.Tensor | None", out: "torch.Tensor") -> tuple["torch.Tensor", int]:
    """The BIAS pointer and stride_bias a kernel takes: without a bias, ``out`` stands in
    (HAS_BIAS is off, so it is never read) with stride 0."""
    return (bias, bias.stride(-1)) if bias is not None else (out, 0)


def launch(ks: "KernelSource", config: _Launched, m: int, n: int, *args: Any) -> None:
    """Load ``ks`` and launch it on ``grid(m, n, config)`` with ``args`` (the kernel's runtime
    parameters, in order), its constexprs and its launch options."""
    load_kernel(ks)[grid(m, n, config)](*args, **ks.constexprs, **ks.launch)
