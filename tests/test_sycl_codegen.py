"""codegen/sycl, tier C: Inductor's loop IR as SYCL free-function kernels, generated as for an
Intel GPU and run on Intel's OpenCL CPU device with CPU tensors (``CODEGEN.install`` with
``interpret=True`` around ``torch.compile(..., backend="inductor")``), compared with eager.

Compiles are expensive on CPU (Inductor, then one SYCL program per graph), so one module-scoped
fixture compiles one graph holding many small cases, and each test checks its own output of it.
The ops users reach through the backend (softmax, norms, GEMMs, dtypes, a training step) are
tested there: tests/test_sycl_backend.py."""

from __future__ import annotations

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


def compile_and_run(fn: Callable[..., Any], *args: Any, dynamic: bool = False) -> tuple[Any, list]:
    """``fn(*args)`` compiled with the SYCL codegen in interpret mode: (result, its SYCL kernels)."""
    torch._dynamo.reset()
    with CODEGEN.install(interpret_config()):
        out, codes = run_and_get_code(torch.compile(fn, backend="inductor", dynamic=dynamic), *args)
    kernels = [k for code in codes for k in CODEGEN.describe_kernels(code)]
    assert kernels, "no SYCL kernel was generated"
    return out, kernels


# ------------------------------------------------------------------------------ pointwise

def pointwise(x, y, xn, i, z, u, v):
    return ((torch.relu(x * 2 + y).sin() - 1) / (y.abs() + 1),  # a chain with broadcast
            torch.where(xn > 0, xn, xn * 0.1) + (i // 7 - i % 5).float(),  # strided input, integer ops
            torch.remainder(i - 500, 7),  # Python's % on negatives
            (z * 3).to(torch.float16), (z * 3).to(torch.bfloat16),  # narrowing stores
            torch.maximum(u, v) + torch.minimum(u, v))  # NaN propagates


def pointwise_inputs() -> tuple[torch.Tensor, ...]:
    z = torch.randn(4099) * 1000
    z[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1 + 2**-8 + 2**-20])
    return (torch.randn(37, 45), torch.randn(45), torch.randn(50, 70).t()[3:, ::2],
            torch.arange(67 * 25, dtype=torch.int64).reshape(67, 25), z,
            torch.tensor([1.0, float("nan"), -3.0, float("inf")]), torch.tensor([float("nan"), 2.0, -4.0, 0.0]))


@pytest.fixture(scope="module")
def graph_run() -> dict[str, Any]:
    """``pointwise`` and ``reductions`` (below) in one graph: one compile, one SYCL program."""
    torch.manual_seed(0)
    pw_args, red_args = pointwise_inputs(), reduction_inputs()
    fn = lambda *args: pointwise(*args[:len(pw_args)]) + reductions(*args[len(pw_args):])  # noqa: E731
    out, kernels = compile_and_run(fn, *pw_args, *red_args)
    return {"out": out, "expected": fn(*pw_args, *red_args), "kernels": kernels, "split": 6}


@pytest.fixture(scope="module")
def pointwise_run(graph_run: dict[str, Any]) -> dict[str, Any]:
    n = graph_run["split"]
    return {"out": graph_run["out"][:n], "expected": graph_run["expected"][:n], "kernels": graph_run["kernels"]}


def test_pointwise_chain_with_broadcast(pointwise_run: dict[str, Any]) -> None:
    torch.testing.assert_close(pointwise_run["out"][0], pointwise_run["expected"][0], rtol=2e-5, atol=1e-5)


def test_non_contiguous_inputs_and_integer_ops(pointwise_run: dict[str, Any]) -> None:
    for i in (1, 2):
        torch.testing.assert_close(pointwise_run["out"][i], pointwise_run["expected"][i], rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("index", [3, 4], ids=["float16", "bfloat16"])
def test_narrowing_rounds_exactly_like_eager(pointwise_run: dict[str, Any], index: int) -> None:
    """fp32 -> fp16/bf16 stores round to nearest even (bf16 by bits, see templates/lang/sycl.py),
    NaN and infinities kept: bit-exact with eager."""
    out, expected = pointwise_run["out"][index], pointwise_run["expected"][index]
    assert torch.equal(out.isnan(), expected.isnan())  # (NaN payloads may differ)
    assert torch.equal(out[~out.isnan()].view(torch.int16), expected[~expected.isnan()].view(torch.int16))


def test_nan_propagates_through_maximum(pointwise_run: dict[str, Any]) -> None:
    torch.testing.assert_close(pointwise_run["out"][5], pointwise_run["expected"][5], equal_nan=True)


# ------------------------------------------------------------------------------ reductions

def reductions(s1, s2, s3, x, w, ln_x, ln_w):
    return (s1.sum(-1), s2.sum(-1), s3.sum(-1),  # odd sizes: short (serial) and long (work-group)
            x.amax(0), x.argmax(0), x.mean(0),  # over the outer dim; argmax/max return the NaN, as eager
            *torch.var_mean(w, -1),  # Welford
            F.layer_norm(ln_x, (333,), ln_w) * torch.softmax(ln_x, -1))  # row stores reloaded: fenced


def reduction_inputs() -> tuple[torch.Tensor, ...]:
    x = torch.randn(301, 17)
    x[5, 3] = float("nan")
    return (torch.randn(33, 13), torch.randn(7, 1000), torch.randn(3, 4097), x, torch.randn(4, 2000) + 3,
            torch.randn(5, 333), torch.randn(333))


@pytest.fixture(scope="module")
def reductions_run(graph_run: dict[str, Any]) -> dict[str, Any]:
    n = graph_run["split"]
    return {"out": graph_run["out"][n:], "expected": graph_run["expected"][n:], "kernels": graph_run["kernels"]}


REDUCTION_OUTPUTS = ["sum_13", "sum_1000", "sum_4097", "amax", "argmax", "mean", "var", "mean_welford",
                     "layernorm_softmax"]


@pytest.mark.parametrize("output", REDUCTION_OUTPUTS)
def test_reductions_equal_eager(reductions_run: dict[str, Any], output: str) -> None:
    i = REDUCTION_OUTPUTS.index(output)
    torch.testing.assert_close(reductions_run["out"][i], reductions_run["expected"][i], rtol=2e-5, atol=1e-5,
                               equal_nan=True)


def test_each_kernel_maps_its_work_by_its_kind(graph_run: dict[str, Any]) -> None:
    """Pointwise kernels: a work-item per element; short reductions: a work-item per row (serial);
    long ones: a work-group per row."""
    seen = set()
    for k in graph_run["kernels"]:
        numel = re.search(r"const int64_t r0_numel = (\d+);", k.source)
        expected = "pointwise" if numel is None else "serial" if int(numel[1]) < 64 else "group"
        assert k.properties["mode"] == expected, (k.name, numel and numel[1], k.properties)
        seen.add(int(numel[1]) if numel else "pointwise")
    assert {13, 1000, 4097, 301, "pointwise"} <= seen, seen


def test_dynamic_shapes() -> None:
    fn = lambda x: torch.softmax(x, -1) + x.mean()
    torch._dynamo.reset()
    with CODEGEN.install(interpret_config()):
        compiled = torch.compile(fn, backend="inductor", dynamic=True)
        for shape in [(5, 100), (7, 33), (3, 1000)]:
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), fn(x), rtol=2e-5, atol=1e-5)


# ------------------------------------------------------------------------------ structure

def test_kernels_are_nd_range_free_functions_with_barriers_at_kernel_scope(reductions_run: dict[str, Any]) -> None:
    kernels = reductions_run["kernels"]
    assert any(re.search(r"if \(r0_lid == 0\) out_ptr\d+\[", k.source) for k in kernels)  # a row store to fence
    for k in kernels:
        assert k.language == "sycl" and k.properties["nd_range_kernel"] == 1
        assert 'SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<1>))' in k.source
        assert f"void {k.name}(" in k.source
        body = k.source.split("{", 1)[1]
        collectives = [line for line in body.splitlines() if re.search(r"group_barrier|ext::group_", line)]
        if k.properties["mode"] == "group":
            # no work-item leaves early (a masked load's lambda returns its value, which is fine)
            assert collectives and not re.search(r"\breturn\s*;", body)
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
