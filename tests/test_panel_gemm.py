"""ATen's GEMM per panel of output columns (``kernels/panel_gemm_ops.py``), offered as one more
ATen-side choice for wide fp32 GEMMs (``lowering/aten_choices.py``): its numbers against ATen's
mm and addmm, where it is offered and why not elsewhere, and a compile that times it and a
cache-only compile that serves it.

Panels are ``PANEL`` = 1024 columns and offered from ``WIDE`` = 8192: both are made small here
(16 and 64) so that small shapes cross many panel edges and stay quick."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor import ir
from torch._inductor.graph import GraphLowering
from torch._inductor.kernel.mm import aten_mm
from torch._inductor.kernel.mm_common import mm_args
from torch._inductor.kernel_inputs import MMKernelInputs
from torch._inductor.select_algorithm import realize_inputs
from torch._inductor.virtualized import V
from torch._subclasses.fake_tensor import FakeTensorMode

from inductor_ext import presets, tune
from inductor_ext.autotune import policy
from inductor_ext.autotune.cache import AutotuneCache
from inductor_ext.kernels import panel_gemm_ops, reused_outputs
from inductor_ext.lowering import aten_choices, decision_record

PANEL, WIDE = 16, 64


@pytest.fixture
def small_panels(monkeypatch):
    monkeypatch.setattr(panel_gemm_ops, "PANEL", PANEL)
    monkeypatch.setattr(panel_gemm_ops, "WIDE", WIDE)


def _randn(*size, seed=0, dtype=torch.float32):
    return torch.randn(*size, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _assert_same(got, want):
    # the same dot products as ATen's (the panels split N, never K), summed in an order that may
    # differ with a panel's width: far tighter than a bf16, tf32 or dropped-panel mistake would be
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------- numbers
# (M, K, N): one row; N a multiple of the panel, one panel, not a multiple; K not a multiple of anything
SHAPES = [(1, 24, 100), (5, 37, PANEL), (3, 17, 33), (17, 64, 1000), (64, 5, 7)]


@pytest.mark.parametrize("m, k, n", SHAPES)
def test_panel_mm_matches_mm(small_panels, m, k, n):
    x, w = _randn(m, k, seed=1), _randn(n, k)
    _assert_same(panel_gemm_ops.panel_mm(x, w.t()), torch.mm(x, w.t()))  # a linear's weight, K-major
    _assert_same(panel_gemm_ops.panel_mm(x, w.t().contiguous()), torch.mm(x, w.t()))  # row-major B


def test_panel_mm_takes_non_contiguous_activations(small_panels):
    x = _randn(40, 9, seed=1).t()  # 9 x 40, column-major
    w = _randn(70, 80)[:, ::2]  # 70 x 40, every other column
    assert not x.is_contiguous() and not w.is_contiguous()
    _assert_same(panel_gemm_ops.panel_mm(x, w.t()), torch.mm(x, w.t()))


@pytest.mark.parametrize("m, k, n", SHAPES)
@pytest.mark.parametrize("bias_shape", ["row", "one_row", "expanded", "full", "column", "scalar"])
def test_panel_addmm_matches_addmm_for_every_bias_addmm_broadcasts(small_panels, m, k, n, bias_shape):
    x, w = _randn(m, k, seed=1), _randn(n, k)
    b = _randn(n, seed=2)
    bias = {"row": b, "one_row": b[None], "expanded": b.expand(m, n), "full": _randn(m, n, seed=3),
            "column": _randn(m, 1, seed=4), "scalar": torch.tensor(0.5)}[bias_shape]
    _assert_same(panel_gemm_ops.panel_addmm(bias, x, w.t()), torch.addmm(bias, x, w.t()))


@pytest.mark.parametrize("n", [100, PANEL, 3 * PANEL])
def test_one_library_call_per_panel_each_over_its_own_columns(small_panels, monkeypatch, n):
    x, w, b = _randn(3, 24, seed=1), _randn(n, 24), _randn(n, seed=2)
    widths = []
    for name in ("mm", "addmm"):
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, real=real, **kw: widths.append(a[-1].shape[1]) or real(*a, **kw))
    panel_gemm_ops.panel_mm(x, w.t())
    panel_gemm_ops.panel_addmm(b, x, w.t())
    want = [min(PANEL, n - start) for start in range(0, n, PANEL)]
    assert widths == want + want


def test_the_ops_through_the_dispatcher_and_as_fake_tensors(small_panels):
    x, w, b = _randn(3, 24, seed=1), _randn(100, 24), _randn(100, seed=2)
    _assert_same(torch.ops.inductor_ext.panel_mm(x, w.t()), x @ w.t())
    _assert_same(torch.ops.inductor_ext.panel_addmm(b, x, w.t()), torch.addmm(b, x, w.t()))
    with FakeTensorMode() as mode:
        fx, fw, fb = mode.from_tensor(x), mode.from_tensor(w), mode.from_tensor(b)
        assert torch.ops.inductor_ext.panel_mm(fx, fw.t()).shape == (3, 100)
        assert torch.ops.inductor_ext.panel_addmm(fb, fx, fw.t()).shape == (3, 100)


def test_a_bf16_gemm_stays_in_bf16(small_panels):
    x, w = _randn(3, 24, seed=1, dtype=torch.bfloat16), _randn(100, 24, dtype=torch.bfloat16)
    got = panel_gemm_ops.panel_mm(x, w.t())
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, torch.mm(x, w.t()), rtol=2**-7, atol=2**-7)


# ------------------------------------------------------------------------------- where offered


@pytest.fixture
def lowering():
    with V.set_graph_handler(GraphLowering(torch.fx.symbolic_trace(lambda x: x))):
        yield


def _input(name, size, dtype, stride=None):
    box = ir.TensorBox.create(ir.InputBuffer(name=name, layout=ir.FixedLayout(torch.device("cpu"), dtype,
                                                                                  list(size), stride)))
    V.graph.graph_inputs[name] = box
    return box


def _mm(m, n, k, dtype=torch.float32):
    _, _, _, layout, a, b = mm_args(_input("a", (m, k), dtype), _input("b", (k, n), dtype, [1, k]))
    return MMKernelInputs([a, b]), aten_mm.bind((a, b), layout)


def _addmm(m, n, k, alpha=1, beta=1):
    bias = realize_inputs(_input("bias", (n,), torch.float32))
    _, _, _, layout, a, b = mm_args(_input("a", (m, k), torch.float32), _input("b", (k, n), torch.float32, [1, k]))
    return MMKernelInputs([bias, a, b], scalars={"alpha": alpha, "beta": beta}), None


def _offered(op, kernel_inputs, preset="cpu"):
    config = presets.resolve({"preset": preset})
    return aten_choices.panel_inputs(config, op, kernel_inputs)


def test_offered_for_a_wide_fp32_mm_and_addmm(lowering, small_panels):
    for op, (inputs, _) in (("mm", _mm(4, WIDE, 24)), ("addmm", _addmm(4, 100, 24))):
        offered = _offered(op, inputs)
        assert not isinstance(offered, str), offered
        choices = []
        aten_choices.extend(presets.resolve({"preset": "cpu"}), op, inputs, choices)
        assert [c.name for c in choices][-1] == f"ext_panel_{op}"
        assert choices[-1].layout == offered.layout and list(choices[-1].input_nodes) == list(offered.nodes)


@pytest.mark.parametrize("case, why", [
    ("narrow", f"{WIDE - 1} output columns (offered from {WIDE})"),
    ("bf16", "dtypes bfloat16, bfloat16 (the panels are offered for float32)"),
    ("alpha", "addmm with alpha=2, beta=1 (a linear's are 1)"),
    ("beta", "addmm with alpha=1, beta=2 (a linear's are 1)"),
    ("bmm", "op bmm (each panel GEMM serves mm, addmm)"),
])
def test_refused_elsewhere_with_the_reason(lowering, small_panels, case, why):
    op, inputs = {"narrow": lambda: ("mm", _mm(4, WIDE - 1, 24)[0]),
                  "bf16": lambda: ("mm", _mm(4, WIDE, 24, torch.bfloat16)[0]),
                  "alpha": lambda: ("addmm", _addmm(4, WIDE, 24, alpha=2)[0]),
                  "beta": lambda: ("addmm", _addmm(4, WIDE, 24, beta=2)[0]),
                  "bmm": lambda: ("bmm", _mm(4, WIDE, 24)[0])}[case]()
    assert _offered(op, inputs) == why
    choices = []
    aten_choices.extend(presets.resolve({"preset": "cpu"}), op, inputs, choices)
    assert not any(c.name.startswith("ext_panel_") for c in choices)


def test_not_offered_outside_the_cpu_preset(lowering, small_panels):
    assert _offered("mm", _mm(4, WIDE, 24)[0], preset="hopper") == "not the cpu preset"


# ------------------------------------------------------------------------------------- compiles


class Wide(torch.nn.Module):
    """A vocabulary-style projection (no bias), a wide linear with its bias, and a narrow one."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(24, 100, bias=False)
        self.up = torch.nn.Linear(24, 100)
        self.down = torch.nn.Linear(24, WIDE - 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.head(x), self.up(x).relu(), self.down(x)


def _compile(m, x, options):
    torch._dynamo.reset()
    counters.clear()
    first = len(decision_record.decisions)
    fn = torch.compile(m, backend="ext", options=options)
    with tune.fresh_inductor_caches(), torch.no_grad():
        out = fn(x)
    return out, decision_record.decisions[first:], counters["inductor"]["select_algorithm_autotune"], fn


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A timed compile (one template config per problem) that writes its cache, then a cache-only
    compile from a copy whose wide GEMMs name the panel GEMMs as winners."""
    out = tmp_path_factory.mktemp("panel_gemm")
    torch.manual_seed(0)
    m, x = Wide().eval(), _randn(5, 24, seed=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(panel_gemm_ops, "PANEL", PANEL)
        mp.setattr(panel_gemm_ops, "WIDE", WIDE)
        mp.setitem(policy.EFFORT_BUDGET, "full", 1)
        _, timed, _, _ = _compile(copy.deepcopy(m), x, {"autotune": "full", "autotune_cache": str(out / "timed.db")})
        forced = AutotuneCache(out / "forced.db")
        for entry in AutotuneCache(out / "timed.db").entries():
            wide = int(entry.key.shapes[-1][-1]) >= WIDE
            forced.put(dataclasses.replace(entry, winner="aten", config={"name": f"ext_panel_{entry.key.op}"})
                       if wide else entry)
        got, served, benchmarks, fn = _compile(copy.deepcopy(m), x, {
            "autotune": "cache-only", "autotune_cache": str(out / "forced.db"), "dump_dir": str(out / "dump")})
    with torch.no_grad():
        want = m(x)
    code = "\n".join(p.read_text() for p in (out / "dump").rglob("*.py"))
    return {"timed": timed, "served": served, "benchmarks": benchmarks, "got": got, "want": want, "code": code,
            "fn": fn, "x": x}


def test_the_timed_compile_times_the_panels_for_the_wide_gemms_only(compiled):
    wide = [d for d in compiled["timed"] if d.op in ("mm", "addmm") and d.key is not None
            and int(d.key.shapes[-1][-1]) >= WIDE]
    narrow = [d for d in compiled["timed"] if d.op in ("mm", "addmm") and d.key is not None
              and int(d.key.shapes[-1][-1]) < WIDE]
    assert len(wide) == 2 and len(narrow) == 1, compiled["timed"]
    for d in wide:
        panel = [c for c in d.candidates if c["name"] == f"ext_panel_{d.op}"]
        assert len(panel) == 1 and panel[0]["kind"] == "aten", d.candidates
        assert panel[0]["time_us"] is not None and math.isfinite(panel[0]["time_us"]), d.candidates
    assert not any(c["name"].startswith("ext_panel_") for c in narrow[0].candidates)


def test_a_cache_naming_the_panels_serves_them_with_atens_numbers(compiled):
    assert compiled["benchmarks"] == 0
    served = {d.op: d for d in compiled["served"] if d.winner.startswith("ext_panel_")}
    assert set(served) == {"mm", "addmm"} and all(d.reason == "cache" for d in served.values()), compiled["served"]
    # the graph calls the op (a FallbackKernel), not a Python function of ext's
    assert "torch.ops.inductor_ext.panel_mm.default(" in compiled["code"]
    assert "torch.ops.inductor_ext.panel_addmm.default(" in compiled["code"]
    for got, want in zip(compiled["got"], compiled["want"]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_served_graph_writes_its_wide_outputs_over_dropped_ones_never_held_ones(compiled, monkeypatch):
    """Each call's wide outputs in the memory of the last call's once nothing holds them
    (``kernels/reused_outputs.py``; pooled from 2000 bytes, a 5 x 100 fp32 output, instead of 32 MiB)."""
    monkeypatch.setattr(reused_outputs, "REUSE_FROM", 5 * 100 * 4)
    reused_outputs.release()
    fn, x = compiled["fn"], compiled["x"]
    with torch.no_grad():
        held = fn(x)
        kept = [t.clone() for t in held]
        dropped = fn(x * 2)
        assert not {t.data_ptr() for t in held} & {t.data_ptr() for t in dropped}
        for t, k in zip(held, kept):
            assert torch.equal(t, k)  # the held outputs were not written
        dropped_ptrs = {t.data_ptr() for t in dropped[:2]}  # the wide ones: head, up
        del dropped
        again = fn(x)
    assert again[0].data_ptr() in dropped_ptrs and again[1].data_ptr() in dropped_ptrs
    for got, want in zip(again, compiled["want"]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
