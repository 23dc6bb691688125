"""Tier C through the backend: ``torch.compile(fn, backend="ext", options={"preset": "xpu",
"interpret": True})`` on CPU tensors generates SYCL exactly as for an Intel GPU (codegen/sycl for
Inductor's kernels, the sycl.gemm template beside ATen for GEMMs) and runs every kernel on Intel's
OpenCL CPU device. No environment variable is involved.

Each graph is compiled once per module (fixtures; every dtype's ops in one graph), so the SYCL
programs are built once: one per graph for Inductor's kernels, one per autotune decision for the
GEMM candidates (shared with tests/test_sycl_gemm.py when both run in one process).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

from inductor_ext import backend, dumps, presets
from inductor_ext.autotune.cache import AutotuneCache
from inductor_ext.codegen.sycl import CODEGEN
from inductor_ext.config import ExtOptionError
from inductor_ext.lowering import refusals
from inductor_ext.lowering.ext_choices import decisions
from inductor_ext.runtime import sycl
from inductor_ext.runtime.sycl import wheels
from inductor_ext.templates.sycl import gemm
from inductor_ext.testing.sycl_device import needs_sycl

TOLERANCE = {torch.float32: (2e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1e-2)}
XPU_INTERPRET = {"preset": "xpu", "interpret": True}


def compile_ext(fn: Callable[..., Any], tmp: Path, **options: Any) -> Callable[..., Any]:
    torch._dynamo.reset()
    return torch.compile(fn, backend="ext", options={**XPU_INTERPRET, "dump_dir": str(tmp / "dumps"),
                                                     "autotune_cache": str(tmp / "autotune.db"), **options})


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def ops(x, b, xs, rows, s_in, ln_in, ln_w, ln_b, rms_in, rms_w, a, m, bias):
    """One graph holding every kernel kind: a pointwise chain with broadcast, a short (serial) and
    a long (work-group) reduction over odd sizes, softmax, layernorm, RMSNorm, addmm (and mm in
    fp32: every GEMM decision builds its candidates, seconds each on the CPU device)."""
    return ((torch.relu(x * 2 + b).sin() - 1) / (b.abs() + 1),
            xs.sum(-1),
            rows.sum(-1),
            torch.softmax(s_in, -1),
            F.layer_norm(ln_in, (ln_in.shape[-1],), ln_w, ln_b),
            rms_norm(rms_in, rms_w),
            torch.addmm(bias, a, m, beta=0.5, alpha=2.0),
            a @ m if a.dtype == torch.float32 else None)


def ops_inputs(dtype: torch.dtype) -> list[torch.Tensor]:
    torch.manual_seed(0)
    shapes = [(37, 45), (45,), (33, 13), (3, 4097), (9, 777), (5, 333), (333,), (333,), (6, 515), (515,),
              (3, 70), (70, 45), (45,)]  # GEMMs with M = 3: a gemv and the 16-row tile are offered
    tensors = [torch.randn(s) for s in shapes]
    tensors[4] = tensors[4] * 3
    return [t.to(dtype) for t in tensors]


DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["float32", "float16", "bfloat16"]


def ops_in_every_dtype(*args: torch.Tensor) -> tuple:
    """``ops`` once per dtype, in one graph: one Inductor compile and one SYCL program for all."""
    n = len(args) // len(DTYPES)
    return tuple(ops(*args[i * n:(i + 1) * n]) for i in range(len(DTYPES)))


@pytest.fixture(scope="module")
def ops_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``ops`` in fp32, fp16 and bf16, compiled for xpu in interpret mode, the GEMM template forced
    (ATen is faster on the CPU device; the point here is that the template computes the right
    numbers when the compiled graph calls it)."""
    if sycl.missing():
        pytest.skip(f"SYCL kernels cannot run here: {sycl.missing()}")
    tmp = tmp_path_factory.mktemp("ops")
    args = [t for dtype in DTYPES for t in ops_inputs(dtype)]
    first, builds = len(decisions), len(sycl.BUILDS)
    out = compile_ext(ops_in_every_dtype, tmp, force_template="sycl.gemm")(*args)
    return {"out": out, "expected": ops_in_every_dtype(*args), "decisions": decisions[first:],
            "builds": sycl.BUILDS[builds:], "dumps": tmp / "dumps"}


OUTPUTS = ["pointwise", "sum_serial", "sum_group", "softmax", "layernorm", "rmsnorm", "addmm", "mm"]


@needs_sycl
@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ops_equal_eager(ops_run: dict[str, Any], dtype: torch.dtype, output: str) -> None:
    i, d = OUTPUTS.index(output), DTYPES.index(dtype)
    got, expected = ops_run["out"][d][i], ops_run["expected"][d][i]
    if expected is None:
        assert got is None and output == "mm"
        return  # mm runs in fp32 only (above)
    assert got.dtype == expected.dtype
    rtol, atol = TOLERANCE[dtype]
    if output in ("mm", "addmm", "sum_group") and dtype != torch.float32:
        atol *= 8  # sums of 70 or 4097 products, rounded once to 16 bits
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)


@needs_sycl
def test_gemms_ran_the_sycl_template(ops_run: dict[str, Any]) -> None:
    """Every GEMM was offered beside ATen, benchmarked, and (forced) won: the graph called
    sycl.gemm, with gemv and tiled candidates for M=3, each decision's built in one compiler run."""
    made = sorted((d.op, d.problem["dtype"]) for d in ops_run["decisions"])
    assert made == [("addmm", "bfloat16"), ("addmm", "float16"), ("addmm", "float32"), ("mm", "float32")]
    for d in ops_run["decisions"]:
        names = [c["name"] for c in d.candidates]
        assert names[0] in ("mm", "addmm") and d.candidates[0]["kind"] == "aten"
        assert any(n.startswith("ext_sycl_gemm_gemv") for n in names) and any("tiled" in n for n in names)
        assert d.winner.startswith("ext_sycl_gemm_") and d.reason == "force_template=sycl.gemm"
        assert all(c["time_us"] is not None for c in d.candidates)
    # At most one compiler run per decision: gemv and tiled built together (prebuild). A kernel an
    # earlier test of this process built is not built again, so a run may hold one kernel only.
    gemm_builds = [b for b in ops_run["builds"] if b.kernels[0].startswith("ext_sycl_gemm_") and not b.in_process_hit]
    assert len(gemm_builds) <= len(ops_run["decisions"]), gemm_builds


@needs_sycl
def test_dumps_show_sycl_sources_with_their_nd_range(ops_run: dict[str, Any]) -> None:
    root = ops_run["dumps"]
    index = dumps.read_index(root)
    sycl_kernels = [k for k in index["kernels"] if k["language"] == "sycl" and k["template"] is None]
    assert len(sycl_kernels) >= 6  # every non-GEMM op above is a SYCL kernel (some may fuse)
    for k in sycl_kernels:
        source = (root / k["file"]).read_text()
        assert k["properties"]["nd_range_kernel"] == 1
        assert "SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<1>))" in source
    modes = {k["properties"]["mode"] for k in sycl_kernels}
    assert modes == {"pointwise", "serial", "group"}
    assert not [k for k in index["kernels"] if k["language"] in ("cpp", "triton")]  # nothing else generated
    gemms = [k for k in index["kernels"] if k["template"] == "sycl.gemm"]
    assert len(gemms) == len(ops_run["decisions"]), [k["kernel"] for k in index["kernels"]]
    for k in gemms:  # the template's own source, rendered for the call's problem
        source = (root / k["file"]).read_text()
        assert k["language"] == "sycl" and "SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<1>))" in source
        assert "sycl::reduce_over_group" in source or "sycl::select_from_group" in source
    table = dumps.format_table(index)
    assert all(k["kernel"] in table for k in sycl_kernels) and "sycl.gemm" in table


@needs_sycl
def test_under_inductors_cpp_wrapper_the_graph_keeps_the_python_wrapper(tmp_path: Path, caplog) -> None:
    """The SYCL codegen has a Python wrapper only: with ``cpp_wrapper=True`` set by the user, Inductor
    stopped at "Device cpu not supported" (xpu on a device); now the compile says so in one line and
    generates the Python wrapper, SYCL kernels and the template included."""
    torch.manual_seed(0)
    lin, x = torch.nn.Linear(24, 40), torch.randn(3, 24)
    first = len(decisions)
    with torch._inductor.config.patch(cpp_wrapper=True), torch.no_grad(), \
            caplog.at_level("INFO", logger="inductor_ext.codegen.sycl.install"):
        got = compile_ext(lambda x: torch.relu(lin(x)), tmp_path, force_template="sycl.gemm")(x)
        want = torch.relu(lin(x))
        assert torch._inductor.config.cpp_wrapper  # the user's setting is back after the compile
    torch.testing.assert_close(got, want, rtol=2e-5, atol=1e-5)
    assert [d.winner.startswith("ext_sycl_gemm_") for d in decisions[first:]] == [True]
    assert "no C++ wrapper" in caplog.text
    index = dumps.read_index(tmp_path / "dumps")
    assert any(k["language"] == "sycl" and k["template"] is None for k in index["kernels"])


# ------------------------------------------------------------------------------ training


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One training step of a small MLP (forward and backward graphs), GEMMs autotuned for real:
    ATen is faster on the CPU device, so it wins and the decisions are cached."""
    if sycl.missing():
        pytest.skip(f"SYCL kernels cannot run here: {sycl.missing()}")
    tmp = tmp_path_factory.mktemp("training")
    torch.manual_seed(0)
    # Every GEMM of the step has M = 4 (batch, hidden and classes), so its candidates are the
    # gemv and the 16-row tile that ops_run's fp32 mm and addmm built: no compiler run of its own.
    model = torch.nn.Sequential(torch.nn.Linear(32, 4), torch.nn.GELU(), torch.nn.LayerNorm(4),
                                torch.nn.Linear(4, 4))
    reference = copy.deepcopy(model)
    x, y = torch.randn(4, 32), torch.randint(0, 4, (4,))
    first, builds = len(decisions), len(sycl.BUILDS)
    step = compile_ext(lambda x, y: F.cross_entropy(model(x), y), tmp)
    loss = step(x, y)
    loss.backward()
    expected = F.cross_entropy(reference(x), y)
    expected.backward()
    return {"loss": loss, "expected": expected, "model": model, "reference": reference,
            "decisions": decisions[first:], "builds": sycl.BUILDS[builds:], "tmp": tmp}


@needs_sycl
def test_training_step_equals_eager(training: dict[str, Any]) -> None:
    torch.testing.assert_close(training["loss"], training["expected"], rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(training["model"].named_parameters(), training["reference"].parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")


@needs_sycl
def test_training_gemms_autotuned_against_aten_and_cached(training: dict[str, Any]) -> None:
    made = training["decisions"]
    assert {d.op for d in made} >= {"addmm", "mm"}, [d.op for d in made]  # forward and backward
    for d in made:
        ours = [c for c in d.candidates if c["family"] == "sycl.gemm"]
        assert ours and all(c["time_us"] for c in ours), d.candidates  # each ran and was timed
        assert d.reason in ("benchmark", "template within margin 2% of ATen"), d.reason
    entries = AutotuneCache(str(training["tmp"] / "autotune.db")).entries()
    assert len(entries) == len({d.key for d in made})
    assert all(any(c["name"].startswith("ext_sycl_gemm_") for c in e.candidates) for e in entries)


@needs_sycl
def test_training_kernels_are_sycl_in_both_graphs(training: dict[str, Any]) -> None:
    index = dumps.read_index(training["tmp"] / "dumps")
    graphs = {k["graph"].rsplit("_", 1)[1] for k in index["kernels"] if k["language"] == "sycl"}
    assert graphs == {"forward", "backward"}
    assert not [k for k in index["kernels"] if k["language"] in ("cpp", "triton")]  # nothing else generated


# ------------------------------------------------------------------------------ errors and options


@needs_sycl
def test_compile_error_gives_the_compilers_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from inductor_ext.codegen.sycl.overrides import SyclOverrides

    monkeypatch.setattr(SyclOverrides, "sigmoid", staticmethod(lambda x: f"no_such_function({x})"), raising=False)
    fn = compile_ext(lambda x: torch.sigmoid(x) * 3, tmp_path, inductor={"fx_graph_cache": False})
    with pytest.raises(Exception) as info:
        fn(torch.randn(10))
    text = str(info.value)
    assert "use of undeclared identifier 'no_such_function'" in text  # clang's own words
    assert "--- kernel source ---" in text and "no_such_function(" in text


def test_xpu_codegen_option_decides_who_generates_kernels() -> None:
    resolve = presets.resolve
    assert backend.device_codegen(resolve({"preset": "xpu"})) is None  # a real XPU: Inductor's Triton
    assert backend.device_codegen(resolve({"preset": "xpu", "xpu_codegen": "triton", "interpret": True})) is None
    if sycl.missing() is None:
        assert backend.device_codegen(resolve(XPU_INTERPRET)) is CODEGEN
        assert backend.device_codegen(resolve({"preset": "xpu", "xpu_codegen": "sycl"})) is CODEGEN
    with pytest.raises(ExtOptionError, match="'auto', 'sycl', 'triton'"):
        resolve({"preset": "xpu", "xpu_codegen": "opencl"})


def test_asking_for_sycl_without_the_wheels_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheels, "find", lambda: None)
    with pytest.raises(ExtOptionError, match=r'pip install "inductor-ext\[sycl\]"'):
        backend.device_codegen(presets.resolve({"preset": "xpu", "xpu_codegen": "sycl"}))
    # the template then steps aside for ATen with the same reason
    assert 'pip install "inductor-ext[sycl]"' in gemm.refuse_here()
    reason = refusals.here(presets.resolve({"preset": "xpu"}), gemm.FAMILY, "xpu").reason
    assert reason.startswith("sycl.gemm cannot run here") and "inductor-ext[sycl]" in reason


def test_xpu_preset_autotunes_the_sycl_gemm_template() -> None:
    config = presets.resolve({"preset": "xpu"})
    assert config.templates == ("sycl.gemm",) and config.autotune != "off"
    assert json.loads(config.to_json())["plugin_options"] == {}  # Triton stays the XPU default
