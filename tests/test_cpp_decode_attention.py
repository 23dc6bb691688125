"""The cpu preset's decode attention (``templates/cpp/decode_attention.py``, ``kernels/decode_attention.py``,
``lowering/ops/decode_attention.py``, ``lowering/subgraph.py``, ``lowering/passes/decode_attention_op.py``).

- the family as data: problems, refusals, configs;
- the kernel (plain torch) against the attention reference on odd shapes, fp32 and bf16;
- the pass: which SDPA calls become the op, on graphs Dynamo captured (no Inductor);
- compiled through ext: numerics against the reference with the family forced, timed against
  ATen, inlined into Inductor's fused kernels, dumps naming the family and config; a build that
  stores real decisions and a ``cache-only`` compile that reuses them with zero benchmarks.

Each graph is compiled once per module (fixtures), with Inductor's caches fresh.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

from inductor_ext import dumps, presets, tune
from inductor_ext.autotune.cache import AutotuneCache
from inductor_ext.kernels import decode_attention as kernel
from inductor_ext.kernels.attention import attention_reference
from inductor_ext.kernels.decode_attention_ops import OP
from inductor_ext.lowering import decision_record
from inductor_ext.lowering.passes.decode_attention_op import DecodeAttentionOp
from inductor_ext.templates import registry
from inductor_ext.templates.cpp import decode_attention as family
from inductor_ext.templates.family import OpSpec, TensorSpec

# fp32 in, fp32 accumulation: the reference's own rounding; bf16 in and out: bf16's rounding
FP32_TOL = {"rtol": 1e-5, "atol": 1e-5}
BF16_TOL = {"rtol": 2**-8, "atol": 2**-9}


def _tensor(shape, dtype="float32", stride=None):
    return TensorSpec(shape, stride or tuple(torch.empty(shape).stride()), dtype)


def _spec(q, k, v, dtype="float32", scale=0.125, device="cpu", mask=None, mask_dtype="bool"):
    out = (q[0], q[1], q[2], v[3])
    inputs = (_tensor(q, dtype), _tensor(k, dtype), _tensor(v, dtype), mask and _tensor(mask, mask_dtype))
    return OpSpec("decode_attention", inputs, _tensor(out, dtype), {"scale": scale}, device)


# ------------------------------------------------------------------------- the family as data


def test_family_follows_the_protocol_and_claims_the_cpu_only():
    assert registry.get("cpp.decode_attention").module is family
    assert family.CHOICE_KIND == "inductor_template" and family.TARGETS == ("cpu",) and family.RUNS_ON_CPU
    assert family.FORMS == kernel.FORMS  # the family names the kernel's forms without importing torch


def test_cpu_preset_offers_it_with_its_pass():
    config = presets.resolve({"preset": "cpu"})
    assert "cpp.decode_attention" in config.templates and "decode_attention_op" in config.passes


def test_problem_for_a_grouped_query_decode_step():
    problem = family.problem_for(_spec((3, 4, 1, 48), (3, 2, 37, 48), (3, 2, 37, 32), "bfloat16"))
    assert problem == family.DecodeAttentionProblem(3, 4, 2, 37, 48, 32, "bfloat16", 0.125)
    assert family.configs(problem, "cpu") == [family.DecodeAttentionConfig("fp32_reductions")]


def test_problem_for_names_the_kind_of_mask():
    q, k, v = (3, 4, 1, 48), (3, 2, 37, 48), (3, 2, 37, 32)
    assert family.problem_for(_spec(q, k, v, mask=(3, 1, 1, 37))).mask == "bool"  # a static cache's
    assert family.problem_for(_spec(q, k, v, "bfloat16", mask=(4, 1, 37), mask_dtype="bfloat16")).mask == "additive"
    assert family.problem_for(_spec(q, k, v, "bfloat16", mask=(37,), mask_dtype="float32")).mask == "additive"
    assert family.problem_for(_spec(q, k, v)).mask == "none"


@pytest.mark.parametrize("spec, why", [
    (_spec((3, 4, 1, 16), (3, 2, 9, 16), (3, 2, 9, 16), mask=(3, 1, 2, 9)), "does not broadcast to (3, 4, 1, 9)"),
    (_spec((3, 4, 1, 16), (3, 2, 9, 16), (3, 2, 9, 16), mask=(2, 1, 1, 9)), "does not broadcast"),
    (_spec((3, 4, 1, 16), (3, 2, 9, 16), (3, 2, 9, 16), mask=(1, 3, 4, 1, 9)), "does not broadcast"),
    (_spec((3, 4, 1, 16), (3, 2, 9, 16), (3, 2, 9, 16), mask=(3, 1, 1, 9), mask_dtype="int64"), "dtype int64"),
    (_spec((1, 2, 5, 16), (1, 2, 9, 16), (1, 2, 9, 16)), "5 query tokens"),
    (_spec((1, 3, 1, 16), (1, 2, 9, 16), (1, 2, 9, 16)), "not a multiple of key/value heads"),
    (_spec((1, 2, 1, 16), (1, 2, 9, 16), (1, 2, 9, 16), "float64"), "dtype float64 not in"),
    (_spec((1, 2, 1, 16), (1, 2, 9, 16), (1, 2, 8, 16)), "do not fit together"),
    (_spec((1, 2, 1, 16), (1, 2, 9, 16), (1, 2, 9, 16), device="cuda"), "serves CPU tensors, not cuda"),
    (dataclasses.replace(_spec((1, 2, 1, 16), (1, 2, 9, 16), (1, 2, 9, 16)), op="softmax"), "not softmax"),
])
def test_problem_for_refuses_with_a_reason(spec, why):
    reason = family.problem_for(spec)
    assert isinstance(reason, str) and why in reason, reason


def test_a_spec_without_a_mask_input_is_unmasked():
    spec = _spec((1, 2, 1, 16), (1, 2, 9, 16), (1, 2, 9, 16))
    assert family.problem_for(dataclasses.replace(spec, inputs=spec.inputs[:3])).mask == "none"


@pytest.mark.parametrize("sizes", [dict(batch=0), dict(length=0), dict(head_dim=0), dict(value_dim=0)],
                         ids=lambda d: next(iter(d)))
def test_an_empty_problem_is_refused(sizes):
    problem = dataclasses.replace(family.DecodeAttentionProblem(1, 2, 2, 9, 16, 16, "float32", 0.125), **sizes)
    reason = family.refuse_problem(problem)
    assert reason is not None and reason.startswith("empty problem"), reason


def test_configs_refuse_other_targets():
    problem = family.problem_for(_spec((1, 2, 1, 16), (1, 2, 9, 16), (1, 2, 9, 16)))
    with pytest.raises(ValueError, match="target 'mps' is not one of"):
        family.configs(problem, "mps")


# ----------------------------------------------------------------------------- the kernel itself


def _qkv(b, hq, hkv, length, d, dv, dtype=torch.float32, seed=0):
    """q, and k/v as the first ``length`` positions of a larger KV cache (not contiguous)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, 1, hq, d, generator=g).transpose(1, 2)  # (B, Hq, 1, D) from (B, 1, Hq, D)
    k = torch.randn(b, hkv, length + 7, d, generator=g)[:, :, :length]
    v = torch.randn(b, hkv, length + 7, dv, generator=g)[:, :, :length]
    return q.to(dtype), k.to(dtype), v.to(dtype)


SHAPES = [(1, 2, 2, 1, 48, 48), (1, 6, 6, 37, 48, 48), (3, 4, 2, 130, 64, 32), (2, 6, 1, 17, 16, 16)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_kernel_matches_the_reference_fp32(shape):
    q, k, v = _qkv(*shape)
    scale = shape[4] ** -0.5
    got = kernel.decode_attention(q, k, v, scale)
    assert got.dtype == torch.float32 and got.is_contiguous() and got.shape == (*q.shape[:3], v.shape[3])
    torch.testing.assert_close(got, attention_reference(q, k, v), **FP32_TOL)


@pytest.mark.parametrize("shape", SHAPES[1:3], ids=lambda s: "x".join(map(str, s)))
def test_kernel_matches_an_fp32_reference_in_bf16(shape):
    q, k, v = _qkv(*shape, dtype=torch.bfloat16)
    got = kernel.decode_attention(q, k, v, shape[4] ** -0.5)
    assert got.dtype == torch.bfloat16
    want = attention_reference(q.float(), k.float(), v.float())
    torch.testing.assert_close(got.float(), want, **BF16_TOL)


@pytest.mark.parametrize("masked", [False, True], ids=["none", "bool"])
def test_decomposition_computes_the_problems_attention_at_its_scale(masked):
    q, k, v = _qkv(2, 4, 2, 37, 16, 16)
    mask = _static_cache_mask(2, 37, [5, 37])
    problem = family.DecodeAttentionProblem(2, 4, 2, 37, 16, 16, "float32", 0.3, "bool" if masked else "none")
    function, kwargs = family.decomposition(problem, family.DecodeAttentionConfig())
    got = function(q, k, v, mask, **kwargs) if masked else function(q, k, v, **kwargs)
    want = attention_reference(q.double(), k.double(), v.double(), scale=0.3,
                               mask_mod=(lambda b, h, i, j: mask[b, 0, i, j]) if masked else None)
    torch.testing.assert_close(got.double(), want, **FP32_TOL)


def _static_cache_mask(b, length, written):
    """(B, 1, 1, L) boolean: sequence i sees the first ``written[i]`` slots of its cache."""
    return torch.arange(length).view(1, 1, 1, length) < torch.tensor(written).view(b, 1, 1, 1)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, FP32_TOL), (torch.bfloat16, BF16_TOL)], ids=["fp32", "bf16"])
def test_kernel_applies_a_static_caches_boolean_mask(dtype, tol):
    q, k, v = _qkv(3, 4, 2, 130, 64, 32, dtype)
    mask = _static_cache_mask(3, 130, [1, 77, 130])
    got = kernel.decode_attention(q, k, v, 0.125, mask=mask)
    want = attention_reference(q.float(), k.float(), v.float(), scale=0.125, mask_mod=lambda b, h, i, j: mask[b, 0, i, j])
    torch.testing.assert_close(got.float(), want, **tol)
    # the masked slots count for nothing: the same as attending to the written ones alone
    alone = kernel.decode_attention(q[1:2], k[1:2, :, :77], v[1:2, :, :77], 0.125)
    torch.testing.assert_close(got[1:2].float(), alone.float(), **tol)


def test_kernel_adds_a_per_head_float_mask():
    q, k, v = _qkv(2, 6, 3, 37, 48, 48)
    bias = torch.randn(2, 6, 1, 37)
    bias[0, 1, 0, 5:] = float("-inf")
    got = kernel.decode_attention(q, k, v, 0.2, mask=bias)
    want = attention_reference(q, k, v, scale=0.2, score_mod=lambda s, b, h, i, j: s + bias[b, h, i, j])
    torch.testing.assert_close(got, want, **FP32_TOL)


def test_a_query_that_sees_no_key_gives_zeros_as_atens_sdpa():
    q, k, v = _qkv(3, 4, 2, 17, 16, 16)
    mask = _static_cache_mask(3, 17, [5, 0, 17])
    additive = torch.zeros(3, 1, 1, 17).masked_fill(~mask, float("-inf"))
    for m in (mask, additive):
        got = kernel.decode_attention(q, k, v, 0.25, mask=m)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.25, enable_gqa=True)
        assert torch.equal(got[1], torch.zeros_like(got[1])) and torch.equal(want[1], torch.zeros_like(want[1]))
        torch.testing.assert_close(got, want, **FP32_TOL)
    nan_q = q.clone()
    nan_q[2, 0, 0, 0] = float("nan")  # a NaN still propagates: only a query with no key is zeroed
    got = kernel.decode_attention(nan_q, k, v, 0.25, mask=mask)
    assert got[2, 0].isnan().all() and got[2, 1:].isfinite().all()


def test_op_takes_the_mask_as_atens_sdpa():
    q, k, v = _qkv(3, 4, 2, 130, 64, 32)
    mask = _static_cache_mask(3, 130, [1, 77, 130])
    got = OP(q, k, v, mask, 0.3)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3, enable_gqa=True)
    assert got.stride() == torch.empty(got.shape).stride()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_op_is_atens_sdpa_with_contiguous_output():
    q, k, v = _qkv(3, 4, 2, 130, 64, 32)
    got = OP(q, k, v, None, 0.3)
    want = F.scaled_dot_product_attention(q, k, v, scale=0.3, enable_gqa=True)
    assert got.stride() == torch.empty(got.shape).stride()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_kernel_refuses_what_it_cannot_compute():
    q, k, v = _qkv(1, 3, 2, 5, 16, 16)
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        kernel.decode_attention(q, k, v, 0.25)
    q, k, v = _qkv(1, 2, 2, 5, 16, 16)
    with pytest.raises(ValueError, match="one query token"):
        kernel.decode_attention(q.expand(1, 2, 2, 16), k, v, 0.25)
    with pytest.raises(ValueError, match="form 'bf16' is not one of"):
        kernel.decode_attention(q, k, v, 0.25, form="bf16")


# ---------------------------------------------------------------------------------- the pass


def _captured(fn, *args):
    """The graph Dynamo captures for ``fn`` (pre-grad, with example values), not compiled."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=keep, fullgraph=True)(*args)
    return graphs[0]


def _rewrites(fn, *args, options=None):
    gm = _captured(fn, *args)
    pass_ = DecodeAttentionOp(presets.resolve({"preset": "cpu", **(options or {})}))
    count = pass_.run(gm.graph)
    ops = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert (OP in ops) == (count > 0)
    return count


def test_pass_rewrites_a_decode_step():
    q, k, v = _qkv(1, 6, 6, 37, 48, 48)
    with torch.no_grad():
        assert _rewrites(lambda q, k, v: F.scaled_dot_product_attention(q, k, v) * 2, q, k, v) == 1
        assert _rewrites(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.5, is_causal=False), q, k, v) == 1
        assert _rewrites(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=1), q, k, v) == 1


def test_pass_rewrites_grouped_query_attention_with_enable_gqa():
    q, k, v = _qkv(3, 4, 2, 13, 64, 32)
    with torch.no_grad():
        assert _rewrites(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), q, k, v) == 1


def test_pass_rewrites_a_static_cache_step_with_its_mask():
    q, k, v = _qkv(2, 4, 2, 13, 64, 32)
    mask = _static_cache_mask(2, 13, [3, 13])
    with torch.no_grad():
        assert _rewrites(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
                         q, k, v, mask) == 1
        assert _rewrites(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m.float(), enable_gqa=True),
                         q, k, v, mask) == 1  # positional, additive


@pytest.mark.parametrize("case", ["causal", "dropout", "prefill", "grad", "autotune off", "float64"])
def test_pass_keeps_atens_sdpa_where_the_op_would_differ_or_cannot_pay_off(case):
    q, k, v = _qkv(1, 2, 2, 9, 16, 16)
    kwargs, options, grad = {}, None, False
    if case == "causal":
        kwargs = {"is_causal": True}  # aligned top-left: one causal query sees only the first key
    elif case == "dropout":
        kwargs = {"dropout_p": 0.1}
    elif case == "prefill":
        q = torch.randn(1, 2, 4, 16)
    elif case == "grad":
        q.requires_grad_(True)
        grad = True
    elif case == "autotune off":
        options = {"autotune": "off"}
    elif case == "float64":
        q, k, v = q.double(), k.double(), v.double()
    with torch.set_grad_enabled(grad):
        assert _rewrites(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs), q, k, v,
                         options=options) == 0


# ------------------------------------------------------------------------- compiled through ext


class Decode(torch.nn.Module):
    """Three decode attentions over KV caches: multi-head, grouped-query with a narrower value
    head, and a single cached token."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.register_buffer("k1", torch.randn(1, 6, 64, 48, generator=g))
        self.register_buffer("v1", torch.randn(1, 6, 64, 48, generator=g))
        self.register_buffer("k2", torch.randn(3, 2, 160, 64, generator=g))
        self.register_buffer("v2", torch.randn(3, 2, 160, 32, generator=g))

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q1 = x1.view(1, 1, 6, 48).transpose(1, 2)
        a = F.scaled_dot_product_attention(q1, self.k1[:, :, :37], self.v1[:, :, :37])
        q2 = x2.view(3, 1, 4, 64).transpose(1, 2)
        b = F.scaled_dot_product_attention(q2, self.k2[:, :, :130], self.v2[:, :, :130], enable_gqa=True)
        c = F.scaled_dot_product_attention(q1, self.k1[:, :, :1], self.v1[:, :, :1], scale=0.3)
        return a.transpose(1, 2).reshape(1, -1) + 1, b * 2, c


def _inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(4)
    return torch.randn(1, 288, generator=g).to(dtype), torch.randn(3, 256, generator=g).to(dtype)


def _reference(m, args):
    """The model with each attention computed by the fp32 reference."""
    m = copy.deepcopy(m).float()
    x1, x2 = (a.float() for a in args)
    q1 = x1.view(1, 1, 6, 48).transpose(1, 2)
    a = attention_reference(q1, m.k1[:, :, :37], m.v1[:, :, :37])
    q2 = x2.view(3, 1, 4, 64).transpose(1, 2)
    b = attention_reference(q2, m.k2[:, :, :130], m.v2[:, :, :130])
    c = attention_reference(q1, m.k1[:, :, :1], m.v1[:, :, :1], scale=0.3)
    return a.transpose(1, 2).reshape(1, -1) + 1, b * 2, c


def _compile(m, options, *calls):
    """``m`` compiled through ext with Inductor's caches fresh and called with each argument tuple
    of ``calls`` in turn: the outputs, the decisions made and the benchmarks run."""
    options = {"autotune": "quick", **options}  # the timed path (the cpu preset's default times nothing)
    torch._dynamo.reset()
    counters.clear()
    first = len(decision_record.decisions)
    with tune.fresh_inductor_caches(), torch.no_grad():
        compiled = torch.compile(m, backend="ext", options=options)
        outs = [compiled(*args) for args in calls]
    return outs, decision_record.decisions[first:], counters["inductor"]["select_algorithm_autotune"]


def _code(dump_dir):
    return "\n".join(p.read_text() for p in dump_dir.rglob("output_code.py"))


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def forced(request, tmp_path_factory):
    dtype = getattr(torch, request.param)
    out = tmp_path_factory.mktemp(f"decode_attention_{request.param}")
    m, args = Decode().to(dtype), _inputs(dtype)
    (got,), decisions, _ = _compile(m, {"force_template": "cpp.decode_attention", "dump_dir": str(out)}, args)
    return {"dtype": dtype, "got": got, "want": _reference(m, args), "decisions": decisions,
            "index": dumps.read_index(out), "code": _code(out)}


def test_forced_kernel_matches_the_reference(forced):
    tol = FP32_TOL if forced["dtype"] == torch.float32 else BF16_TOL
    for got, want in zip(forced["got"], forced["want"]):
        assert got.dtype == forced["dtype"]
        torch.testing.assert_close(got.float(), want, **tol)


def test_forced_kernel_was_timed_against_aten_and_serves_every_attention(forced):
    decisions = [d for d in forced["decisions"] if d.op == "decode_attention"]
    assert len(decisions) == 3
    for d in decisions:
        assert d.reason == "force_template=cpp.decode_attention", d
        timed = {c["kind"]: c for c in d.candidates if c["time_us"] is not None}
        assert set(timed) == {"aten", "template"} and timed["template"]["name"] == d.winner, d.candidates
        assert timed["template"]["config_dict"] == {"form": "fp32_reductions"}


def test_winning_kernel_is_inlined_into_inductors_code(forced):
    # no call of the op or of ATen's attention: its reductions are Inductor's C++ loops
    assert "extern_kernels.decode_attention_aten(" not in forced["code"]
    assert "scaled_dot_product" not in forced["code"] and "cpp_fused" in forced["code"]
    # inlined: its loops are the graph's, not a subgraph function of the wrapper that calls them apart
    assert "def cpp_decode_attention" not in forced["code"]


def test_dump_names_the_family_and_config_of_the_fused_kernels(forced):
    served = [k for k in forced["index"]["kernels"] if k["template"] == "cpp.decode_attention"]
    assert len(served) >= 1, [(k["kernel"], k["template"]) for k in forced["index"]["kernels"]]
    assert {k["decision"]["winner"] for k in served} <= {d.winner for d in forced["decisions"]}
    for k in served:
        assert k["language"] == "cpp" and k["config"] == {"form": "fp32_reductions"}
        assert k["file"] and any(loc.endswith(f"test_cpp_decode_attention.py:{_line('a = F.scaled')}")
                                 or loc.endswith(f"test_cpp_decode_attention.py:{_line('b = F.scaled')}")
                                 or loc.endswith(f"test_cpp_decode_attention.py:{_line('c = F.scaled')}")
                                 for loc in k["user_source"]), k["user_source"]


class StaticCacheDecode(torch.nn.Module):
    """Decode steps over a static KV cache, the mask made in the graph from each sequence's
    position as Hugging Face's static cache makes it: grouped-query attention with a boolean
    mask, and multi-head attention with a per-head float bias added (ALiBi-like)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.register_buffer("k", torch.randn(3, 2, 48, 64, generator=g))
        self.register_buffer("v", torch.randn(3, 2, 48, 32, generator=g))
        self.register_buffer("bias", torch.randn(1, 4, 1, 48, generator=g))

    def masks(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seen = torch.arange(48, device=pos.device).view(1, 1, 1, 48) <= pos.view(-1, 1, 1, 1)
        return seen, self.bias.to(self.k.dtype).masked_fill(~seen, float("-inf"))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = x.view(3, 1, 4, 64).transpose(1, 2)
        seen, bias = self.masks(pos)
        a = F.scaled_dot_product_attention(q, self.k, self.v, attn_mask=seen, enable_gqa=True)
        b = F.scaled_dot_product_attention(q, self.k.repeat_interleave(2, 1), self.v.repeat_interleave(2, 1),
                                           attn_mask=bias)
        return a * 2, b


def _static_reference(m, x, pos):
    m = copy.deepcopy(m).float()
    seen, bias = m.masks(pos)
    q = x.float().view(3, 1, 4, 64).transpose(1, 2)
    a = attention_reference(q, m.k, m.v, mask_mod=lambda b, h, i, j: seen[b, 0, i, j])
    b = attention_reference(q, m.k, m.v, score_mod=lambda s, b, h, i, j: s + bias[b, h, i, j])
    return a * 2, b


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def static_cache(request, tmp_path_factory):
    """The family forced on both masked attentions, called at two sets of positions."""
    dtype = getattr(torch, request.param)
    out = tmp_path_factory.mktemp(f"static_cache_{request.param}")
    m = StaticCacheDecode().to(dtype)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(6)).to(dtype)
    positions = torch.tensor([0, 20, 47]), torch.tensor([5, 46, 1])
    got, decisions, _ = _compile(m, {"force_template": "cpp.decode_attention", "dump_dir": str(out)},
                                 *((x, p) for p in positions))
    return {"dtype": dtype, "got": got, "want": [_static_reference(m, x, p) for p in positions],
            "decisions": decisions, "code": _code(out), "frames": counters["stats"]["unique_graphs"]}


def test_static_cache_masks_match_the_reference_at_every_position(static_cache):
    tol = FP32_TOL if static_cache["dtype"] == torch.float32 else BF16_TOL
    for got, want in zip(static_cache["got"], static_cache["want"]):
        for g, w in zip(got, want):
            assert g.dtype == static_cache["dtype"]
            torch.testing.assert_close(g.float(), w, **tol)
    assert static_cache["frames"] == 1  # new positions are new data, not a recompile


def test_static_cache_attentions_are_timed_against_aten_and_inlined(static_cache):
    decisions = [d for d in static_cache["decisions"] if d.op == "decode_attention"]
    assert len(decisions) == 2
    for d in decisions:
        timed = {c["kind"] for c in d.candidates if c["time_us"] is not None}
        assert timed == {"aten", "template"} and d.reason == "force_template=cpp.decode_attention", d
    assert sorted(len(d.problem["shapes"]) for d in decisions) == [4, 4]  # the mask is an input of each
    assert "extern_kernels.decode_attention_aten(" not in static_cache["code"]
    assert "scaled_dot_product" not in static_cache["code"] and "cpp_fused" in static_cache["code"]


def _line(text):
    return next(i for i, line in enumerate(open(__file__).read().splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """An autotuning compile into a fresh cache, then a cache-only compile from a copy in which
    the grouped-query attention's and the one-key attention's winner is ATen and the other's the
    template."""
    out = tmp_path_factory.mktemp("decode_attention_cache")
    m, args = Decode(), _inputs()
    _, tuned, benchmarks = _compile(m, {"autotune_cache": str(out / "tuned.db")}, args)
    mixed = AutotuneCache(out / "mixed.db")
    for entry in AutotuneCache(out / "tuned.db").entries():
        if entry.key.op != "decode_attention":
            continue
        aten = entry.key.shapes[0][0] == 3 or entry.key.shapes[1][2] == 1  # grouped-query, one key
        mixed.put(dataclasses.replace(entry, winner="aten" if aten else "cpp.decode_attention",
                                      config={"name": "decode_attention_aten"} if aten else {"form": "fp32_reductions"}))
    (got,), cached, cached_benchmarks = _compile(copy.deepcopy(m), {
        "autotune": "cache-only", "autotune_cache": str(out / "mixed.db"), "dump_dir": str(out / "dump")}, args)
    return {"tuned": tuned, "benchmarks": benchmarks, "cache": AutotuneCache(out / "tuned.db"), "got": got,
            "want": _reference(m, args), "cached": cached, "cached_benchmarks": cached_benchmarks,
            "code": _code(out / "dump")}


def test_build_stores_a_timed_decision_per_attention(built):
    entries = [e for e in built["cache"].entries() if e.key.op == "decode_attention"]
    assert len(entries) == 3 and built["benchmarks"] >= 3
    for e in entries:
        timed = {c["name"] for c in e.candidates if c["time_us"] is not None}
        assert "decode_attention_aten" in timed and any(n.startswith("cpp_decode_attention") for n in timed), e
        assert e.winner in ("aten", "cpp.decode_attention")
        # or, on a machine busy enough that the OS set ATen's time, flagged and not compared (issue 29)
        disturbed = e.reason.startswith("fallback: every timed")
        assert (e.aten_time_us is None) is disturbed and (e.winner == "aten" or not disturbed), e
        assert e.key.arch == "cpu" and e.key.preset == "cpu"


def test_cache_only_compile_benchmarks_nothing_and_serves_each_cached_winner(built):
    assert built["cached_benchmarks"] == 0
    attention = [d for d in built["cached"] if d.op == "decode_attention"]
    assert sorted((d.problem["shapes"][0][0], d.reason, d.winner.split("_")[0]) for d in attention) == [
        (1, "cache", "cpp"), (1, "cache", "decode"), (3, "cache", "decode")]
    for got, want in zip(built["got"], built["want"]):
        torch.testing.assert_close(got, want, **FP32_TOL)


def test_where_aten_wins_the_graph_holds_what_inductor_makes_of_sdpa_not_exts_python_op(built):
    """ATen's choice is timed as ext's op (Python around ATen's SDPA: ~25 us a call); served, it
    is the user's SDPA call lowered as Inductor lowers it: ATen's flash kernel called as an ATen op
    (the multi-head one), Inductor's decomposition of SDPA's math (the grouped-query one)."""
    assert "decode_attention_aten(" not in built["code"]
    assert built["code"].count("torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(") == 1


class MaskedStep(torch.nn.Module):
    """A decode step whose cache length and padding mask come in as inputs (a dynamic cache
    with left padding): the length becomes symbolic the second time it changes."""

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(64, 4 * 16)

    def forward(self, x, k, v, mask):
        q = self.q(x).view(x.shape[0], 1, 4, 16).transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def _masked_step_inputs(length, g):
    x, k, v = torch.randn(2, 64, generator=g), torch.randn(2, 2, length, 16, generator=g), \
        torch.randn(2, 2, length, 16, generator=g)
    mask = torch.rand(2, 1, 1, length, generator=g) > 0.3
    mask[1] = False  # the second sequence sees no key: zeros, as ATen's SDPA
    return x, k, v, mask


def test_a_masked_step_of_symbolic_length_is_served_and_right_at_every_length():
    m = MaskedStep().eval()
    g = torch.Generator().manual_seed(7)
    calls = [_masked_step_inputs(length, g) for length in (9, 17, 40, 5)]
    outs, made, _ = _compile(m, {"force_template": "cpp.decode_attention"}, *calls)
    for got, args in zip(outs, calls):
        with torch.no_grad():
            torch.testing.assert_close(got, m(*args), **FP32_TOL)
        assert torch.equal(got[1], torch.zeros_like(got[1]))
    decisions = [d for d in made if d.op == "decode_attention"]
    assert len(decisions) == 2 and all(d.winner.startswith("cpp_decode_attention") for d in decisions)
    assert any(d.problem.get("dynamic") for d in decisions), [d.problem for d in decisions]
    assert {d.problem["dtype"] for d in decisions} == {"float32"}  # the attention's, not its mask's
