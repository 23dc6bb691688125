"""codegen/sycl, tier C: Inductor's loop IR as SYCL free-function kernels, generated as for an
Intel GPU and run on Intel's OpenCL CPU device with CPU tensors (``CODEGEN.install`` with
``interpret=True`` around ``torch.compile(..., backend="inductor")``), compared with eager."""

from __future__ import annotations

import copy
import re
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

from inductor_ext.codegen import sycl as sycl_codegen
from inductor_ext.codegen.sycl import CODEGEN
from inductor_ext.testing.sycl_device import SYCL_MARKS, interpret_config

pytestmark = SYCL_MARKS

TOLERANCE = {torch.float32: (2e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1e-2)}


def compile_and_run(fn: Callable[..., Any], *args: Any, dynamic: bool = False) -> tuple[Any, list]:
    """``fn(*args)`` compiled with the SYCL codegen in interpret mode: (result, its SYCL kernels)."""
    torch._dynamo.reset()
    with CODEGEN.install(interpret_config()):
        out, codes = run_and_get_code(torch.compile(fn, backend="inductor", dynamic=dynamic), *args)
    kernels = [k for code in codes for k in CODEGEN.describe_kernels(code)]
    assert kernels, "no SYCL kernel was generated"
    return out, kernels


def assert_matches_eager(fn: Callable[..., Any], *args: Any, dtype: torch.dtype = torch.float32) -> list:
    out, kernels = compile_and_run(fn, *args)
    expected = fn(*args)
    rtol, atol = TOLERANCE[dtype]
    torch.testing.assert_close(out, expected, rtol=rtol, atol=atol)
    return kernels


def modes(kernels: list) -> list[str]:
    return [k.properties["mode"] for k in kernels]


# ------------------------------------------------------------------------------ pointwise

def test_pointwise_chain_with_broadcast() -> None:
    x, y = torch.randn(37, 45), torch.randn(45)
    kernels = assert_matches_eager(lambda x, y: (torch.relu(x * 2 + y).sin() - 1) / (y.abs() + 1), x, y)
    assert modes(kernels) == ["pointwise"]


def test_non_contiguous_inputs_and_integer_ops() -> None:
    x = torch.randn(50, 70).t()[3:, ::2]  # transposed, offset, strided
    i = torch.arange(67 * 25, dtype=torch.int64).reshape(67, 25)
    fn = lambda x, i: (torch.where(x > 0, x, x * 0.1) + (i // 7 - i % 5).float(), torch.remainder(i - 500, 7))
    assert_matches_eager(fn, x, i)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_narrowing_rounds_exactly_like_eager(dtype: torch.dtype) -> None:
    """fp32 -> fp16/bf16 stores round to nearest even (bf16 by bits, see templates/lang/sycl.py),
    NaN and infinities kept: bit-exact with eager."""
    x = torch.randn(4099) * 1000
    x[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1 + 2**-8 + 2**-20])
    out, _ = compile_and_run(lambda x: (x * 3).to(dtype), x)
    expected = (x * 3).to(dtype)
    assert torch.equal(out.isnan(), expected.isnan())  # (NaN payloads may differ)
    assert torch.equal(out[~out.isnan()].view(torch.int16), expected[~expected.isnan()].view(torch.int16))


def test_nan_propagates_through_maximum() -> None:
    x = torch.tensor([1.0, float("nan"), -3.0, float("inf")])
    y = torch.tensor([float("nan"), 2.0, -4.0, 0.0])
    out, _ = compile_and_run(lambda x, y: torch.maximum(x, y) + torch.minimum(x, y), x, y)
    torch.testing.assert_close(out, torch.maximum(x, y) + torch.minimum(x, y), equal_nan=True)


# ------------------------------------------------------------------------------ reductions

@pytest.mark.parametrize("shape,mode", [((33, 13), "serial"), ((7, 1000), "group"), ((3, 4097), "group")])
def test_sum_over_odd_sizes(shape: tuple[int, int], mode: str) -> None:
    kernels = assert_matches_eager(lambda x: x.sum(-1), torch.randn(shape))
    assert modes(kernels) == [mode]


def test_max_argmax_and_mean_over_the_outer_dim() -> None:
    x = torch.randn(301, 17)
    x[5, 3] = float("nan")  # argmax/max return the NaN, as eager does
    out, _ = compile_and_run(lambda x: (x.amax(0), x.argmax(0), x.mean(0)), x)
    for got, expected in zip(out, (x.amax(0), x.argmax(0), x.mean(0))):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_var_mean_welford() -> None:
    assert_matches_eager(lambda x: torch.var_mean(x, -1), torch.randn(4, 2000) + 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_softmax(dtype: torch.dtype) -> None:
    x = (torch.randn(9, 777) * 3).to(dtype)
    kernels = assert_matches_eager(lambda x: torch.softmax(x, -1), x, dtype=dtype)
    assert modes(kernels) == ["group"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layernorm(dtype: torch.dtype) -> None:
    x, w, b = torch.randn(5, 333).to(dtype), torch.randn(333).to(dtype), torch.randn(333).to(dtype)
    assert_matches_eager(lambda x, w, b: F.layer_norm(x, (333,), w, b), x, w, b, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rmsnorm(dtype: torch.dtype) -> None:
    def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    x, w = torch.randn(6, 515).to(dtype), torch.randn(515).to(dtype)
    assert_matches_eager(rms_norm, x, w, dtype=dtype)


def test_dynamic_shapes() -> None:
    fn = lambda x: torch.softmax(x, -1) + x.mean()
    torch._dynamo.reset()
    with CODEGEN.install(interpret_config()):
        compiled = torch.compile(fn, backend="inductor", dynamic=True)
        for shape in [(5, 100), (7, 33), (3, 1000)]:
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), fn(x), rtol=2e-5, atol=1e-5)


def test_mlp_training_step() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                                torch.nn.Linear(64, 10))
    reference = copy.deepcopy(model)
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    torch._dynamo.reset()
    with CODEGEN.install(interpret_config()):
        loss = F.cross_entropy(torch.compile(model, backend="inductor")(x), y)
        loss.backward()
    expected = F.cross_entropy(reference(x), y)
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")


# ------------------------------------------------------------------------------ structure

def test_kernels_are_nd_range_free_functions_with_barriers_at_kernel_scope() -> None:
    x, w = torch.randn(5, 333), torch.randn(333)
    kernels = assert_matches_eager(lambda x, w: F.layer_norm(x, (333,), w) * torch.softmax(x, -1), x, w)
    assert any(re.search(r"if \(r0_lid == 0\) out_ptr\d+\[", k.source) for k in kernels)  # a row store to fence
    for k in kernels:
        assert k.language == "sycl" and k.properties["nd_range_kernel"] == 1
        assert 'SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<1>))' in k.source
        assert f"void {k.name}(" in k.source
        body = k.source.split("{", 1)[1]
        collectives = [line for line in body.splitlines() if re.search(r"group_barrier|ext::group_", line)]
        if k.properties["mode"] == "group":
            assert collectives and "return" not in body
            # kernel scope is one indent level: no loop or branch around a barrier
            assert all(re.match(r"^ {4}\S", line) for line in collectives), collectives
        else:
            assert not collectives
        _assert_row_stores_fenced(body)


def _assert_row_stores_fenced(body: str) -> None:
    """A value one work-item stores for its row and other work-items load again afterwards needs a
    barrier in between (layernorm stores the mean, then normalises with it)."""
    lines = body.splitlines()
    for i, line in enumerate(lines):
        stored = re.match(r"\s*if \(r0_lid == 0\) (\w+)\[", line)
        if not stored:
            continue
        reads = [j for j, later in enumerate(lines[i + 1:], i + 1) if re.search(rf"= {stored[1]}\[", later)]
        if reads:
            assert any("group_barrier" in text for text in lines[i + 1:reads[0]]), \
                f"{stored[1]} is reloaded on line {reads[0]} with no barrier after its store on line {i}"


def test_install_restores_what_was_registered() -> None:
    from torch._inductor.codegen import common

    common.init_backend_registration()
    before = common.device_codegens["cpu"]
    with CODEGEN.install(interpret_config()):
        assert common.device_codegens["cpu"].scheduling.__name__ == "SyclScheduling"
        assert common.custom_backend_passes["cpu"].uuid().startswith("inductor_ext.codegen.sycl:cpu:")
    assert common.device_codegens["cpu"] is before
    assert common.custom_backend_passes.get("cpu") is None


def test_registered_on_xpu_outside_interpret_mode() -> None:
    from torch._inductor.codegen import common
    import types

    common.init_backend_registration()
    before = common.device_codegens["xpu"]
    with CODEGEN.install(types.SimpleNamespace(interpret=False)):
        assert common.device_codegens["xpu"].scheduling.__name__ == "SyclScheduling"
        assert common.device_codegens["cpu"].scheduling.__name__ != "SyclScheduling"
    assert common.device_codegens["xpu"] is before


def test_codegen_is_found_by_name() -> None:
    from inductor_ext import codegen

    assert codegen.get("sycl") is CODEGEN and CODEGEN.device_types == ("xpu",)
    assert sycl_codegen.missing() is None
