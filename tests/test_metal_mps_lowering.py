"""A compile for a real ``mps`` device, generated on Linux: fake ``mps`` tensors through
Inductor's lowering and MPS codegen with ext's choices handler for the ``mps`` preset. Each
Metal family must be offered by the lowering that serves its op on mps (mm/addmm, aten._scaled_mm,
F.scaled_mm's _scaled_mm_v2 through ext's wrapper, _grouped_mm through ext's wrapper, ext's
softmax op), and the generated wrapper, run on CPU tensors with the Metal-on-CPU executor,
must equal eager. Autotuning needs the device, so the handler keeps the first Metal template.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.functional import ScalingType

from inductor_ext import presets
from inductor_ext.kernels import softmax_ops  # noqa: F401  (torch.ops.inductor_ext.softmax)
from inductor_ext.lowering import ext_choices, ops
from inductor_ext.lowering.ops import scaled_mm as scaled_mm_v2
from inductor_ext.testing.metal_cpu import inductor_mps_wrapper, run_inductor_mps

pytestmark = pytest.mark.metal_cpu

ops.load()  # ext's lowerings (softmax, grouped_mm, scaled_mm v2), as the installer loads them


class FirstMetalTemplate(ext_choices.ExtChoices):
    """ext's choices for the mps preset that keep the first Metal template offered."""

    def __init__(self) -> None:
        super().__init__(presets.resolve({"preset": "mps"}))
        self.offered: list[tuple[str, list[str]]] = []

    def offer(self, op_name: str, kernel_inputs: Any, choices: list[Any]) -> list[Any]:
        offered = super().offer(op_name, kernel_inputs, choices)
        self.offered.append((op_name, [c.name for c in offered]))
        return [c for c in offered if c.name.startswith("ext_metal_")][:1] or offered[:1]


def e4m3(*shape: int) -> torch.Tensor:
    return (torch.randn(*shape) * 4).to(torch.float8_e4m3fn)


def rowwise_scales(m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5


torch.manual_seed(0)
_A, _W = e4m3(3, 80), e4m3(96, 80)
_SA, _SB = rowwise_scales(3, 96)
_X, _LIN_W, _LIN_B = torch.randn(2, 70).bfloat16(), torch.randn(45, 70).bfloat16(), torch.randn(45).bfloat16()
_ROWS, _EXPERTS = torch.randn(6, 64).bfloat16(), torch.randn(3, 40, 64).bfloat16()
_OFFS = torch.tensor([2, 2, 6], dtype=torch.int32)  # an empty group

CASES = {  # name: (function, inputs, op offered, family, tolerance)
    "scaled_mm_v1": (lambda a, b, sa, sb: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
                     (_A, _W.t(), _SA, _SB), "scaled_mm", "metal.scaled_mm", dict(rtol=2**-7, atol=1e-3)),
    "scaled_mm_v2": (lambda a, b, sa, sb: F.scaled_mm(a, b, sa, ScalingType.RowWise, sb, ScalingType.RowWise,
                                                      output_dtype=torch.float32),
                     (_A, _W.t(), _SA, _SB), "scaled_mm", "metal.scaled_mm", dict(rtol=2e-5, atol=1e-4)),
    "scaled_mm_v2_tensorwise_bias": (
        lambda a, b, sa, sb, bias: F.scaled_mm(a, b, sa, ScalingType.TensorWise, sb, ScalingType.TensorWise,
                                               bias=bias, output_dtype=torch.bfloat16),
        (_A, _W.t(), torch.tensor(0.75), torch.tensor(1.25), torch.randn(96).bfloat16()), "scaled_mm",
        "metal.scaled_mm", dict(rtol=2**-7, atol=1e-2)),
    "linear_bias": (lambda x, w, b: F.linear(x, w, b), (_X, _LIN_W, _LIN_B), "addmm", "metal.linear_gemv",
                    dict(rtol=2**-7, atol=1e-2)),
    "linear": (lambda x, w: F.linear(x, w), (_X, _LIN_W), "mm", "metal.linear_gemv", dict(rtol=2**-7, atol=1e-2)),
    "grouped_mm": (lambda a, b, offs: torch._grouped_mm(a, b, offs=offs), (_ROWS, _EXPERTS.transpose(-2, -1), _OFFS),
                   "grouped_mm", "metal.grouped_mm", dict(rtol=2**-7, atol=1e-2)),
    "softmax": (lambda x: torch.ops.inductor_ext.softmax(x, -1, torch.float32), (torch.randn(2, 4099).bfloat16() * 3,),
                "softmax", "metal.softmax", dict(rtol=2e-5, atol=1e-7)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mps_lowering_offers_the_metal_family_and_runs(case):
    fn, inputs, op, family, tol = CASES[case]
    handler = FirstMetalTemplate()
    code = inductor_mps_wrapper(fn, *inputs, choices=handler)
    (offered_op, names), = handler.offered
    assert offered_op == op and any(n.startswith("ext_" + family.replace(".", "_")) for n in names), names
    assert f"extern_kernels.ext_{family.replace('.', '_')}_" in code and "target='mps'" in code
    (got,) = run_inductor_mps(fn, *inputs, choices=FirstMetalTemplate())
    torch.testing.assert_close(got, fn(*inputs), **tol)


def test_inductors_scaled_mm_v2_lowering_does_not_ask_on_mps(monkeypatch):
    """Why lowering/ops/scaled_mm.py's v2 lowering exists: without it, F.scaled_mm on mps is ATen's, unasked."""
    from torch._inductor.lowering import lowerings

    monkeypatch.setitem(lowerings, scaled_mm_v2.OP, scaled_mm_v2._inductors)
    fn, inputs, *_ = CASES["scaled_mm_v2"]
    handler = FirstMetalTemplate()
    code = inductor_mps_wrapper(fn, *inputs, choices=handler)
    assert handler.offered == [] and "ext_metal_" not in code and "_scaled_mm_v2" in code
