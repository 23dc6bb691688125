"""ext's Metal codegen in interpret mode: Inductor's MPS codegen for CPU tensors, each kernel run
by the Metal-on-CPU executor, entered on its own around a plain Inductor compile."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from inductor_ext import codegen
from inductor_ext.codegen.metal import CODEGEN
from inductor_ext.runtime.metal_cpu import MetalLaunchError

pytestmark = pytest.mark.metal_cpu


@dataclass(frozen=True)
class StandIn:
    """The one field of ExtConfig the codegen reads."""

    interpret: bool


def _compile_with_metal(fn, *args):
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with CODEGEN.install(StandIn(interpret=True)):
        out, codes = run_and_get_code(torch.compile(fn, backend="inductor"), *args)
    return out, codes[0]


def rms_norm_swiglu(x, w_norm, w_gate, w_up):
    h = F.rms_norm(x, (x.shape[-1],), w_norm)
    return F.silu(h @ w_gate) * (h @ w_up), x.softmax(-1).amax(-1)


def test_registered_and_usable_here():
    assert codegen.get("metal") is CODEGEN and CODEGEN.language == "msl"
    assert CODEGEN.missing() is None


def test_interpret_generates_metal_for_cpu_tensors():
    torch.manual_seed(0)
    args = (torch.randn(6, 96), torch.rand(96) + 0.5, torch.randn(96, 40), torch.randn(96, 40))
    out, code = _compile_with_metal(rms_norm_swiglu, *args)
    for got, want in zip(out, rms_norm_swiglu(*args)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert "metal_cpu_kernel(" in code and "cpp_fused" not in code
    kernels = CODEGEN.describe_kernels(code)
    assert kernels and all(k.language == "msl" and "kernel void" in k.source for k in kernels)
    assert any("threadgroup_sum" in k.source for k in kernels)  # the RMSNorm reduction
    assert any("rms_norm" in k.header or "pow" in k.header or "mean" in k.header for k in kernels), \
        [k.header for k in kernels]


def test_kernel_reported_errors_are_raised():
    """Inductor's index bounds checks report through c10's error buffer (error_buf_idx)."""
    torch._dynamo.reset()
    x = torch.randn(10, 4)
    with CODEGEN.install(StandIn(interpret=True)):
        gather = torch.compile(lambda x, i: x[i] * 2, backend="inductor")
        torch.testing.assert_close(gather(x, torch.tensor([1, 3, 9])), x[[1, 3, 9]] * 2)
        with pytest.raises(MetalLaunchError, match=r"reported: Index 12 out of range \[0, 10\) \(line \d+ of "
                                                   r"generated_kernel_\d+ in kernel.metal\) x4"):
            gather(x, torch.tensor([1, 3, 12]))
    # The error buffer stays with the kernel that checks bounds (torch 2.15 would leak it into later kernels).
    _, code = _compile_with_metal(lambda x: x.sum(-1), x)
    assert "error_buf" not in code


def test_install_restores_inductor_cpu_codegen():
    from torch._inductor.codegen import common

    common.init_backend_registration()
    before = common.device_codegens["cpu"]
    with CODEGEN.install(StandIn(interpret=True)):
        assert common.device_codegens["cpu"] is not before
    assert common.device_codegens["cpu"] is before
    with CODEGEN.install(StandIn(interpret=False)):  # on a Mac, Inductor's own Metal codegen serves
        assert common.device_codegens["cpu"] is before


def test_describe_kernels_reads_inductors_own_mps_output():
    from inductor_ext.testing.metal_cpu import inductor_mps_wrapper

    code = inductor_mps_wrapper(lambda x: x.sum(-1), torch.randn(4, 300))
    (kernel,) = CODEGEN.describe_kernels(code)
    assert kernel.name == "generated_kernel_0" and "threadgroup_sum" in kernel.source
    assert "#include <c10/metal/reduction_utils.h>\n" in kernel.source and kernel.properties["headers"]
