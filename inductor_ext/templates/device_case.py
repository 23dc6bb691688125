"""What a family gives the device check (``bench/device_check.py``, tier D on a lent GPU):
``Family.device_cases(target) -> [DeviceCase]``, the shapes to run there, each with its problem
and, built only on the device, its operands, its reference and ATen's call of the same op.

The check reads nothing else of a family, so it iterates the registry with no per-family
branch: numerics of every offered config against ``reference`` (within ``tolerance``, or within
``aten_factor`` times ATen's own error where the case is about a numerics mode ATen shares,
such as TF32), then, for a ``timed`` case, speed against ``aten`` and, for a family with
``pdl``, PDL on / off. ``problem`` must be what the family's ``problem_for`` would give, so the
policies offer it the configs autotuning would. Building a case costs nothing (``--dry-run``
lists them here, without a GPU); ``operands()`` allocates on the GPU.

GEMM families share their shapes: :func:`gemm_cases` (decode M = 1, 16 and prefill M = 512, on
N = K = 4096).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

DECODE_M = (1, 16)
PREFILL_M = (512,)
N = K = 4096
TOLERANCE = 2e-2  # relative max error vs an fp32/fp64 reference of a bf16-out kernel: order and one rounding


@dataclass(frozen=True)
class DeviceOperands:
    """One case's tensors on the device: ``run(config, use_pdl)`` launches the family's kernel,
    ``want`` is the plain-torch reference, ``aten()`` ATen's call (the baseline timed beside it)."""

    run: Callable[[Any, bool], Any]
    want: Any
    aten: Callable[[], Any]


@dataclass(frozen=True)
class DeviceCase:
    label: str  # e.g. "decode 1x4096x4096"; with the family's name, the case's name in the JSON
    problem: Any  # the family's Problem, as problem_for gives it
    operands: Callable[[], DeviceOperands]  # built on the device only
    tolerance: float = TOLERANCE  # relative max error allowed against ``want``
    aten_factor: float | None = None  # also ok within this factor of ATen's error (a mode ATen shares)
    timed: bool = True  # False: numerics only (no speed, no PDL)


def gemm_cases(problem_of: Callable[[int, int, int], Any],
               operands_of: Callable[[Any], DeviceOperands]) -> list[DeviceCase]:
    """The decode and prefill cases every GEMM family runs: ``problem_of(m, n, k)`` the family's
    problem, ``operands_of(problem)`` its operands on the device."""
    cases = []
    for m in DECODE_M + PREFILL_M:
        problem = problem_of(m, N, K)
        kind = "decode" if m in DECODE_M else "prefill"
        cases.append(DeviceCase(f"{kind} {m}x{N}x{K}", problem, lambda p=problem: operands_of(p)))
    return cases


def rel_err(got: Any, want: Any) -> float:
    """max |got - want| / max |want|, in fp32."""
    return ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-30)).item()


def gemm_inputs(m: int, n: int, k: int) -> tuple[Any, Any]:
    """Seeded fp32 x [M, K] and w [N, K] on the GPU, scaled so the K-sums stay near 1."""
    import torch

    torch.manual_seed(0)
    return torch.randn(m, k, device="cuda") / k**0.25, torch.randn(n, k, device="cuda") / k**0.25


@dataclass(frozen=True)
class Nvfp4Operands:
    """NVFP4 x NVFP4 operands of one GEMM on the device: the quantized tensors, their fp4 codes,
    the scales in cuBLASLt's blocked layout and the global dequant scale ``alpha``."""

    xq: Any
    wq: Any
    codes: tuple[Any, Any]
    sa: Any
    sb: Any
    alpha: Any


def nvfp4_operands(m: int, n: int, k: int, launch: Callable[[Nvfp4Operands, Any, bool], Any]) -> DeviceOperands:
    """The device check's operands for an NVFP4 GEMM family (``launch(operands, config, use_pdl)``
    runs its kernel), against cuBLASLt's block-scaled ``torch._scaled_mm`` and the fp32 reference."""
    import torch

    from inductor_ext.kernels import nvfp4, scaled_gemm

    x, w = gemm_inputs(m, n, k)
    xq, wq = nvfp4.quantize_nvfp4(x), nvfp4.quantize_nvfp4(w)
    fp4 = torch.float4_e2m1fn_x2
    q = Nvfp4Operands(xq, wq, (xq.qdata.view(fp4), wq.qdata.view(fp4)), nvfp4.to_blocked(xq.scales),
                      nvfp4.to_blocked(wq.scales), (xq.global_scale * wq.global_scale).float().reshape(1).cuda())

    def aten() -> Any:  # cuBLASLt's block-scaled GEMM; alpha as one more kernel (none in its API)
        return torch._scaled_mm(q.codes[0], q.codes[1].t(), q.sa, q.sb, out_dtype=torch.bfloat16) * q.alpha

    return DeviceOperands(lambda config, use_pdl: launch(q, config, use_pdl),
                          scaled_gemm.scaled_mm_reference(xq, wq, out_dtype=torch.float32), aten)
