"""A bf16 GEMM through ATen's fp32 GEMM on the weight widened once (``kernels/widened_gemm_ops.py``),
offered as an ATen-side choice for bf16 GEMMs on a constant weight (``lowering/aten_choices.py``):
its numbers (bit for bit those of the fp32 GEMM on widened operands, rounded once), the widened
copy kept while it is the same weight and dropped with it, wide outputs through the panels, where
it is offered and why not, and a compile that times it and a cache-only compile that serves it."""

from __future__ import annotations

import copy
import dataclasses
import gc
import math
import os

import pytest
import torch
from test_decision_tables import PROVENANCE  # a table's provenance fields
from test_panel_gemm import _compile, _mm  # a compile's decisions; an mm's inputs in a lowering
from torch._inductor.graph import GraphLowering
from torch._inductor.virtualized import V
from torch._subclasses.fake_tensor import FakeTensorMode

from inductor_ext import presets
from inductor_ext.autotune import decision_tables, policy
from inductor_ext.autotune.cache_entry import Entry
from inductor_ext.autotune.cache import AutotuneCache
from inductor_ext.kernels import panel_gemm_ops, widened_gemm_ops
from inductor_ext.lowering import aten_choices

BF16 = torch.bfloat16


def _randn(*size, seed=0, dtype=BF16):
    return torch.randn(*size, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _widened_reference(x, w_t, bias=None):
    """The fp32 GEMM on the exactly widened operands, rounded to bf16 once."""
    out = torch.mm(x.float(), w_t.float()) if bias is None else torch.addmm(bias.float(), x.float(), w_t.float())
    return out.to(BF16)


def _assert_bitwise(got, want):
    assert got.dtype == BF16 and got.shape == want.shape
    assert torch.equal(got, want), (got.float() - want.float()).abs().max()


# ------------------------------------------------------------------------------------- numbers
# (M, K, N): one row, K and N odd, a decode-sized and a prefill-sized block
SHAPES = [(1, 24, 100), (3, 17, 33), (16, 64, 96), (64, 37, 7)]


@pytest.mark.parametrize("m, k, n", SHAPES)
def test_widened_mm_is_the_fp32_gemm_on_widened_operands_rounded_once(m, k, n):
    x, w = _randn(m, k, seed=1), _randn(n, k)
    _assert_bitwise(widened_gemm_ops.widened_mm(x, w.t()), _widened_reference(x, w.t()))  # a linear's weight view
    _assert_bitwise(widened_gemm_ops.widened_mm(x, w.t().contiguous()), _widened_reference(x, w.t()))
    # and ATen's bf16 mm to within one bf16 rounding (it sums in another order)
    torch.testing.assert_close(widened_gemm_ops.widened_mm(x, w.t()), torch.mm(x, w.t()), rtol=2**-7, atol=2**-7)


def test_widened_mm_takes_non_contiguous_activations():
    x = _randn(40, 9, seed=1).t()  # 9 x 40, column-major
    w = _randn(70, 80)[:, ::2]
    assert not x.is_contiguous() and not w.is_contiguous()
    _assert_bitwise(widened_gemm_ops.widened_mm(x, w.t()), _widened_reference(x, w.t()))


@pytest.mark.parametrize("m, k, n", SHAPES)
@pytest.mark.parametrize("bias_shape", ["row", "one_row", "expanded", "full", "column"])
def test_widened_addmm_adds_the_bias_in_fp32_before_the_one_rounding(m, k, n, bias_shape):
    x, w, b = _randn(m, k, seed=1), _randn(n, k), _randn(n, seed=2)
    bias = {"row": b, "one_row": b[None], "expanded": b.expand(m, n), "full": _randn(m, n, seed=3),
            "column": _randn(m, 1, seed=4)}[bias_shape]
    _assert_bitwise(widened_gemm_ops.widened_addmm(bias, x, w.t()), _widened_reference(x, w.t(), bias))


def test_a_wide_output_takes_the_panels(monkeypatch):
    monkeypatch.setattr(panel_gemm_ops, "PANEL", 16)
    monkeypatch.setattr(panel_gemm_ops, "WIDE", 64)
    x, w, b = _randn(3, 24, seed=1), _randn(70, 24), _randn(70, seed=2)
    calls = []
    for name in ("panel_mm", "panel_addmm"):
        real = getattr(panel_gemm_ops, name)
        monkeypatch.setattr(panel_gemm_ops, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
    _assert_bitwise(widened_gemm_ops.widened_mm(x, w.t()), _widened_reference(x, w.t()))
    _assert_bitwise(widened_gemm_ops.widened_addmm(b, x, w.t()), _widened_reference(x, w.t(), b))
    assert calls == ["panel_mm", "panel_addmm"]
    widened_gemm_ops.widened_mm(x, w[:64].t())  # exactly WIDE: panels
    assert calls == ["panel_mm", "panel_addmm", "panel_mm"]
    widened_gemm_ops.widened_mm(x, w[:63].t())  # one column short of WIDE: one GEMM
    widened_gemm_ops.widened_addmm(b[:63], x, w[:63].t())
    assert calls == ["panel_mm", "panel_addmm", "panel_mm"]


def test_the_ops_through_the_dispatcher_and_as_fake_tensors():
    x, w, b = _randn(3, 24, seed=1), _randn(100, 24), _randn(100, seed=2)
    _assert_bitwise(torch.ops.inductor_ext.widened_mm(x, w.t()), _widened_reference(x, w.t()))
    _assert_bitwise(torch.ops.inductor_ext.widened_addmm(b, x, w.t()), _widened_reference(x, w.t(), b))
    with FakeTensorMode() as mode:
        fx, fw, fb = mode.from_tensor(x), mode.from_tensor(w), mode.from_tensor(b)
        for got in (torch.ops.inductor_ext.widened_mm(fx, fw.t()), torch.ops.inductor_ext.widened_addmm(fb, fx, fw.t())):
            assert got.shape == (3, 100) and got.dtype == BF16


# ----------------------------------------------------------------------------- the widened copy


def test_the_weight_is_widened_once_and_its_copy_dropped_with_it():
    cache = widened_gemm_ops._widened
    gc.collect()
    before = len(cache)
    w, x = _randn(24, 40), _randn(3, 40, seed=1)
    storage = w.untyped_storage()
    widened_gemm_ops.widened_mm(x, w.t())
    widened_gemm_ops.widened_mm(x[:1], w.t())  # another row count, a new view of the same weight
    assert len(cache[storage]) == 1 and len(cache) == before + 1
    (kept,) = cache[storage].values()
    assert kept.dtype == torch.float32 and torch.equal(kept, w.t().float())
    del w, storage, kept
    gc.collect()
    assert len(cache) == before  # no widened copy outlives its weight


def test_a_call_reads_the_kept_copy_instead_of_widening_again():
    w, x = _randn(24, 40), _randn(2, 40, seed=1)
    widened_gemm_ops.widened_mm(x, w.t())
    (kept,) = widened_gemm_ops._widened[w.untyped_storage()].values()
    kept.zero_()  # only a call that reads the kept copy sees this
    assert torch.equal(widened_gemm_ops.widened_mm(x, w.t()), torch.zeros(2, 24, dtype=BF16))


def test_with_no_share_of_memory_nothing_is_kept(monkeypatch):
    monkeypatch.setattr(widened_gemm_ops, "KEEP_SHARE", 0.0)
    w, x = _randn(24, 40), _randn(2, 40, seed=1)
    _assert_bitwise(widened_gemm_ops.widened_mm(x, w.t()), _widened_reference(x, w.t()))
    assert not widened_gemm_ops._widened[w.untyped_storage()]


def test_an_in_place_write_widens_the_weight_again():
    w, x = _randn(24, 40), _randn(2, 40, seed=1)
    widened_gemm_ops.widened_mm(x, w.t())
    w.mul_(-2)  # an optimizer step, a load_state_dict: the version counter moves
    _assert_bitwise(widened_gemm_ops.widened_mm(x, w.t()), _widened_reference(x, w.t()))
    assert len(widened_gemm_ops._widened[w.untyped_storage()]) == 1  # the stale copy went


def test_an_inference_tensor_weight_is_widened_every_call_never_kept():
    with torch.inference_mode():
        w = _randn(8, 16)
    x = _randn(2, 16, seed=1)
    _assert_bitwise(widened_gemm_ops.widened_mm(x, w.t()), _widened_reference(x, w.t()))
    assert w.untyped_storage() not in widened_gemm_ops._widened


# ------------------------------------------------------------------------------- where offered


def test_refused_for_fp32_or_a_weight_that_is_not_a_constant_with_the_reason():
    config = presets.resolve({"preset": "cpu"})
    with V.set_graph_handler(GraphLowering(torch.fx.symbolic_trace(lambda x: x))):
        assert aten_choices.widened_inputs(config, "mm", _mm(4, 8, 24)[0]) == (
            "dtypes float32, float32 (the widened GEMMs are offered for bfloat16)")
        assert aten_choices.widened_inputs(config, "mm", _mm(4, 8, 24, BF16)[0]) == (
            "the weight is not a constant (its fp32 copy is kept for a frozen weight only)")
        assert aten_choices.widened_inputs(config, "bmm", _mm(4, 8, 24, BF16)[0]) == (
            "op bmm (each widened GEMM serves mm, addmm)")
        assert aten_choices.widened_inputs(presets.resolve({"preset": "hopper"}), "mm",
                                           _mm(4, 8, 24, BF16)[0]) == "not the cpu preset"


class Block(torch.nn.Module):
    """A projection without a bias and a linear with one, in bf16."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(24, 40, bias=False)
        self.up = torch.nn.Linear(24, 48)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.head(x), self.up(x).relu()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A timed compile (one template config per problem) that writes its cache, then a cache-only
    compile from a copy whose GEMMs name the widened GEMMs as winners."""
    out = tmp_path_factory.mktemp("widened_gemm")
    torch.manual_seed(0)
    m, x = Block().to(BF16).eval(), _randn(5, 24, seed=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(policy.EFFORT_BUDGET, "full", 1)
        _, timed, _, _ = _compile(copy.deepcopy(m), x, {"autotune": "full", "autotune_cache": str(out / "timed.db")})
        forced = AutotuneCache(out / "forced.db")
        for entry in AutotuneCache(out / "timed.db").entries():
            forced.put(dataclasses.replace(entry, winner="aten", config={"name": f"ext_widened_{entry.key.op}"}))
        got, served, benchmarks, _ = _compile(copy.deepcopy(m), x, {
            "autotune": "cache-only", "autotune_cache": str(out / "forced.db"), "dump_dir": str(out / "dump")})
    with torch.no_grad():
        want = m(x)
    code = "\n".join(p.read_text() for p in (out / "dump").rglob("*.py"))
    return {"timed": timed, "served": served, "benchmarks": benchmarks, "got": got, "want": want, "code": code}


def test_the_timed_compile_times_the_widened_gemm_for_each_bf16_linear(compiled):
    gemms = [d for d in compiled["timed"] if d.op in ("mm", "addmm") and d.key is not None]
    assert sorted(d.op for d in gemms) == ["addmm", "mm"], compiled["timed"]
    for d in gemms:
        widened = [c for c in d.candidates if c["name"] == f"ext_widened_{d.op}"]
        assert len(widened) == 1 and widened[0]["kind"] == "aten", d.candidates
        assert widened[0]["time_us"] is not None and math.isfinite(widened[0]["time_us"]), d.candidates


def test_a_cache_naming_the_widened_gemms_serves_them_with_bf16_numbers(compiled):
    assert compiled["benchmarks"] == 0
    served = {d.op: d for d in compiled["served"] if d.winner.startswith("ext_widened_")}
    assert set(served) == {"mm", "addmm"} and all(d.reason == "cache" for d in served.values()), compiled["served"]
    assert "torch.ops.inductor_ext.widened_mm.default(" in compiled["code"]
    assert "torch.ops.inductor_ext.widened_addmm.default(" in compiled["code"]
    for got, want in zip(compiled["got"], compiled["want"]):
        assert got.dtype == BF16
        torch.testing.assert_close(got, want, rtol=2**-7, atol=2**-7)


def test_copies_past_the_memory_cap_serve_their_call_and_are_not_kept(monkeypatch):
    cache = widened_gemm_ops._widened
    gc.collect()
    kept_before = cache.nbytes()
    first, second, x = _randn(24, 40), _randn(24, 40, seed=3), _randn(2, 40, seed=1)
    monkeypatch.setattr(cache, "_keep_bytes", lambda: kept_before + 24 * 40 * 4)  # room for one copy
    _assert_bitwise(widened_gemm_ops.widened_mm(x, first.t()), _widened_reference(x, first.t()))
    _assert_bitwise(widened_gemm_ops.widened_mm(x, second.t()), _widened_reference(x, second.t()))
    assert first.untyped_storage() in cache and not cache[second.untyped_storage()]
    assert cache.nbytes() == kept_before + 24 * 40 * 4


def test_the_cap_is_a_share_of_the_machines_memory(monkeypatch):
    monkeypatch.setattr(widened_gemm_ops, "KEEP_SHARE", 0.5)
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert widened_gemm_ops.keep_bytes() == total // 2


@pytest.fixture(scope="module")
def borrowed(tmp_path_factory):
    """The untimed default compiling ``Block`` with symbolic rows (its head's output returned):
    first with no table, recording the keys looked up, then with a table holding those problems
    static and not returned, where ATen's op served and the widened GEMM ran in a fifth of its time
    (and, for the addmm, a second entry at twice its rows where it ran in a quarter)."""
    out = tmp_path_factory.mktemp("widened_borrowed")
    torch.manual_seed(0)
    m = Block().to(BF16).eval()
    asked = []
    real_get = decision_tables.TableSet.get

    def compile_dynamic(table):
        x = _randn(5, 24, seed=1)
        torch._dynamo.mark_dynamic(x, 0)
        return _compile(copy.deepcopy(m), x, {"preset": "cpu", "decision_tables": table})

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INDUCTOR_EXT_CACHE_DIR", str(out / "cache"))  # nothing decided earlier serves
        mp.setattr(decision_tables, "package_table_paths", lambda: [])
        mp.setattr(decision_tables.TableSet, "get",
                   lambda self, key, form: asked.append((key, form)) or real_get(self, key, form))
        _, untabled, _, _ = compile_dynamic(out / "none.json")
        entries = []
        def aten_won(key, widened_us):
            return Entry(key=key, winner="aten", config={"name": key.op}, winner_time_us=100.0, aten_time_us=100.0,
                         candidates=[{"name": key.op, "time_us": 100.0, "policy": None, "error": None},
                                     {"name": f"ext_widened_{key.op}", "time_us": widened_us, "policy": None,
                                      "error": None}])

        for key, form in asked:
            static = dataclasses.replace(decision_tables.portable(key, form), dynamic=(), returned=False)
            entries.append(aten_won(static, 20.0))
            if key.op == "addmm":
                bias, (rows, k), weight = static.shapes
                entries.append(aten_won(dataclasses.replace(static, shapes=(bias, (2 * rows, k), weight)), 25.0))
        (out / "table.json").write_text(decision_tables.table_text(entries, PROVENANCE))
        got, served, benchmarks, fn = compile_dynamic(out / "table.json")
        with torch.no_grad():
            seven = _randn(7, 24, seed=2)
            got7, want7 = fn(seven), m(seven)
    with torch.no_grad():
        want = m(_randn(5, 24, seed=1))
    return {"asked": asked, "untabled": untabled, "served": served, "benchmarks": benchmarks,
            "got": [*got, *got7], "want": [*want, *want7]}


def test_the_untimed_default_borrows_a_static_entrys_widened_gemm_for_symbolic_and_returned_gemms(borrowed):
    assert {(k.op, bool(k.dynamic), k.returned) for k, _ in borrowed["asked"]} >= {("mm", True, True),
                                                                                   ("addmm", True, False)}
    assert all(d.reason.startswith("model: ATen's default") for d in borrowed["untabled"]), borrowed["untabled"]
    gemms = {d.op: d for d in borrowed["served"] if d.op in ("mm", "addmm")}
    assert gemms["mm"].winner == "ext_widened_mm" and gemms["addmm"].winner == "ext_widened_addmm", gemms
    assert gemms["mm"].reason.startswith("model: ext_widened_mm, 5.00x faster than mm in the nearest table entry "
                                         "(one with an output not returned and static sizes)"), gemms["mm"].reason
    mean = math.exp((math.log(5.0) + math.log(4.0) / 4) / 1.25)  # weighted 1 and 1/4 (one doubling away)
    assert gemms["addmm"].reason.startswith(
        f"model: ext_widened_addmm, {mean:.2f}x faster than addmm on average in the 2 nearest table entries that "
        "timed it (the nearest with static sizes)"), gemms["addmm"].reason
    assert borrowed["benchmarks"] == 0
    assert all(c["time_us"] is None for d in gemms.values() for c in d.candidates)  # nothing timed
    for got, want in zip(borrowed["got"], borrowed["want"], strict=True):  # 5 rows, then 7 through the same graph
        assert got.dtype == BF16
        torch.testing.assert_close(got, want, rtol=2**-7, atol=2**-7)
