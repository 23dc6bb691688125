"""Conformance grid, generated from the registry: every preset whose template families can run on
CPU tensors (a ``CPU_EXECUTOR`` under ``interpret``, or ``RUNS_ON_CPU``) x every op those families
claim x, per family, one shape it accepts and one it refuses.

A case is drawn by hypothesis from one shape grid per op (decode M 1..4, prefill M 17/64/129, K
not a multiple of any tile, with and without bias, fp32/bf16/fp16 (fp64 for a dtype no GEMM
family takes), contiguous, sliced, transposed and 3-D inputs; a size the family tiles, at its
tiles' boundaries first: 1, block-1, block, block+1, 2*block+1 for each block its configs or
kernel use, ``tile_sizes``; the first case drawn, lcm(blocks)+1) until the family's own
``problem_for``/``refuse_problem`` says it accepts (or refuses) the op's inputs as eager sees them. The
case is then compiled through ``backend="ext"`` autotuned with the preset's families, where the
family must be offered (or not offered, with its reason in one log line), and, when accepted, once
more with ``force_template`` for it, so that the template itself runs; every compiled result
equals eager within a tolerance tied to its dtype.

Presets, families and ops come from the registry: a new family or op joins with no edit here
except, for a new op, its builder: one new file ``tests/conformance_ops/<op>.py`` (``_conformance_kit.py``
says what it defines; an op without one fails loudly). Each test
draws ``INDUCTOR_EXT_CONFORMANCE_EXAMPLES`` cases (default 1); derandomized, so a run is repeatable.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from dataclasses import dataclass, replace
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

import _conformance_kit as kit
from _logs import ext_log_lines
from inductor_ext import targets
from inductor_ext.kernels import (decode_attention_ops, norm_ops, nvfp4, nvfp4_ops, prefill_attention_ops,  # noqa: F401
                                  softmax_ops, topk_ops)
from inductor_ext.lowering import decision_record
from inductor_ext.templates import registry
from inductor_ext.templates.family import OpSpec

pytestmark = pytest.mark.conformance

_COUNT = itertools.count()  # a fresh autotune cache per compile: every compile benchmarks
EXAMPLES = int(os.environ.get("INDUCTOR_EXT_CONFORMANCE_EXAMPLES", "1"))
FP4 = torch.float4_e2m1fn_x2

# Tolerances of a compiled result against eager in its dtype: one rounding of the output plus a
# different summation order (inputs are scaled so outputs are O(1)); tight enough that a
# template computing in a narrower dtype than asked fails (bf16 for fp32 is off by ~4e-3).
TOLERANCES = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-9, atol=1e-9),
              torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
              torch.int64: dict(rtol=0, atol=0)}


# --------------------------------------------------------------------------- the grid


def cpu_executable(family: Any) -> bool:
    """Whether a family's kernels run on CPU tensors here (natively or in an executor)."""
    return family.runs_on_cpu or family.cpu_executor is not None


def grid() -> list[tuple[str, str, str]]:
    """(preset, op, family) for every preset, every CPU-executable family it enables, every op
    that family claims."""
    cases = []
    for preset, data in sorted(targets.presets().items()):
        for name in data["templates"]:
            family = registry.get(name)
            if cpu_executable(family) and data["target"] in family.targets:
                cases += [(preset, op, name) for op in family.ops]
    return sorted(cases)


GRID = grid()


# --------------------------------------------------------------------------- cases and builders


Case, Built, _tensor_spec, _spec, _rows, _last_dim_input = (kit.Case, kit.Built, kit.tensor_spec, kit.spec,
                                                           kit.rows, kit.last_dim_input)


def _linear(op: str, case: Case, freezing: bool) -> Built:
    """nn.Linear: mm without a bias, addmm with one (a 3-D input is viewed as [M, K])."""
    layer = torch.nn.Linear(case.k, case.n, bias=op == "addmm").to(case.dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(case.n, case.k) / case.k**0.5)
    x = _rows(case, case.k, case.dtype)
    with torch.no_grad():
        want = layer(x)
    x2 = x.reshape(-1, case.k) if x.dim() == 3 else x
    b = layer.weight.t()
    inputs = (layer.bias, x2, b) if op == "addmm" else (x2, b)
    scalars = {"alpha": 1, "beta": 1} if op == "addmm" else {}
    constants = (0, 2) if op == "addmm" else (1,)
    return Built(layer, (x,), want, _spec(op, inputs, want.reshape(-1, case.n), scalars,
                                          constants if freezing else ()))


def _bmm(case: Case, freezing: bool) -> Built:
    a = torch.randn(2, case.m, case.k).to(case.dtype)
    b = (torch.randn(2, case.n, case.k) / case.k**0.5).to(case.dtype).transpose(1, 2)
    if case.layout == "transposed":
        a = torch.randn(2, case.k, case.m).to(case.dtype).transpose(1, 2)
    elif case.layout != "3d":
        b = b.contiguous()
    want = torch.bmm(a, b)
    return Built(torch.bmm, (a, b), want, _spec("bmm", (a, b), want, {}))


_OUT = (torch.bfloat16, torch.float32, torch.float16)


def _scaled_mm(case: Case, freezing: bool) -> Built:
    """torch._scaled_mm, fp8 e4m3: tensor-wise or row-wise scales (variant), out dtype case.dtype."""
    out = case.dtype
    a = (torch.randn(case.m, case.k) * 2).to(torch.float8_e4m3fn)
    if case.layout == "sliced":
        a = (torch.randn(case.m, case.k + 16) * 2).to(torch.float8_e4m3fn)[:, :case.k]
    b = (torch.randn(case.n, case.k) * 2).to(torch.float8_e4m3fn).t()
    if case.variant % 2:
        sa, sb = torch.rand(case.m, 1) + 0.5, torch.rand(1, case.n) + 0.5
    else:
        sa, sb = torch.tensor(0.75), torch.tensor(1.25)
    sa = sa / case.k**0.5  # outputs O(1)
    bias = torch.randn(case.n).to(out) if case.bias else None

    def fn(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, bias: torch.Tensor | None):
        return torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out)

    want = fn(a, b, sa, sb, bias)
    return Built(fn, (a, b, sa, sb, bias), want, _spec("scaled_mm", (a, b, sa, sb, bias, None), want,
                                                        {"out_dtype": str(out).removeprefix("torch.")}))


def _nvfp4_gemm(case: Case, freezing: bool) -> Built:
    """inductor_ext::nvfp4_gemm (what the nvfp4_alpha_fold pass makes), out dtype case.dtype; K in
    whole 16-element scale blocks (the op's reference math takes no partial block), and alpha a
    0-d input (a static scale)."""
    k = -(-case.k // 16) * 16
    x, w = torch.randn(case.m, k), torch.randn(case.n, k) / k**0.5
    qa, qb = nvfp4.quantize_nvfp4(x), nvfp4.quantize_nvfp4(w)
    a, b = qa.qdata.view(FP4), qb.qdata.view(FP4).t()
    sa, sb = nvfp4.to_blocked(qa.scales), nvfp4.to_blocked(qb.scales)
    alpha = (qa.global_scale * qb.global_scale).float()
    bias = torch.randn(case.n).to(case.dtype) if case.bias else None
    activation = ("none", "relu", "silu")[case.variant % 3]
    args = (a, b, sa, sb, alpha, bias, activation, case.dtype, torch.float32)
    want = nvfp4_ops.reference(*args)
    return Built(torch.ops.inductor_ext.nvfp4_gemm, args, want, _spec(
        "nvfp4_gemm", (a, b, sa, sb, alpha, bias), want,
        {"activation": activation, "out_dtype": str(case.dtype).removeprefix("torch.")}))


def _grouped_mm(case: Case, freezing: bool) -> Built:
    """torch._grouped_mm: [rows, K] x [G, K, N] (w.transpose(-2, -1)) with offs, one group empty."""
    a = _rows(replace(case, layout="sliced" if case.layout == "sliced" else "contiguous"), case.k, case.dtype)
    w = (torch.randn(3, case.n, case.k) / case.k**0.5).to(case.dtype)
    b = w.transpose(-2, -1)
    if case.layout == "transposed":
        b = b.contiguous()
    cut = case.m // 2
    offs = torch.tensor([cut, cut, case.m], dtype=torch.int32)
    ref = torch._grouped_mm(a, b, offs=offs)  # raises where torch has no kernel (rows not 16-byte aligned)
    return Built(lambda a, b, offs: torch._grouped_mm(a, b, offs=offs), (a, b, offs), ref,
                 _spec("grouped_mm", (a, b, offs, None), ref, {"out_dtype": str(case.dtype).removeprefix("torch.")}))


def _softmax(case: Case, freezing: bool) -> Built:
    """inductor_ext::softmax over the last dimension (what vocab_softmax makes), rows of 64..4096."""
    n = (64, 1536, 4099)[case.variant % 3]
    x = _last_dim_input(case, n)
    out = torch.float32 if case.bias else None  # the .float() upcast folded in, or not
    want = torch.softmax(x, -1, dtype=out)
    # the spec a family sees: lowering makes x contiguous first (lowering/ops/softmax.py), so a
    # sliced input never reaches a family as such
    return Built(torch.ops.inductor_ext.softmax, (x, -1, out), want, _spec(
        "softmax", (x.contiguous(),), want, {"dim": -1, "out_dtype": str(want.dtype).removeprefix("torch.")}))


def _rms_norm(case: Case, freezing: bool) -> Built:
    x = _last_dim_input(case, case.n)
    w = torch.randn(case.n).to(case.dtype) if case.bias else None
    eps = norm_ops.default_eps(case.dtype)
    want = torch.rms_norm(x, [case.n], w, eps)
    return Built(torch.ops.inductor_ext.rms_norm, (x, w, [case.n], eps), want, _spec(
        "rms_norm", (x, w), want, {"normalized_shape": [case.n], "eps": eps}))


def _topk(case: Case, freezing: bool) -> Built:
    """inductor_ext::topk_indices over the last dimension; compared by the values they select."""
    n = case.n * 4
    x = _last_dim_input(case, n)
    k = (1, 8, 65)[case.variant % 3] if n >= 65 else min(8, n)
    want = torch.topk(x, k, -1).indices

    def compare(got: torch.Tensor, want: torch.Tensor) -> None:
        # equal values may come in another order (ext's rule: lowest index first)
        torch.testing.assert_close(torch.gather(x, -1, got), torch.gather(x, -1, want), rtol=0, atol=0)

    return Built(torch.ops.inductor_ext.topk_indices, (x, k, -1, True, True), want, _spec(
        "topk", (x,), want, {"k": k, "dim": -1, "largest": True, "sorted": True}), compare=compare)


def _decode_attention(case: Case, freezing: bool) -> Built:
    """inductor_ext::decode_attention: batch M, 4 query heads over 2 key/value heads, one query
    token (two in variant 2 and 5: not decode), K cached tokens, head dim 16, or 64 in variants 3-5
    (the head dims ``cpp.flash_attention`` takes start at 32); in variants 1 and 4 a static cache's
    boolean mask (each sequence sees its first few keys)."""
    tokens, d = 2 if case.variant % 3 == 2 else 1, 64 if case.variant >= 3 else 16
    q = torch.randn(case.m, 4, tokens, d).to(case.dtype)
    k, v = (torch.randn(case.m, 2, case.k, d).to(case.dtype) for _ in range(2))
    mask = None
    if case.variant % 3 == 1:
        written = torch.arange(case.m).view(case.m, 1, 1, 1) % case.k + 1
        mask = torch.arange(case.k).view(1, 1, 1, case.k) < written
    want = decode_attention_ops.decode_attention(q, k, v, mask, 0.25)
    return Built(torch.ops.inductor_ext.decode_attention, (q, k, v, mask, 0.25), want, _spec(
        "decode_attention", (q, k, v, mask), want, {"scale": 0.25}))


def _prefill_attention(case: Case, freezing: bool) -> Built:
    """inductor_ext::prefill_attention: batch 1 or 2, 4 query heads over 2 key/value heads, K query
    tokens over K keys in Hugging Face's layout (transposed views); head dim 64, or 16 in variant 5
    (refused); a causal boolean mask (variants 0-1), none (2), a per-sequence mask hiding the last
    keys of the second sequence (3) or an additive one (4, refused)."""
    batch, d, tokens = 1 + case.m % 2, 16 if case.variant == 5 else 64, case.k
    q = torch.randn(batch, tokens, 4, d).to(case.dtype).transpose(1, 2)
    k, v = (torch.randn(batch, tokens, 2, d).to(case.dtype).transpose(1, 2) for _ in range(2))
    causal = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    mask = {0: causal, 1: causal[None, None], 2: None,
            3: causal & (torch.arange(tokens) < tokens - torch.arange(batch).view(batch, 1, 1, 1)),
            4: torch.zeros(tokens, tokens).masked_fill(~causal, float("-inf")).to(case.dtype)}.get(case.variant, causal)
    scale = d ** -0.5
    want = prefill_attention_ops.prefill_attention(q, k, v, mask, scale)
    return Built(torch.ops.inductor_ext.prefill_attention, (q, k, v, mask, scale), want, _spec(
        "prefill_attention", (q, k, v, mask), want, {"scale": scale}))


def _prefill_attention_causal(case: Case, freezing: bool) -> Built:
    """inductor_ext::prefill_attention with SDPA's is_causal flag (no mask), aligned top-left: batch 1
    or 2, 4 query heads over 2 key/value heads, Hugging Face's layout; K queries over K keys, or
    over 2K keys (variant 1: each query sees only the first keys), or 2K queries over K keys
    (variant 2: the later ones see every key); head dim 64, or 16 in variant 5 (refused)."""
    batch, d = 1 + case.m % 2, 16 if case.variant == 5 else 64
    queries, keys = {1: (case.k, 2 * case.k), 2: (2 * case.k, case.k)}.get(case.variant, (case.k, case.k))
    q = torch.randn(batch, queries, 4, d).to(case.dtype).transpose(1, 2)
    k, v = (torch.randn(batch, keys, 2, d).to(case.dtype).transpose(1, 2) for _ in range(2))
    scale = d ** -0.5
    want = prefill_attention_ops.prefill_attention(q, k, v, None, scale, True)
    return Built(torch.ops.inductor_ext.prefill_attention, (q, k, v, None, scale, True), want, _spec(
        "prefill_attention_causal", (q, k, v, None), want, {"scale": scale}))


# Op name (templates' OPS, lowering/ops/) -> how to build one case of it: these, and one file per op in
# tests/conformance_ops/ (``_conformance_kit.op_modules``), where a new op's builder goes.
BUILDERS: dict[str, Callable[[Case, bool], Built]] = {
    "mm": lambda case, freezing: _linear("mm", case, freezing),
    "addmm": lambda case, freezing: _linear("addmm", case, freezing),
    "bmm": _bmm, "scaled_mm": _scaled_mm, "nvfp4_gemm": _nvfp4_gemm, "grouped_mm": _grouped_mm,
    "softmax": _softmax, "rms_norm": _rms_norm, "topk": _topk, "decode_attention": _decode_attention,
    "prefill_attention": _prefill_attention, "prefill_attention_causal": _prefill_attention_causal,
}
_OWN_FILES = kit.op_modules()
assert not set(_OWN_FILES) & set(BUILDERS), f"ops built both here and in {kit.OPS_FOLDER}: {set(_OWN_FILES) & set(BUILDERS)}"
BUILDERS.update({op: module.build for op, module in _OWN_FILES.items()})

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
# Per op: the dtypes drawn (GEMMs also fp64, which no GEMM family takes; the out dtype of the
# scaled GEMMs).
_DTYPES = {op: _FLOATS + (torch.float64,) for op in ("mm", "addmm", "bmm", "scaled_mm", "nvfp4_gemm")}
_DTYPES.update({op: tuple(module.DTYPES) for op, module in _OWN_FILES.items() if hasattr(module, "DTYPES")})


# Which drawn sizes a family's tiles apply to, per op (Case field -> config fields naming the tile):
# a GEMM's M, N and K; the rows of an op over the last dim (no tile of a row's length: topk's rows
# are 4n long, softmax's come from its variant). A builder's own file may say so for its op
# (``TILED``). Prefill attention's tokens (Case.k) are tiled by the kernel's query and key blocks
# (``tile_sizes``).
_ROWS = {"m": kit.TILE_FIELDS["m"]}
TILED: dict[str, dict[str, tuple[str, ...]]] = {
    **{op: kit.TILE_FIELDS for op in ("mm", "addmm", "bmm", "scaled_mm", "nvfp4_gemm", "grouped_mm")},
    **{op: _ROWS for op in ("rms_norm", "softmax", "topk")},
}
TILED.update({op: module.TILED for op, module in _OWN_FILES.items() if hasattr(module, "TILED")})
_TOKENS_TILED = ("prefill_attention", "prefill_attention_causal")


@functools.lru_cache(maxsize=None)
def tile_sizes(preset: str, op: str, family_name: str) -> dict[str, tuple[int, ...]]:
    """Per drawn size (Case field), the tile sizes of ``family_name`` along it on the preset's
    target: the fields ``TILED`` names in its configs (``all_configs`` and what ``configs`` gives
    for a decode and a prefill case of the op in each dtype drawn), and for prefill attention the
    kernel's query and key blocks. Empty for a family with no tiles: its draws stay the plain ones."""
    family = registry.get(family_name)
    fields = TILED.get(op, {})
    found = list(family.all_configs)
    freezing = bool(targets.presets()[preset].get("freezing", False))
    with torch.random.fork_rng():
        for m, dtype in itertools.product((1, 64), _DTYPES.get(op, _FLOATS) if fields else ()):
            try:
                built = BUILDERS[op](Case(m, 40, 64, dtype, "contiguous", op == "addmm", 0), freezing)
            except (RuntimeError, NotImplementedError):
                continue
            problem = family.problem_for(built.spec)
            if not isinstance(problem, str) and family.refuse_problem(problem) is None:
                found += family.configs(problem, targets.presets()[preset]["target"])
    tiles = kit.config_tiles(found, fields)
    if op in _TOKENS_TILED and hasattr(family.module, "KERNEL"):
        tiles["k"] = set(kit.kernel_blocks(family.module.KERNEL))
    return {dim: tuple(sorted(sizes)) for dim, sizes in tiles.items() if sizes}


@st.composite
def cases(draw: Any, op: str, tiles: dict[str, tuple[int, ...]] | None = None) -> Case:
    """One case of ``op``; a size the family tiles (``tiles``, from ``tile_sizes``) is drawn at
    its tiles' boundaries first (``kit.boundary_sizes``), then among the plain sizes."""
    tiles = tiles or {}
    return Case(
        m=draw(st.sampled_from(kit.boundary_sizes(tiles.get("m", ()), (1, 2, 3, 4, 17, 64, 129)))),
        n=draw(st.sampled_from(kit.boundary_sizes(tiles.get("n", ()), (24, 40, 8)))),
        k=draw(st.sampled_from(kit.boundary_sizes(tiles.get("k", ()), (64, 37, 48, 16)))),
        dtype=draw(st.sampled_from(_DTYPES.get(op, _FLOATS))),
        layout=draw(st.sampled_from(("contiguous", "3d", "sliced", "transposed"))),
        bias=op == "addmm" if op in ("mm", "addmm") else draw(st.booleans()),
        variant=draw(st.integers(0, 5)),
    )


def refusal(family: Any, spec: OpSpec) -> str | None:
    """The family's own reason to refuse ``spec`` (problem_for, then refuse_problem), else None."""
    problem = family.problem_for(spec)
    return problem if isinstance(problem, str) else family.refuse_problem(problem)


# --------------------------------------------------------------------------- compiling


@dataclass
class Compiled:
    got: Any
    decisions: list[decision_record.Decision]
    lines: list[str]


def compile_and_run(built: Built, options: dict[str, Any], cache: str) -> Compiled:
    torch._dynamo.reset()
    # timed, as every preset but cpu (whose default serves untimed: autotune="model") does by default
    options = {"autotune": "quick", **options, "interpret": True, "autotune_cache": cache,
               "inductor": {"fx_graph_cache": False}}
    first = len(decision_record.decisions)
    with ext_log_lines() as lines, torch.no_grad():
        got = torch.compile(built.fn, backend="ext", options=options)(*built.args)
    torch._dynamo.reset()
    return Compiled(got, decision_record.decisions[first:], lines)


def check_numbers(built: Built, got: Any, what: str) -> None:
    if built.compare is not None:
        built.compare(got, built.want)
        return
    assert got.dtype == built.want.dtype, f"{what}: dtype {got.dtype}, eager {built.want.dtype}"
    torch.testing.assert_close(got, built.want, **TOLERANCES[built.want.dtype], msg=lambda m: f"{what}: {m}")


def family_candidates(decision: decision_record.Decision, family: str) -> list[dict[str, Any]]:
    return [c for c in decision.candidates if c["family"] == family]


# --------------------------------------------------------------------------- the tests


def test_every_op_a_family_claims_has_a_builder():
    """A new op must come with its builder here: a grid that silently skipped it would prove nothing."""
    missing = sorted({op for _, op, _ in GRID} - set(BUILDERS))
    assert not missing, f"no conformance builder for op(s) {missing}: add tests/conformance_ops/<op>.py (see {kit.__file__})"


def test_sizes_a_family_tiles_are_drawn_at_its_tiles_boundaries():
    """The tiles come from the families themselves (a renamed config field or kernel constant
    must not quietly drop the boundaries), and every boundary of each is among the sizes drawn."""
    for preset, op, family_name in GRID:
        tiles = tile_sizes(preset, op, family_name)
        for dim, blocks in tiles.items():
            drawn = kit.boundary_sizes(blocks, ())
            want = {s for b in blocks for s in (1, b - 1, b, b + 1, 2 * b + 1) if 1 <= s <= kit.LARGEST_BOUNDARY}
            assert want <= set(drawn), (preset, op, family_name, dim, drawn)
            first = math.lcm(*blocks) + 1
            assert drawn[0] == (first if first <= kit.LARGEST_BOUNDARY else max(want))
    assert set(tile_sizes("cpu", "mm", "cpp.gemm")) == {"m", "n", "k"}
    assert set(tile_sizes("hopper", "mm", "triton.gemm")) == {"m", "n", "k"}
    assert set(tile_sizes("xpu", "mm", "sycl.gemm")) == {"m", "n", "k"}
    assert set(tile_sizes("gfx950", "rms_norm", "helion.rmsnorm")) == {"m"}
    assert tile_sizes("cpu", "prefill_attention_causal", "cpp.flash_attention") == {"k": (32, 64)}
    assert tile_sizes("cpu", "decode_attention", "cpp.decode_attention") == {}  # no tiles: the plain draws
    assert kit.boundary_sizes((), (1, 2, 3)) == (1, 2, 3)


def test_the_grid_covers_every_preset_with_a_cpu_executor():
    presets = {preset for preset, _, _ in GRID}
    expected = {p for p, data in targets.presets().items()
                if any(cpu_executable(registry.get(f)) and data["target"] in registry.get(f).targets
                       for f in data["templates"])}
    assert presets == expected and {"cpu", "hopper", "blackwell", "gfx1250", "mps", "xpu"} <= presets


@pytest.mark.parametrize("want", ["accepted", "refused"])
@pytest.mark.parametrize("preset, op, family_name", GRID, ids=["-".join(c) for c in GRID])
@settings(derandomize=True, max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
          report_multiple_bugs=False,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_conformance(preset: str, op: str, family_name: str, want: str, data: Any, tmp_path: Any,
                     interpreter: None) -> None:
    builder = BUILDERS.get(op)
    assert builder is not None, f"no conformance builder for op {op!r}: add one to BUILDERS"
    family = registry.get(family_name)
    missing = family.refuse_here() if family.refuse_here is not None else None
    if want == "accepted" and missing:
        pytest.skip(f"{family_name} cannot run on this machine: {missing}")
    freezing = bool(targets.presets()[preset].get("freezing", False))
    case = data.draw(cases(op, tile_sizes(preset, op, family_name)), label="case")
    torch.manual_seed(0)
    try:
        built = builder(case, freezing)
    except (RuntimeError, NotImplementedError) as e:  # eager has no kernel for this combination
        assume(False)
        raise AssertionError from e
    reason = refusal(family, built.spec)
    assume((reason is None) == (want == "accepted"))

    # autotuned, with the preset's families
    cache = str(tmp_path / f"autotune-{next(_COUNT)}.db")  # fresh: the first compile benchmarks
    run = compile_and_run(built, {"preset": preset}, cache)
    what = f"{preset} {op} {case} autotuned"
    check_numbers(built, run.got, what)
    decisions = [d for d in run.decisions if d.op == op]
    # Inductor decomposes some shapes before lowering (a CPU bmm or mm with one row becomes a
    # pointwise product and a sum): no family is asked, so the case says nothing here
    assume(decisions)
    offered = any(family_candidates(d, family_name) for d in decisions)
    refused_lines = [line for line in run.lines if line.startswith(f"ext: {family_name} not offered for ")]
    if want == "refused":
        assert not offered, f"{what}: {family_name} was offered though it refuses: {reason}"
        assert len(refused_lines) == len(decisions), (
            f"{what}: expected one 'ext: {family_name} not offered' line per {op}, got {refused_lines}")
        assert all(" (here: " in line or " (problem: " in line for line in refused_lines)  # the family, not a config
        # ATen's choice won, or another family's (``decode_attention`` has two)
        assert all(d.winner in {c["name"] for c in d.candidates if c["family"] != family_name} for d in decisions)
        return
    assert offered and not refused_lines, f"{what}: {family_name} accepts but was not offered: {refused_lines}"
    dropped = [line for line in run.lines if line.startswith(f"ext: dropped {family_name} ")]
    assert not dropped, f"{what}: candidates of {family_name} failed: {dropped}"

    # forced, as a user debugging it would (same cache, which now holds the autotuned winner):
    # the template itself runs
    forced = compile_and_run(built, {"preset": preset, "force_template": family_name}, cache)
    what = f"{preset} {op} {case} force_template={family_name}"
    dropped = [line for line in forced.lines if line.startswith(f"ext: dropped {family_name} ")]
    assert not dropped, f"{what}: candidates of {family_name} failed: {dropped}"
    for d in (d for d in forced.decisions if d.op == op):
        assert d.reason == f"force_template={family_name}", f"{what}: {d.winner} won ({d.reason})"
    check_numbers(built, forced.got, what)
