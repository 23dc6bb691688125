"""The cpu preset's prefill attention (``templates/cpp/flash_attention.py`` and its ``.cpp``,
``runtime/cpu_library.py``, ``kernels/prefill_attention_ops.py``, ``lowering/ops/prefill_attention.py``,
``lowering/passes/prefill_attention_op.py``).

- the family as data: problems, refusals, the rendered source;
- the kernel against float64 SDPA on odd shapes, masks and layouts, fp32 and bf16;
- the build: once per source, beside its source, a missing compiler named;
- the pass: which SDPA calls become the op, on graphs Dynamo captured (no Inductor);
- compiled through ext: numerics with the family forced and timed against ATen.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from _conformance_kit import kernel_blocks
from _pre_grad import pre_grad_graph
from inductor_ext import presets, tune
from inductor_ext.kernels.prefill_attention_ops import OP
from inductor_ext.lowering import decision_record
from inductor_ext.lowering.passes.prefill_attention_op import PrefillAttentionOp
from inductor_ext.runtime import cpu_library, toolchain
from inductor_ext.templates import registry
from inductor_ext.templates.cpp import flash_attention as family
from inductor_ext.templates.family import OpSpec, TensorSpec

TOL = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.bfloat16: {"rtol": 1.6e-2, "atol": 1.6e-2}}
needs = {dtype: pytest.mark.skipif(family.host_refusal(name) is not None,
                                   reason=f"this CPU cannot run the {name} kernel "
                                          f"({family.host_refusal(name)}); ATen's SDPA serves prefill here")
         for dtype, name in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16"))}

# The best form of the fp32 kernel this CPU runs (the AVX-512 one would die of SIGILL on an AVX2 host)
HOST_FP32 = family.Config(family.host_forms("float32")[0]) if family.host_forms("float32") else None


def _each_form(dtype: torch.dtype, name: str) -> list:
    """One param per form of the kernel, each skipped (saying why) where this CPU does not run it."""
    return [pytest.param(dtype, family.Config(form), id=f"{name}-{form}",
                         marks=pytest.mark.skipif(form not in family.host_forms(name),
                                                  reason=f"this CPU does not run the {form} kernel for {name}"))
            for form in family.FORMS]


EVERY_FORM = _each_form(torch.float32, "float32") + _each_form(torch.bfloat16, "bfloat16")


def _spec_of(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))


def _spec(q, k, v, mask=None, scale=0.125, device="cpu", is_causal=False):
    out = torch.empty(*q.shape[:3], v.shape[3], dtype=q.dtype)
    inputs = (_spec_of(q), _spec_of(k), _spec_of(v), None if mask is None else _spec_of(mask))
    op = "prefill_attention_causal" if is_causal else "prefill_attention"
    return OpSpec(op, inputs, _spec_of(out), {"scale": scale}, device)


def _hf(batch, tokens, heads, d, dtype=torch.float32):
    """q, k or v as Hugging Face hands them to SDPA: (batch, heads, tokens, d) views of (batch, tokens, heads, d)."""
    return torch.randn(batch, tokens, heads, d).to(dtype).transpose(1, 2)


def _causal(lq, lk):
    return torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)


# ------------------------------------------------------------------------- the family as data


def test_cpu_preset_offers_it_with_its_pass():
    config = presets.resolve({"preset": "cpu"})
    assert "cpp.flash_attention" in config.templates and "prefill_attention_op" in config.passes
    assert registry.get("cpp.flash_attention").module is family
    assert family.CHOICE_KIND == "extern" and family.TARGETS == ("cpu",) and family.RUNS_ON_CPU


@needs[torch.float32]
def test_problem_for_a_hugging_face_prefill():
    q, k = _hf(2, 100, 4, 64), _hf(2, 100, 2, 64)
    problem = family.problem_for(_spec(q, k, k, _causal(100, 100)[None, None]))
    assert problem == family.Problem(2, 4, 2, 100, 100, 64, 64, "float32", 0.125, "bool")
    assert family.problem_for(_spec(q, k, k)).mask == "none"


@pytest.mark.parametrize("case, why", [
    ("additive mask", "an additive one stays ATen's"),
    ("head dim 80", "head dims 80 (q, k) and 80 (v)"),
    ("value dim 32", "head dims 64 (q, k) and 32 (v)"),
    ("float16", "dtype float16 not in"),
    ("strided last dim", "last stride of 1"),
    ("mask shape", "does not broadcast"),
    ("heads", "not a multiple of key/value heads"),
    ("mps", "serves CPU tensors"),
])
def test_problem_for_refuses_with_a_reason(case, why):
    d, dv, dtype, device = 64, 64, torch.float32, "cpu"
    d = 80 if case == "head dim 80" else d
    dv = 32 if case == "value dim 32" else d
    dtype = torch.float16 if case == "float16" else dtype
    q, k, v = _hf(1, 9, 6 if case == "heads" else 4, d, dtype), _hf(1, 9, 4, d, dtype), _hf(1, 9, 4, dv, dtype)
    mask = _causal(9, 9)
    if case == "additive mask":
        mask = torch.zeros(9, 9).masked_fill(~mask, float("-inf"))
    elif case == "mask shape":
        mask = torch.ones(9, 5, dtype=torch.bool)
    elif case == "strided last dim":
        q = torch.randn(1, 4, 9, 2 * d)[..., ::2]
    if case == "mps":
        device = "mps"
    problem = family.problem_for(_spec(q, k, v, mask, device=device))
    assert isinstance(problem, str) and why in problem, problem


def test_qkv_that_do_not_fit_are_refused_saying_so():
    q = _hf(1, 9, 4, 64)
    t = _spec_of(q)
    spec = _spec(q, q, q)
    assert family.problem_for(dataclasses.replace(spec, op="mm")) == \
        "cpp.flash_attention serves prefill_attention, prefill_attention_causal, decode_attention, not mm"
    for inputs in ((t, None, t, None), (t, t, None, None)):  # k, then v, not a tensor
        assert family.problem_for(dataclasses.replace(spec, inputs=inputs)) == \
            "q, k and v must be 4-D (batch, heads, tokens, head dim)"
    other_batch, other_d = _hf(2, 9, 4, 64), _hf(1, 9, 4, 32)  # each differs from k and v in one thing only
    for q in (other_batch, other_d):
        reason = family.problem_for(_spec(q, _hf(1, 9, 4, 64), _hf(1, 9, 4, 64)))
        assert isinstance(reason, str) and reason.endswith("do not fit together"), reason


def test_a_spec_without_a_mask_input_is_unmasked():
    q = _hf(1, 9, 4, 64)
    spec = _spec(q, q, q)
    assert family.problem_for(dataclasses.replace(spec, inputs=spec.inputs[:3])).mask == "none"


@pytest.mark.parametrize("batch, queries, keys", [(0, 8, 8), (1, 0, 8), (1, 8, 0)])
def test_an_empty_problem_is_refused(batch, queries, keys):
    reason = family.refuse_problem(family.Problem(batch, 2, 2, queries, keys, 64, 64, "float32", 0.125, "none"))
    assert reason.startswith("empty problem"), reason


def test_render_fills_in_the_head_dim_and_the_dtype():
    problem = family.Problem(1, 4, 2, 100, 100, 128, 128, "bfloat16", 0.125, "bool")
    kernel = family.render(problem, family.ALL_CONFIGS[0])
    assert kernel.language == "cpp" and kernel.name == family.FUNCTION and kernel.template == "cpp.flash_attention"
    assert "#define EXT_D 128" in kernel.source and "#define EXT_BF16 1" in kernel.source
    assert f'extern "C" int {family.FUNCTION}(' in kernel.source and "{" + "D}" not in kernel.source
    assert "-mavx512bf16" in kernel.launch["flags"]
    fp32 = family.render(family.Problem(1, 4, 2, 100, 100, 64, 64, "float32", 0.125, "none"), family.ALL_CONFIGS[0])
    assert "#define EXT_BF16 0" in fp32.source and "-mavx512bf16" not in fp32.launch["flags"]
    with pytest.raises(ValueError, match="head dims 80"):
        family.render(family.Problem(1, 4, 2, 100, 100, 80, 80, "float32", 0.125, "none"), family.ALL_CONFIGS[0])
    avx2 = family.render(problem, family.Config("avx2"))
    assert "#define EXT_AVX512 0" in avx2.source and "#define EXT_BF16 1" in avx2.source
    assert "#define EXT_AVX512 1" in kernel.source
    assert avx2.launch["flags"] == ["-mavx2", "-mfma"]


@pytest.mark.parametrize("capability, bf16, forms", [
    ("AVX512", True, {"float32": ("avx512", "avx2"), "bfloat16": ("avx512", "avx2")}),
    ("AVX512", False, {"float32": ("avx512", "avx2"), "bfloat16": ("avx2",)}),  # no vdpbf16ps
    ("AVX2", True, {"float32": ("avx2",), "bfloat16": ("avx2",)}),  # e.g. ATEN_CPU_CAPABILITY=avx2
    ("DEFAULT", False, {"float32": (), "bfloat16": ()}),
])
def test_each_cpu_gets_the_best_form_it_runs(monkeypatch, capability, bf16, forms):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: bf16)
    for dtype, runs in forms.items():
        problem = family.Problem(1, 4, 2, 100, 100, 64, 64, dtype, 0.125, "none")
        assert family.host_forms(dtype) == runs
        if not runs:
            assert "neither AVX2 nor AVX-512 (torch reports DEFAULT)" in family.refuse_problem(problem)
            assert family.configs(problem, "cpu") == []
            continue
        assert family.refuse_problem(problem) is None
        assert family.configs(problem, "cpu") == [family.Config(runs[0])]  # only the best: one build per decision
        for form in family.FORMS:  # a cached decision naming a form this CPU lacks is refused, not run
            refused = family.refuse_config(problem, family.Config(form), "cpu")
            assert (refused is None) == (form in runs), refused


# ---------------------------------------------------------------------------------- the kernel

# (batch, queries, keys, heads, kv heads, head dim, mask)
CASES = [
    (1, 100, 100, 4, 4, 64, "causal"),  # a partial last block of queries and of keys
    (2, 513, 513, 2, 1, 64, "causal 4-D"),  # grouped-query, most key blocks skipped
    (2, 64, 200, 3, 3, 128, "random"),  # head dim 128, more keys than queries, a query that sees none
    (1, 70, 70, 2, 2, 128, None),
    (2, 33, 33, 2, 2, 64, "per sequence"),  # (batch, 1, Lq, Lk): each sequence its own
    (1, 5, 1, 2, 2, 64, None),  # a single key
    (3, 2, 65, 4, 2, 64, "random"),  # two queries, one key past a block
    (1, 50, 50, 2, 2, 32, "causal"),  # the other head dims: 32, 96, 256 (two PV tiles in AVX-512)
    (1, 70, 130, 2, 1, 96, "random"),
    (1, 40, 90, 2, 2, 256, "causal"),
    (1, 100, 100, 4, 2, 64, "is_causal"),  # SDPA's flag, no mask: aligned top-left (key j for query i <= j)
    (2, 70, 150, 2, 2, 128, "is_causal"),  # fewer queries than keys: each sees keys 0..i only
    (1, 130, 60, 2, 1, 64, "is_causal"),  # more queries than keys: the last 70 see every key
]
# Every block boundary the kernel's tiles imply (its QB queries against KB keys a block, read from
# its source: 32 and 64): 1, block-1, block, block+1 and 2*block+1 of each, under is_causal, a
# causal mask and none; the causal block skip depends on where the last query block ends (65: the
# last query block holds one query, at the first key of a key block).
QUERY_BLOCK, KEY_BLOCK = kernel_blocks(family.KERNEL)
BOUNDARIES = sorted({1, QUERY_BLOCK - 1, QUERY_BLOCK, QUERY_BLOCK + 1, KEY_BLOCK - 1, KEY_BLOCK, KEY_BLOCK + 1,
                     2 * QUERY_BLOCK + 1, 2 * KEY_BLOCK + 1})
CASES += [(1, n, n, 2, 2, 64, kind) for n in BOUNDARIES for kind in ("is_causal", "causal", None)]
CASES += [(1, 65, 64, 2, 2, 64, "is_causal"), (1, 64, 65, 2, 2, 64, "is_causal")]
# queries and keys at different edges: one key block past one query, one query block past one key,
# a query block short of two key blocks and a tail, and the reverse
EDGE_PAIRS = [(1, KEY_BLOCK + 1), (QUERY_BLOCK + 1, 1), (QUERY_BLOCK - 1, 2 * KEY_BLOCK + 1),
              (2 * QUERY_BLOCK + 1, KEY_BLOCK - 1), (KEY_BLOCK + 1, QUERY_BLOCK)]
CASES += [(1, lq, lk, 2, 2, 64, kind) for lq, lk in EDGE_PAIRS for kind in ("is_causal", None)]


def _mask(kind, batch, lq, lk):
    g = torch.Generator().manual_seed(1)
    if kind == "causal":
        return _causal(lq, lk)
    if kind == "causal 4-D":
        return _causal(lq, lk)[None, None]
    if kind == "random":
        mask = torch.rand(lq, lk, generator=g) > 0.3
        mask[0] = False  # sees no key
        return mask
    if kind == "per sequence":
        return torch.rand(batch, 1, lq, lk, generator=g) > 0.5
    return None


def _reference(q, k, v, mask, scale, is_causal=False):
    """float64 SDPA; a query that sees no key gives zeros (ATen's convention)."""
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, scale=scale,
                                          is_causal=is_causal, enable_gqa=q.shape[1] != k.shape[1])
    return torch.nan_to_num(want, nan=0.0)


@pytest.mark.parametrize("dtype, config", EVERY_FORM)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_kernel_matches_float64_sdpa(dtype, config, case, monkeypatch):
    monkeypatch.setattr(family, "ATEN_ABOVE_VISIBLE", {})  # the kernel on every mask, one that hides little too
    batch, lq, lk, heads, kv_heads, d, kind = case
    torch.manual_seed(0)
    q, k, v = _hf(batch, lq, heads, d, dtype), _hf(batch, lk, kv_heads, d, dtype), _hf(batch, lk, kv_heads, d, dtype)
    mask, scale, is_causal = _mask(kind, batch, lq, lk), d ** -0.5, kind == "is_causal"
    problem = family.problem_for(_spec(q, k, v, mask, scale, is_causal=is_causal))
    assert not isinstance(problem, str), problem
    assert problem.mask == {"is_causal": "causal", None: "none"}.get(kind, "bool")
    got = family.call(problem, config, "cpu", q, k, v, mask)
    assert got.dtype == dtype and got.is_contiguous() and got.shape == (batch, heads, lq, d)
    want = _reference(q, k, v, mask, scale, is_causal)
    torch.testing.assert_close(got.double(), want, **TOL[dtype])
    if kind == "random":
        assert got[:, :, 0].abs().max() == 0  # the query that sees no key


@needs[torch.float32]
def test_kernel_reads_contiguous_inputs_and_a_scale_of_its_own():
    q, k, v = (torch.randn(1, 2, 40, 64) for _ in range(3))
    problem = family.problem_for(_spec(q, k, v, scale=0.3))
    got = family.call(problem, HOST_FP32, "cpu", q, k, v)
    torch.testing.assert_close(got.double(), _reference(q, k, v, None, 0.3), **TOL[torch.float32])


def test_a_call_that_does_not_fit_its_problem_is_refused_not_computed():
    problem = family.Problem(1, 2, 2, 8, 8, 64, 64, "float32", 0.125, "bool")
    q = torch.randn(1, 2, 8, 64)
    with pytest.raises(ValueError, match="built for float32, head dim 64 and mask 'bool'"):
        family.call(problem, HOST_FP32, "cpu", q.bfloat16(), q.bfloat16(), q.bfloat16())
    with pytest.raises(ValueError, match="mask torch.uint8"):
        family.call(problem, HOST_FP32, "cpu", q, q, q, torch.ones(8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="mask None"):  # a mask the problem needs, left out
        family.call(problem, HOST_FP32, "cpu", q, q, q)
    causal = family.Problem(1, 2, 2, 8, 8, 64, 64, "float32", 0.125, "causal")
    with pytest.raises(ValueError, match="mask 'causal' was called with .* mask torch.bool"):
        family.call(causal, HOST_FP32, "cpu", q, q, q, torch.ones(8, 8, dtype=torch.bool))


def test_a_form_this_cpu_lacks_is_refused_before_it_is_built(monkeypatch):
    """A config from another machine (a cached decision, a caller's pick) naming the AVX-512 form
    on an AVX2 CPU: a ValueError naming the forms it runs, no g++, never the kernel's SIGILL."""
    monkeypatch.setattr(family, "host_forms", lambda dtype: ("avx2",))
    monkeypatch.setattr(cpu_library, "function", lambda *a: pytest.fail("built a kernel this CPU cannot run"))
    problem = family.Problem(1, 2, 2, 8, 8, 64, 64, "float32", 0.125, "none")
    q = torch.randn(1, 2, 8, 64)
    with pytest.raises(ValueError, match="form avx512 does not run on this CPU for float32 .it runs: avx2."):
        family.call(problem, family.Config("avx512"), "cpu", q, q, q)


# --------------------------------------------------------------- decode: one query token per sequence


def _decode_spec(q, k, v, mask=None, scale=0.125):
    return dataclasses.replace(_spec(q, k, v, mask, scale), op="decode_attention")


DECODE_CASES = [  # batch, cache slots, slots written (the first sequence; each next one a block fewer), heads, kv heads, d
    (1, 1024, 48, 12, 12, 64),  # bench/hf_generate.py's static1024 row: 48 of 1024 slots written
    (2, 130, KEY_BLOCK + 1, 4, 2, 64),  # grouped-query; a key block and one key written, then one key
    (1, KEY_BLOCK, KEY_BLOCK - 1, 2, 2, 128),  # every slot but the last written
    (3, 200, 1, 4, 1, 32),  # one slot written; the later sequences see none (zeros, as ATen's)
    (1, 37, 37, 2, 2, 96),  # no mask: a dynamic cache, every slot a key
]


@pytest.mark.parametrize("dtype, config", EVERY_FORM)
@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: "-".join(map(str, c)))
def test_decode_over_a_static_cache_matches_float64_sdpa_and_never_reads_an_unwritten_slot(dtype, config, case):
    """Each sequence sees the first slots of its cache; the unwritten ones hold NaN, which would
    reach the output if the kernel read them (a hidden key's NaN value times its zero weight)."""
    batch, slots, written, heads, kv_heads, d = case
    torch.manual_seed(0)
    cache_k, cache_v = (torch.randn(batch, kv_heads, slots + 5, d).to(dtype) for _ in range(2))  # a larger buffer
    k, v = cache_k[:, :, :slots], cache_v[:, :, :slots]  # its first slots: strided views, as a cache slice
    lengths = [max(written - i * KEY_BLOCK, 0) for i in range(batch)]
    mask = None
    if written < slots:
        mask = (torch.arange(slots) < torch.tensor(lengths)[:, None]).view(batch, 1, 1, slots)
        for i, n in enumerate(lengths):
            k[i, :, n:], v[i, :, n:] = float("nan"), float("nan")
    q = _hf(batch, 1, heads, d, dtype)
    problem = family.problem_for(_decode_spec(q, k, v, mask, d ** -0.5))
    assert not isinstance(problem, str), problem
    assert (problem.queries, problem.mask) == (1, "none" if mask is None else "bool")
    got = family.call(problem, config, "cpu", q, k, v, mask)
    assert got.dtype == dtype and got.is_contiguous() and got.shape == (batch, heads, 1, d)
    assert not got.isnan().any(), "an unwritten slot was read"
    want = _reference(q, k.nan_to_num(0.0), v.nan_to_num(0.0), mask, d ** -0.5)
    torch.testing.assert_close(got.double(), want, **TOL[dtype])


@pytest.mark.parametrize("dtype, config", EVERY_FORM)
def test_decode_keeps_the_nans_and_infinities_of_the_keys_it_sees(dtype, config):
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 3, 1, 64).to(dtype), torch.randn(1, 3, 90, 64).to(dtype), torch.randn(1, 3, 90, 64).to(dtype)
    q[0, 0, 0, 3] = float("nan")  # head 0: every score NaN
    v[0, 1, 70, 2] = float("nan")  # head 1: a NaN value it sees
    k[0, 2, 9, 0] = float("-inf") if q[0, 2, 0, 0] > 0 else float("inf")  # head 2: a -inf score, which drops out
    got = family.call(family.problem_for(_decode_spec(q, k, v)), config, "cpu", q, k, v)
    assert got[0, 0].isnan().all() and got[0, 1, 0, 2].isnan() and not got[0, 2].isnan().any()
    want = _reference(q, k, v, None, 0.125)
    torch.testing.assert_close(got[0, 2].double(), want[0, 2], **TOL[dtype])


# ----------------------------------------------------------------------------------- the build


def test_a_kernel_is_built_once_beside_its_source(tmp_path, monkeypatch):
    if toolchain.gxx() is None:
        pytest.skip("no C++ compiler here (apt-get install g++): the kernel cannot be built")
    monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(tmp_path))
    problem = family.Problem(1, 2, 2, 8, 8, 64, 64, "float32", 0.125, "none")
    kernel = family.render(problem, family.ALL_CONFIGS[0])
    flags = tuple(kernel.launch["flags"])
    path = cpu_library.build(kernel, flags)
    assert path.is_relative_to(tmp_path) and path.with_suffix(".cpp").read_text() == kernel.source
    built = path.stat().st_mtime_ns
    assert cpu_library.build(kernel, flags) == path and path.stat().st_mtime_ns == built  # not rebuilt
    other = family.render(problem.__class__(**{**problem.__dict__, "head_dim": 128, "value_dim": 128}),
                          family.ALL_CONFIGS[0])
    assert cpu_library.library_path(other, flags, toolchain.gxx()) != path


def test_a_missing_compiler_says_what_to_install(monkeypatch):
    monkeypatch.setattr(toolchain, "gxx", lambda: None)
    assert "apt-get install g++" in family.refuse_here()
    kernel = family.render(family.Problem(1, 2, 2, 8, 8, 64, 64, "float32", 0.125, "none"), family.ALL_CONFIGS[0])
    with pytest.raises(toolchain.ToolchainMissing, match="apt-get install g"):
        cpu_library.build(kernel, ())


def test_a_kernel_that_does_not_compile_says_why(tmp_path, monkeypatch):
    if toolchain.gxx() is None:
        pytest.skip("no C++ compiler here (apt-get install g++): the kernel cannot be built")
    monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(tmp_path))
    kernel = family.render(family.Problem(1, 2, 2, 8, 8, 64, 64, "float32", 0.125, "none"), family.ALL_CONFIGS[0])
    broken = kernel.__class__(**{**kernel.__dict__, "source": kernel.source + "\nthis is not C++;\n"})
    with pytest.raises(cpu_library.CppBuildError, match="ext_flash_attention"):
        cpu_library.build(broken, tuple(kernel.launch["flags"]))


# ---------------------------------------------------------------------------------- the pass


def _rewrites(fn, *args, options=None, grad=False):
    gm, _ = pre_grad_graph(fn, *args, grad=grad)
    count = PrefillAttentionOp(presets.resolve({"preset": "cpu", **(options or {})})).run(gm.graph)
    ops = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert (OP in ops) == (count > 0)
    return count


@needs[torch.float32]
def test_pass_rewrites_a_prefill_with_its_mask():
    q, k = _hf(1, 40, 4, 64), _hf(1, 40, 2, 64)
    mask = _causal(40, 40)[None, None]
    assert _rewrites(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
                     q, k, k, mask) == 1
    assert _rewrites(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.5) * 2, q, q, q) == 1


@needs[torch.float32]
def test_pass_rewrites_the_is_causal_flag_into_the_causal_op():
    q = _hf(1, 40, 4, 64)
    gm, _ = pre_grad_graph(lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True), q)
    assert PrefillAttentionOp(presets.resolve({"preset": "cpu"})).run(gm.graph) == 1
    (node,) = [n for n in gm.graph.nodes if n.target == OP]
    assert node.args[3] is None and node.args[5] is True  # no mask, the flag kept for ATen's choice


@pytest.mark.parametrize("case", ["decode", "decode is_causal", "dropout", "grad", "additive", "autotune off", "float64",
                                  "cpp_wrapper"])
def test_pass_keeps_atens_sdpa_where_the_op_would_differ_or_cannot_pay_off(case):
    q = _hf(1, 1 if case.startswith("decode") else 9, 2, 64)
    kwargs, options, grad = {}, None, False
    if case == "decode is_causal":
        kwargs = {"is_causal": True}
    elif case == "dropout":
        kwargs = {"dropout_p": 0.1}
    elif case == "grad":
        q.requires_grad_(True)
        grad = True
    elif case == "additive":
        kwargs = {"attn_mask": torch.zeros(9, 9)}
    elif case == "autotune off":
        options = {"autotune": "off"}
    elif case == "float64":
        q = q.double()
    with torch._inductor.config.patch(cpp_wrapper=case == "cpp_wrapper"):
        assert _rewrites(lambda q: F.scaled_dot_product_attention(q, q, q, **kwargs), q, options=options, grad=grad) == 0


# ------------------------------------------------------------------------- compiled through ext


class Prefill(torch.nn.Module):
    """A GPT-2-style attention block: one projection to q, k, v, SDPA with the causal mask built in
    the graph, as Hugging Face does."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(128, 3 * 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 64).permute(2, 0, 3, 1, 4)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()[None, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, t, 128)


def _offered(dtype: torch.dtype) -> str:
    """The choice a compile offers for ``dtype`` here: the best form this CPU runs (``configs``)."""
    return f"ext_cpp_flash_attention_form{family.host_forms(str(dtype).removeprefix('torch.'))[0]}"


def _compile(m, options, x):
    options = {"autotune": "quick", **options}  # the timed path (the cpu preset's default times nothing)
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    with tune.fresh_inductor_caches(), torch.no_grad():
        got = torch.compile(m, backend="ext", options=options)(x)
    return got, [d for d in decision_record.decisions[first:] if d.op == "prefill_attention"]


@pytest.fixture(scope="module", params=[pytest.param(torch.float32, marks=needs[torch.float32]),
                                        pytest.param(torch.bfloat16, marks=needs[torch.bfloat16])], ids=str)
def compiled(request):
    dtype = request.param
    torch.manual_seed(0)
    m, x = Prefill().eval().to(dtype), torch.randn(2, 77, 128).to(dtype)
    with torch.no_grad():
        want = m.double()(x.double())
        m = m.to(dtype)
    forced = _compile(m, {"preset": "cpu", "force_template": "cpp.flash_attention"}, x)
    timed = _compile(m, {"preset": "cpu"}, x)
    return {"dtype": dtype, "want": want, "forced": forced, "timed": timed}


def test_forced_kernel_matches_the_reference(compiled):
    got, decisions = compiled["forced"]
    assert [d.winner for d in decisions] == [_offered(compiled["dtype"])], decisions
    assert got.dtype == compiled["dtype"]
    torch.testing.assert_close(got.double(), compiled["want"], **TOL[compiled["dtype"]])


def test_kernel_is_timed_against_aten_and_the_winner_computes_the_same(compiled):
    got, (decision,) = compiled["timed"]
    names = {c["name"] for c in decision.candidates}
    assert {"prefill_attention_aten", _offered(compiled["dtype"])} <= names, decision.candidates
    assert all(c.get("us", 1) > 0 for c in decision.candidates)
    torch.testing.assert_close(got.double(), compiled["want"], **TOL[compiled["dtype"]])


@needs[torch.float32]
def test_a_prefills_mask_is_timed_causal_and_run_as_the_graph_builds_it(monkeypatch):
    """Inductor's example value of a bool tensor is all False: a mask hiding every key, under which
    the kernel skips every block and was timed doing nothing. Timed, a prefill's mask is causal,
    the mask a decoder's prefill passes (``lowering/ops/_select.py``); run, the graph's own."""
    from inductor_ext.lowering import adapters

    masks = []
    real_get = adapters.registry.get

    class Spy:
        def __init__(self, fam):
            self._fam = fam

        def __getattr__(self, name):
            return getattr(self._fam, name)

        def call(self, problem, config, target, *tensors):
            masks.append(tensors[3].clone() if len(tensors) > 3 else None)
            return self._fam.call(problem, config, target, *tensors)

    monkeypatch.setattr(adapters.registry, "get",
                        lambda name: Spy(real_get(name)) if name == family.NAME else real_get(name))
    m, x = Prefill().eval(), torch.randn(1, 40, 128)
    got, (decision,) = _compile(m, {"preset": "cpu", "force_template": family.NAME}, x)
    timed, run = masks[:-1], masks[-1]
    causal = _causal(40, 40).expand(1, 1, 40, 40)
    assert timed and all(t is not None and torch.equal(t.broadcast_to(causal.shape), causal) for t in timed), timed
    assert run is not None and torch.equal(run.broadcast_to(causal.shape), causal)  # the compiled call's mask
    with torch.no_grad():
        torch.testing.assert_close(got, m(x), **TOL[torch.float32])


def test_a_mask_over_one_query_or_broadcast_over_queries_is_timed_attending_everywhere(monkeypatch):
    """Only a prefill's mask over several queries is timed causal (aligned top-left where keys
    outnumber queries, as a prefill into a static cache sees them); a decode step's, a padding mask
    broadcast over the queries, and any bool input of another op attend everywhere."""
    from torch._inductor import ir
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V

    from inductor_ext.lowering.ops import _select

    def node(size, stride=None):
        return ir.TensorBox.create(ir.InputBuffer(name="m", layout=ir.FixedLayout(torch.device("cpu"), torch.bool,
                                                                                      list(size), stride)))

    with V.set_graph_handler(GraphLowering(torch.fx.symbolic_trace(lambda x: x))):
        def value(op, size, stride=None):
            return _select.attending_masks([node(size, stride)], op)[0](node(size, stride))

        assert torch.equal(value("prefill_attention", (1, 1, 6, 6)), _causal(6, 6).expand(1, 1, 6, 6))
        assert torch.equal(value("prefill_attention", (2, 1, 3, 7)),
                           torch.ones(3, 7, dtype=torch.bool).tril().expand(2, 1, 3, 7))
        assert torch.equal(value("prefill_attention", (2, 4, 5, 5), [25, 0, 5, 1]), _causal(5, 5).expand(2, 4, 5, 5))
        assert torch.equal(value("prefill_attention", (1, 2, 5, 5), [0, 25, 5, 1]), _causal(5, 5).expand(1, 2, 5, 5))
        assert torch.equal(value("prefill_attention", (2, 5, 5), [0, 5, 1]), _causal(5, 5).expand(2, 5, 5))
        assert torch.equal(value("prefill_attention", (6, 6)), _causal(6, 6))  # 2-D, as SDPA takes it
        assert torch.equal(value("prefill_attention", (1, 1, 2, 2)), _causal(2, 2).expand(1, 1, 2, 2))  # two queries
        # the same row for every query (a padding mask expanded over them): no causal pattern fits it
        assert bool(value("prefill_attention", (2, 6, 6), [6, 0, 1]).all())
        for op, size in (("prefill_attention", (2, 1, 1, 9)), ("decode_attention", (2, 1, 1, 9)),
                         ("prefill_attention", (9,)), ("prefill_attention", (3, 1, 7)),
                         ("decode_attention", (1, 1, 6, 6))):
            assert bool(value(op, size).all()), (op, size)


def _stub_kernel(monkeypatch) -> list:
    """The family's C function replaced by one that records its call (and computes nothing)."""
    calls: list = []
    monkeypatch.setattr(family, "_function", lambda problem, config, target: lambda *args: calls.append(config))
    return calls


def _aten_calls(monkeypatch) -> list:
    from inductor_ext.kernels import prefill_attention_ops

    calls: list = []
    real = prefill_attention_ops.aten_prefill_attention
    monkeypatch.setattr(prefill_attention_ops, "aten_prefill_attention",
                        lambda *a, **kw: calls.append(a[3]) or real(*a, **kw))
    return calls


@pytest.mark.parametrize("visible", ["every key", "three in four", "two queries"])
def test_the_avx2_form_serves_atens_sdpa_for_a_mask_that_hides_little(monkeypatch, visible):
    """Its gain is the blocks a mask hides: with more than 70% of the keys visible it computes what
    ATen's SDPA does, by calling it (with the problem's scale, not SDPA's default)."""
    torch.manual_seed(0)
    lq = 2 if visible == "two queries" else 40
    q, k, v = _hf(1, lq, 2, 64), _hf(1, 40, 2, 64), _hf(1, 40, 2, 64)
    mask = torch.rand(lq, 40) < 0.75 if visible == "three in four" else torch.ones(lq, 40, dtype=torch.bool)
    kernel, aten = _stub_kernel(monkeypatch), _aten_calls(monkeypatch)
    problem = family.problem_for(_spec(q, k, v, mask, scale=0.3))
    got = family.call(problem, family.Config("avx2"), "cpu", q, k, v, mask)
    assert not kernel and len(aten) == 1 and aten[0] is mask
    assert got.is_contiguous() and got.shape == (1, 2, lq, 64)
    torch.testing.assert_close(got.double(), _reference(q, k, v, mask, 0.3), **TOL[torch.float32])


@pytest.mark.parametrize("form, mask", [("avx2", "causal"), ("avx2", "two in three"), ("avx512", "every key"),
                                        ("avx2", "one query"), ("avx2", "exactly 70%")])
def test_the_kernel_runs_where_a_mask_hides_enough_and_avx512_always(monkeypatch, form, mask):
    torch.manual_seed(0)
    lq = 1 if mask == "one query" else 40
    q, k, v = _hf(1, lq, 2, 64), _hf(1, 40, 2, 64), _hf(1, 40, 2, 64)
    seventy = torch.arange(40) % 10 < 7  # 28 of every row's 40 keys
    m = {"causal": _causal(40, 40), "two in three": torch.rand(40, 40) < 0.66,
         "every key": torch.ones(40, 40, dtype=torch.bool), "one query": torch.ones(1, 40, dtype=torch.bool),
         "exactly 70%": seventy.expand(40, 40)}[mask]
    kernel, aten = _stub_kernel(monkeypatch), _aten_calls(monkeypatch)
    problem = family.problem_for(_spec(q, k, v, m))
    family.call(problem, family.Config(form), "cpu", q, k, v, m)
    assert kernel == [family.Config(form)] and not aten


class CausalFlag(Prefill):
    """The same block written as nanoGPT writes it: SDPA's ``is_causal`` flag, no mask tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 64).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, 128)


@needs[torch.float32]
def test_the_is_causal_flag_is_served_and_keyed_apart():
    torch.manual_seed(0)
    m, x = CausalFlag().eval(), torch.randn(2, 77, 128)
    with torch.no_grad():
        want = copy.deepcopy(m).double()(x.double())
    first = len(decision_record.decisions)
    got, _ = _compile(m, {"preset": "cpu", "force_template": "cpp.flash_attention"}, x)
    (decision,) = [d for d in decision_record.decisions[first:] if d.op.startswith("prefill_attention")]
    assert (decision.op, decision.winner) == ("prefill_attention_causal", _offered(torch.float32)), decision
    assert decision.key.op == "prefill_attention_causal"  # never the cached decision of a maskless call
    torch.testing.assert_close(got.double(), want, **TOL[torch.float32])


def test_an_avx2_cpu_compiles_with_the_avx2_kernel(monkeypatch):
    """As on a CPU without AVX-512 (torch's capability says AVX2): the family is offered with its
    AVX2 form, which wins when forced and computes the block's output."""
    if "avx2" not in family.host_forms("float32"):
        pytest.skip("this CPU does not run the avx2 kernel (no AVX2): ATen's SDPA serves prefill here")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    torch.manual_seed(0)
    m, x = Prefill().eval(), torch.randn(2, 77, 128)
    with torch.no_grad():
        want = copy.deepcopy(m).double()(x.double())
    got, decisions = _compile(m, {"preset": "cpu", "force_template": "cpp.flash_attention"}, x)
    assert [d.winner for d in decisions] == ["ext_cpp_flash_attention_formavx2"], decisions
    torch.testing.assert_close(got.double(), want, **TOL[torch.float32])


@needs[torch.float32]
def test_a_call_is_named_in_profiles_as_attention():
    q = torch.randn(1, 2, 40, 64)
    problem = family.problem_for(_spec(q, q, q))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        family.call(problem, HOST_FP32, "cpu", q, q, q)
    assert "inductor_ext::cpp.flash_attention" in {e.key for e in prof.key_averages()}


def test_under_inductors_cpp_wrapper_prefill_stays_atens_and_compiles():
    torch.manual_seed(0)
    m, x = Prefill().eval(), torch.randn(2, 77, 128)
    with torch.no_grad(), torch._inductor.config.patch(cpp_wrapper=True):
        want = m(x)
        got, decisions = _compile(m, {"preset": "cpu", "force_template": "cpp.flash_attention"}, x)
    assert decisions == []  # the pass kept ATen's SDPA: nothing to decide
    torch.testing.assert_close(got, want, **TOL[torch.float32])


@needs[torch.float32]
def test_a_prompt_of_another_length_keeps_the_kernel():
    """The second length makes the graph dynamic (torch.compile's rule): the kernel reads every size
    from its tensors, so it is tuned at the hints and serves each length."""
    torch.manual_seed(0)
    m = Prefill().eval()
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    compiled = torch.compile(m, backend="ext", options={"preset": "cpu", "force_template": "cpp.flash_attention"})
    with tune.fresh_inductor_caches(), torch.no_grad():
        for tokens in (40, 77, 100):
            x = torch.randn(1, tokens, 128)
            torch.testing.assert_close(compiled(x), m(x), **TOL[torch.float32])
    decisions = [d for d in decision_record.decisions[first:] if d.op == "prefill_attention"]
    assert [bool(d.problem.get("dynamic")) for d in decisions] == [False, True], [d.problem for d in decisions]
    assert all(d.winner == _offered(torch.float32) for d in decisions), decisions


@pytest.mark.parametrize("dtype, config", EVERY_FORM)
def test_nan_and_inf_reach_the_rows_that_see_them(dtype, config):
    """A NaN in q, an infinity in k and a NaN in v are never lost: every output that sees one is NaN
    (softmax(q k^T) v over the visible keys), and no NaN appears that softmax(q k^T + mask) @ v does
    not make (there a masked key's NaN value still multiplies its zero weight, as in ATen's kernel)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 70, 64).to(dtype) for _ in range(3))
    q[0, 0, 5, 3] = float("nan")
    k[0, 1, 9, 0] = float("inf")  # +inf scores where q[..., 0] > 0: NaN rows; -inf: the key drops out
    v[0, 0, 60, 2] = float("nan")
    mask = _causal(70, 70)
    problem = family.problem_for(_spec(q, k, v, mask))
    got = family.call(problem, config, "cpu", q, k, v, mask)
    scores = (q.double() @ k.double().transpose(-1, -2) * 0.125).masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, -1)
    want = torch.where(mask[..., None], p[..., None] * v.double()[:, :, None], 0.0).sum(-2)
    at_most = p @ v.double()
    assert want.isnan().any() and (~at_most.isnan()).any()
    assert not (want.isnan() & ~got.isnan()).any(), "a NaN was lost"
    assert not (got.isnan() & ~at_most.isnan()).any(), "a NaN was made up"
    finite = ~got.isnan()
    torch.testing.assert_close(got.double()[finite], want[finite], **TOL[dtype])


def _noting_builds(monkeypatch) -> tuple[list[str], list[str]]:
    """The names of the background builds started, and of the threads that build the family's
    kernel (its built kernels forgotten first)."""
    from inductor_ext.runtime import background_builds

    started, built_by = [], []
    real_start = background_builds.start
    monkeypatch.setattr(background_builds, "start", lambda build, name: started.append(name) or real_start(build, name))
    real_function = cpu_library.function
    monkeypatch.setattr(cpu_library, "function", lambda *a: built_by.append(
        __import__("threading").current_thread().name) or real_function(*a))
    family._built.cache_clear()
    return started, built_by


@needs[torch.float32]
def test_a_kernel_served_from_a_cache_is_built_beside_the_compile_not_at_the_first_call(monkeypatch, tmp_path):
    """Served untimed (a cache, a table), the family's kernel would be built by the graph's first
    call; its build starts at the decision instead (``prebuild``, in a background thread)."""
    from inductor_ext.autotune import cache_layers
    from inductor_ext.autotune.cache import Entry
    from inductor_ext.autotune.cache_transfer import write_cache

    torch.manual_seed(0)
    m, x = Prefill().eval(), torch.randn(1, 33, 128)
    asked = []
    real_get = cache_layers.DecisionSources.get
    monkeypatch.setattr(cache_layers.DecisionSources, "get", lambda self, key: asked.append(key) or real_get(self, key))
    _compile(m, {"preset": "cpu", "autotune": "cache-only"}, x)  # nothing cached: ATen, and the key asked
    key = next(k for k in asked if k.op == "prefill_attention")
    shipped = tmp_path / "shipped.db"
    write_cache([Entry(key, winner=family.NAME, config={"form": family.host_forms("float32")[0]},
                       winner_time_us=1.0)], shipped)
    started, built_by = _noting_builds(monkeypatch)
    got, decisions = _compile(m, {"preset": "cpu", "autotune": "cache-only", "autotune_cache": str(shipped)}, x)
    assert [d.reason for d in decisions] == ["cache"] and decisions[0].winner.startswith("ext_cpp_flash_attention")
    assert f"ext-prebuild-{family.NAME}" in started and built_by == [f"ext-prebuild-{family.NAME}"]
    with torch.no_grad():
        torch.testing.assert_close(got, m(x), **TOL[torch.float32])


@needs[torch.float32]
def test_a_kernel_the_cost_model_picks_is_built_beside_the_compile_not_at_the_first_call(monkeypatch):
    """A problem no table covers, where the cost model predicts the family wins: its kernel is
    built by the prebuild thread started at the decision, as for a cache's pick."""
    from inductor_ext.autotune import decision_tables
    from inductor_ext.autotune.cost_model import Prediction
    from inductor_ext.lowering import ext_choices

    class NoTables:
        def get(self, key, form):
            return None

    class Predicts:  # the family 0.5x ATen's time, error 0.01 in log: a win beyond any margin
        def predict(self, key):
            return Prediction(math.log(0.5), 0.01, 100.0, 50.0,
                              configs=((family.NAME, {"form": family.host_forms("float32")[0]}),), neighbours=3)

    monkeypatch.setattr(ext_choices.ExtChoices, "tables", property(lambda self: NoTables()))
    monkeypatch.setattr(ext_choices.ExtChoices, "model", lambda self, form: Predicts())
    monkeypatch.setattr(decision_tables, "portable", lambda key, form: key)
    torch.manual_seed(0)
    m, x = Prefill().eval(), torch.randn(1, 33, 128)
    started, built_by = _noting_builds(monkeypatch)
    got, decisions = _compile(m, {"preset": "cpu", "autotune": "model"}, x)
    assert [d.reason.split(":")[0] for d in decisions] == ["model"], decisions
    assert decisions[0].winner.startswith("ext_cpp_flash_attention"), decisions
    assert f"ext-prebuild-{family.NAME}" in started and built_by == [f"ext-prebuild-{family.NAME}"]
    with torch.no_grad():
        torch.testing.assert_close(got, m(x), **TOL[torch.float32])


@needs[torch.float32]
def test_a_frozen_graph_whose_weights_change_recompiles_with_atens_attention_inlined():
    """Weights changed after a frozen compile: the graph is compiled again without freezing, at call
    time and from the example inputs, so with no shape environment. ATen's attention, inlined
    where it wins, is traced there with static sizes (symbolic tracing asserted: the call failed)."""
    torch.manual_seed(0)
    m, x = Prefill().eval(), torch.randn(2, 20, 128)
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    compiled = torch.compile(m, backend="ext", options={"preset": "cpu", "autotune": "cache-only"})
    with tune.fresh_inductor_caches(), torch.no_grad():
        torch.testing.assert_close(compiled(x), m(x), **TOL[torch.float32])
        m.qkv.weight.mul_(2)
        torch.testing.assert_close(compiled(x), m(x), **TOL[torch.float32])
    decisions = [d for d in decision_record.decisions[first:] if d.op == "prefill_attention"]
    assert len(decisions) == 2 and all(d.winner == "prefill_attention_aten" for d in decisions), decisions
