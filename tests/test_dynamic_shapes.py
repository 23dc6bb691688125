"""Dynamic shapes (issue 29): graphs with symbolic sizes keep ext's template choices.

torch.compile marks a dimension dynamic the second time it changes (here at once, with
``mark_dynamic``); Inductor then lowers GEMMs whose sizes are symbols. ext describes them to the
families with their size hints (what Inductor's max-autotune tunes on) and marks which dims are
symbolic: a family whose kernels take sizes at run time (cpp.gemm through Inductor's C++ template,
cpp.decode_attention, triton.gemm) serves them, one that builds kernels for fixed sizes (an extern
family) is refused with one log line and ATen serves. The autotune cache keys a dynamic decision
apart from the static one at the same sizes.

``backed_size_oblivious`` lets the one dynamic graph admit size 1 too (Dynamo otherwise
recompiles for it), so the sizes checked here all run the same kernels. Each graph is compiled
once per module.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch
import torch.fx.experimental._config as fx_config
import torch.nn.functional as F
from torch._dynamo.utils import counters

import _fake_extern_family as fake
from inductor_ext import tune
from inductor_ext.autotune import policy
from inductor_ext.autotune.cache import AutotuneCache, Entry, ProblemKey
from inductor_ext.lowering import decision_record
from inductor_ext.lowering import refusals
from inductor_ext.templates import registry
from inductor_ext.templates.cpp import gemm as cpp_gemm
from inductor_ext.templates.family import OpSpec, TensorSpec
from inductor_ext.templates.triton import gemm as triton_gemm

HINT = 6  # the size the dynamic graph is compiled (and tuned) at
SIZES = (HINT, 1, 11, 2)  # 1 and an odd size, all through the same graph
TOL = {"rtol": 1e-5, "atol": 1e-5}  # fp32: a bf16 or fp16 slip is off by 1e-3 or more


class Step(torch.nn.Module):
    """A prefill MLP over x's rows (symbolic M), a static GEMM beside it, and a decode attention
    over the first ``len(pos)`` cached keys (a symbolic length of its own: a cache of one key is
    another graph, as Dynamo guards a view's strides on it)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 24)  # addmm, symbolic M
        self.down = torch.nn.Linear(24, 8, bias=False)  # mm, symbolic M
        self.query = torch.nn.Linear(16, 4)  # addmm on 4 rows: static inside the dynamic graph
        g = torch.Generator().manual_seed(5)
        self.register_buffer("k", torch.randn(1, 2, 32, 8, generator=g))
        self.register_buffer("v", torch.randn(1, 2, 32, 8, generator=g))

    def forward(self, x: torch.Tensor, y: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.down(F.relu(self.up(x)))
        q = self.query(y).view(1, 2, 1, 8)
        n = pos.shape[0]
        return h, F.scaled_dot_product_attention(q, self.k[:, :, :n], self.v[:, :, :n])


def _args(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n rows, and a cache length of n + 4 (the attention's hint is 10)."""
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 16, generator=g), torch.randn(4, 16, generator=g), torch.arange(n + 4)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _run(m: torch.nn.Module, options: dict, sizes: tuple[int, ...]) -> dict:
    """Compile ``m`` with a symbolic row count (hint HINT: the first size) and call it at every
    size; the decisions and log lines are the first compile's, ``graphs`` counts the compiles."""
    torch._dynamo.reset()
    counters.clear()
    first, lines = len(decision_record.decisions), _Lines()
    log = logging.getLogger("inductor_ext.autotune")
    log.addHandler(lines)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        with tune.fresh_inductor_caches(), torch.no_grad(), fx_config.patch(backed_size_oblivious=True):
            compiled = torch.compile(m, backend="ext", options=options)
            got, want, graphs = {}, {}, {}
            for n in sizes:
                args = _args(n)
                if n == sizes[0]:
                    torch._dynamo.mark_dynamic(args[0], 0)
                    torch._dynamo.mark_dynamic(args[-1], 0)
                got[n], want[n] = compiled(*args), m(*args)
                graphs[n] = counters["stats"]["unique_graphs"]
                if n == sizes[0]:
                    log.removeHandler(lines)
                    decisions = decision_record.decisions[first:]
    finally:
        log.removeHandler(lines)
        log.setLevel(level)
    return {"got": got, "want": want, "decisions": decisions, "log": lines.lines, "graphs": graphs}


@pytest.fixture(scope="module")
def with_fake_family():
    """tests/_fake_extern_family.py found as if it were a file in templates/ (an extern family:
    its kernels are built for the problem's sizes)."""
    families = dict(registry.families())
    families[fake.NAME] = fake.FAMILY
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry, "families", lambda: families)
        mp.setitem(policy.EFFORT_BUDGET, "quick", 1)  # Inductor's own micro-kernel and one more: fewer builds
        yield


@pytest.fixture(scope="module")
def cpu(with_fake_family, tmp_path_factory):
    """The cpu preset, its templates forced (so the kernels checked are ext's), the fake extern
    family enabled beside them."""
    torch.manual_seed(0)
    m = Step().eval()
    options = {"preset": "cpu", "autotune": "quick", "templates": ["cpp.gemm", "cpp.decode_attention", fake.NAME],
               "force_template": ["cpp.gemm", "cpp.decode_attention"],
               "autotune_cache": str(tmp_path_factory.mktemp("dynamic") / "cache.db")}
    return _run(m, options, SIZES)


def _by_op(decisions, op, dynamic):
    return [d for d in decisions if d.op == op and ("dynamic" in d.problem) == dynamic]


def test_dynamic_graph_offers_and_chooses_ext_templates(cpu):
    """a595f81 refused every family here ("dynamic shapes are not supported yet"): ATen only."""
    for op in ("addmm", "mm"):
        (d,) = [d for d in cpu["decisions"] if d.op == op and d.problem["shapes"][-2][0] == HINT]  # at the hint
        timed = [c for c in d.candidates if c["kind"] == "template" and c["time_us"] is not None]
        assert timed and all(c["family"] == "cpp.gemm" for c in timed), (d.reason, d.candidates)
        assert d.reason.startswith("force_template=cpp.gemm") and d.winner.startswith("cpp_"), d
        assert d.problem["dynamic"] == ([[], [0], []] if op == "addmm" else [[0], []]), d.problem


def test_decode_attention_over_a_symbolic_length_is_ext_s(cpu):
    (d,) = _by_op(cpu["decisions"], "decode_attention", dynamic=True)
    assert d.problem["dynamic"] == [[], [2], [2]], d.problem  # the cached keys' and values' length
    assert d.winner.startswith("cpp_decode_attention"), d.candidates


def test_one_graph_serves_every_size_and_matches_eager(cpu):
    assert cpu["graphs"] == {n: 1 for n in SIZES}  # 1 and 11 ran the graph compiled at 6: no recompile
    for n in SIZES:
        for got, want in zip(cpu["got"][n], cpu["want"][n]):
            assert got.dtype == want.dtype == torch.float32 and got.shape == want.shape
            torch.testing.assert_close(got, want, **TOL, msg=lambda m: f"{n} rows: {m}")


def test_static_gemm_inside_the_dynamic_graph_keeps_ext_s_choice(cpu):
    (d,) = _by_op(cpu["decisions"], "addmm", dynamic=False)
    assert d.problem["shapes"][-2] == [4, 16] and d.key.dynamic == (), d.problem
    assert d.winner.startswith("cpp_"), d.candidates


def test_extern_family_refuses_symbolic_sizes_with_one_line(cpu):
    refused = [line for line in cpu["log"] if line.startswith(f"ext: {fake.NAME} not offered")]
    assert len(refused) == 2, cpu["log"]  # the two GEMMs with a symbolic M
    assert all("input 1 dim 0 (hint 6)" in line or "input 0 dim 0 (hint 6)" in line for line in refused), refused
    assert all("symbolic (dynamic shapes): ATen serves every size" in line
               for line in refused), refused
    # the static GEMM was offered to it as ever
    (static,) = _by_op(cpu["decisions"], "addmm", dynamic=False)
    assert any(c["family"] == fake.NAME for c in static.candidates), static.candidates


def test_dynamic_decision_is_keyed_apart_from_the_static_one(cpu, tmp_path):
    (d,) = _by_op(cpu["decisions"], "addmm", dynamic=True)
    key = d.key
    assert key.dynamic == ((), (0,), ()) and key.shapes[1] == (HINT, 16)
    static = dataclasses.replace(key, dynamic=())
    assert static.digest() != key.digest() and static != key
    assert "dynamic" not in static.to_dict()  # static keys read as before the field existed
    assert ProblemKey.from_dict(key.to_dict()) == key
    assert key.describe().startswith("addmm ~6x24x16"), key.describe()  # ~: tuned at the hint
    cache = AutotuneCache(tmp_path / "c.db")
    cache.put(Entry(key=static, winner="aten", config={"name": "addmm"}, winner_time_us=1.0, aten_time_us=1.0,
                    candidates=[], reason="benchmark", device_name="cpu"))
    assert cache.get(key) is None and cache.get(static) is not None
    with pytest.raises(ValueError, match="names dims the shapes"):
        dataclasses.replace(key, dynamic=((), (2,), ()))


@pytest.fixture(scope="module")
def extern_only(with_fake_family):
    """Only the extern family enabled: the symbolic GEMMs fall back to ATen."""
    torch.manual_seed(0)

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(16, 24)

        def forward(self, x: torch.Tensor, y: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            return F.relu(self.up(x)) + y.sum() + pos.shape[0]

    options = {"preset": "cpu", "templates": [fake.NAME], "autotune": "quick"}
    return _run(Mlp().eval(), options, (HINT, 1, 7))


def test_refused_family_leaves_aten_serving_every_size(extern_only):
    (d,) = extern_only["decisions"]
    assert d.winner == "addmm" and d.reason.startswith(f"fallback: {fake.NAME} builds its kernels for fixed sizes")
    assert d.key is None  # nothing was timed, nothing is cached
    assert extern_only["graphs"] == {HINT: 1, 1: 1, 7: 1}
    for n in (HINT, 1, 7):
        torch.testing.assert_close(extern_only["got"][n], extern_only["want"][n], **TOL)


class SliceOfSymbolicWidth(torch.nn.Module):
    """A Linear over a static-size slice (4 x 2) of a tensor whose width is symbolic: the GEMM's
    sizes are static, its input's row stride is not."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # 4 x (len(pos) + 2), contiguous: wide enough for the slice whatever len(pos) is
        wide = torch.outer(torch.arange(4.0), torch.cat([torch.ones(2), pos.float()])) + 1
        return self.lin(wide[:, :2])


@pytest.fixture(scope="module")
def symbolic_stride(with_fake_family):
    torch.manual_seed(0)
    options = {"preset": "cpu", "templates": [fake.NAME], "force_template": fake.NAME}
    return _run(SliceOfSymbolicWidth().eval(), options, (HINT, 3, 9))


def test_a_symbolic_stride_is_refused_like_a_symbolic_size(symbolic_stride):
    """A kernel built for the hinted row stride (12) would read the wrong rows at every other
    width: the extern family is refused, even forced, and ATen serves."""
    (d,) = symbolic_stride["decisions"]
    assert d.winner == "addmm", (d.winner, d.reason)
    assert d.reason == (f"fallback: {fake.NAME} builds its kernels for fixed sizes and input 1 stride 0 (hint 12) "
                        "is symbolic (dynamic shapes): ATen serves every size"), d.reason
    for n in (HINT, 3, 9):
        torch.testing.assert_close(symbolic_stride["got"][n], symbolic_stride["want"][n], **TOL)


# ---------------------------------------------------------------- the families' word, as data


def _mm(a_shape, b_shape, a_dynamic=(), b_dynamic=(), b_constant=True, op="mm"):
    a = TensorSpec(a_shape, tuple(torch.empty(a_shape).stride()), "float32", dynamic=a_dynamic)
    b = TensorSpec(b_shape, tuple(torch.empty(b_shape).stride()), "float32", b_constant, dynamic=b_dynamic)
    out_shape = (*a_shape[:-1], b_shape[-1])
    out = TensorSpec(out_shape, tuple(torch.empty(out_shape).stride()), "float32", dynamic=a_dynamic[:-1] + (False,)
                     if a_dynamic else ())
    return OpSpec(op, (a, b), out, {}, "cpu")


def test_cpp_gemm_takes_a_symbolic_m_and_batch_but_not_n_or_k():
    assert isinstance(cpp_gemm.problem_for(_mm((7, 16), (16, 8), a_dynamic=(True, False))), cpp_gemm.CppGemmProblem)
    bmm = _mm((3, 5, 16), (3, 16, 8), a_dynamic=(True, True, False), b_dynamic=(True, False, False), b_constant=False,
              op="bmm")
    assert isinstance(cpp_gemm.problem_for(bmm), cpp_gemm.CppGemmProblem)
    scores = _mm((3, 5, 16), (3, 16, 8), a_dynamic=(False, False, True), b_dynamic=(False, True, True),
                 b_constant=False, op="bmm")
    why = cpp_gemm.problem_for(scores)
    assert isinstance(why, str) and why.startswith("K and N symbolic"), why


def test_families_that_build_for_fixed_sizes_are_refused_symbolic_dims():
    spec = _mm((7, 16), (16, 8), a_dynamic=(True, False))
    why = refusals.problem(fake.FAMILY, spec)
    assert isinstance(why, refusals.Refusal) and why.stage == "problem" and why.reason == (f"{fake.NAME} builds its kernels for fixed sizes and input 0 dim 0 (hint 7) is symbolic "
                   "(dynamic shapes): ATen serves every size"), why
    # static: its own problem_for decides
    assert not isinstance(refusals.problem(fake.FAMILY, _mm((7, 16), (16, 8))), refusals.Refusal)
    for name in ("cpp.gemm", "cpp.decode_attention", "triton.gemm"):  # they leave sizes open: asked themselves
        got = refusals.problem(registry.get(name), spec)
        assert not isinstance(got, refusals.Refusal) or "symbolic (dynamic shapes)" not in got.reason, name


def test_triton_gemm_masks_k_when_k_is_symbolic():
    problem = triton_gemm.problem_for(_mm((7, 64), (64, 8), a_dynamic=(True, True), b_dynamic=(True, False)))
    assert problem.k_dynamic
    config = triton_gemm.GemmConfig(32, 32, 32)
    assert triton_gemm.constexprs(problem, config)["EVEN_K"] is False  # 64 % 32 == 0 at the hint only
    assert triton_gemm.constexprs(dataclasses.replace(problem, k_dynamic=False), config)["EVEN_K"] is True


@pytest.fixture(scope="module")
def triton_interpreted():
    """triton.gemm in the hopper preset's interpret mode, M and K symbolic, K's hint a multiple of
    every tile's BLOCK_K."""
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    options = {"preset": "hopper", "interpret": True, "force_template": "triton.gemm", "autotune": "quick"}
    got, want = {}, {}
    with tune.fresh_inductor_caches(), torch.no_grad(), fx_config.patch(backed_size_oblivious=True):
        compiled = torch.compile(lambda a, b: a @ b, backend="ext", options=options)
        for m, k in ((HINT, 64), (1, 33), (11, 7), (3, 96)):
            g = torch.Generator().manual_seed(m * k)
            a, b = torch.randn(m, k, generator=g), torch.randn(k, 24, generator=g)
            if m == HINT:
                torch._dynamo.mark_dynamic(a, 0)
                torch._dynamo.mark_dynamic(a, 1)
                torch._dynamo.mark_dynamic(b, 0)
            got[(m, k)], want[(m, k)] = compiled(a, b), a @ b
    return {"got": got, "want": want, "decisions": decision_record.decisions[first:]}


def test_triton_gemm_serves_symbolic_m_and_k_in_the_interpreter(triton_interpreted):
    (d,) = triton_interpreted["decisions"]
    assert d.problem["dynamic"] == [[0, 1], [0]] and d.winner.startswith("triton_"), d
    for size, got in triton_interpreted["got"].items():
        torch.testing.assert_close(got, triton_interpreted["want"][size], **TOL, msg=lambda m: f"{size}: {m}")
