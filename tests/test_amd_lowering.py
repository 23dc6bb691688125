"""The gfx950 and gfx1250 presets at the lowering, on Inductor IR for a ROCm device (no GPU here:
nothing runs). For mm, scaled_mm, grouped_mm and rms_norm: every family of the preset that claims
the target is offered beside ATen with its own configs, a family that cannot serve an instance
is left out with its reason in the log, and a cached winner comes back as the one choice. The
``triton.tdm_gemm`` kernels Inductor renders from the family's template (mm and scaled_mm) are
compiled for gfx1250: Tensor Data Mover loads and WMMA, as in the family's own tier I.
"""

from __future__ import annotations

import dataclasses
import logging
import re

import pytest
import torch
from torch._inductor import ir
from torch._inductor.graph import GraphLowering
from torch._inductor.kernel.mm import aten__fp8_mm, aten_addmm, aten_mm
from torch._inductor.kernel.mm_common import mm_args
from torch._inductor.kernel.mm_grouped import aten__grouped_mm, grouped_mm_args
from torch._inductor.kernel_inputs import MMKernelInputs
from torch._inductor.runtime.hints import DeviceProperties
from torch._inductor.select_algorithm import realize_inputs
from torch._inductor.virtualized import V

from _logs import records_of
from inductor_ext import presets, targets
from inductor_ext.lowering import decision_record, ext_choices, refusals
from inductor_ext.lowering.ops import FixedKernelInputs
from inductor_ext.lowering.ops import rms_norm as rms_norm_lowering
from inductor_ext.lowering.ops import topk as topk_lowering
from inductor_ext.runtime.kernel_source import KernelSource
from inductor_ext.targets import amd
from inductor_ext.templates import registry
from inductor_ext.testing import isa

ROCM = torch.device("cuda", 0)  # a ROCm GPU is a "cuda" device to torch
# What a ROCm torch reports for each target (compute capability, warp size), for Inductor's codegen.
DEVICE = {"gfx950": ((9, 5), 64, "MI355X"), "gfx1250": ((12, 5), 32, "MI450")}
BF16, FP8, E8M0 = torch.bfloat16, torch.float8_e4m3fn, torch.float8_e8m0fnu


def _pretend_rocm(mp: pytest.MonkeyPatch, target: str) -> None:
    """Answer what Inductor's codegen and ext's cache key ask the device, as a ROCm GPU of ``target``."""
    (major, minor), warp, name = DEVICE[target]
    mp.setattr(torch.cuda, "get_device_capability", lambda *a: (major, minor))
    mp.setattr(DeviceProperties, "create", classmethod(
        lambda cls, device: cls("hip", 0, 256, target, major, 65536, 2048, 1024, warp)))
    mp.setattr(torch.utils._triton, "triton_hash_with_backend", lambda: f"hip-{target}-stand-in")
    mp.setattr(targets, "device_name", lambda device: f"AMD Instinct {name}")


@pytest.fixture
def rocm(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """A graph being lowered for a ROCm device of the given target; returns offer(target, op, ...)."""
    def offer(target: str, op: str, kernel_inputs, aten: list, **options):
        _pretend_rocm(monkeypatch, target)
        config = presets.resolve({"preset": target, "autotune_cache": str(tmp_path / "autotune.db"), **options})
        choices = ext_choices.ExtChoices(config)
        return choices, choices.offer(op, kernel_inputs, list(aten))

    with V.set_graph_handler(GraphLowering(torch.fx.symbolic_trace(lambda x: x))):
        yield offer


def _input(name: str, size: tuple[int, ...], dtype: torch.dtype, stride: list[int] | None = None) -> ir.TensorBox:
    box = ir.TensorBox.create(ir.InputBuffer(name=name, layout=ir.FixedLayout(ROCM, dtype, list(size), stride)))
    V.graph.graph_inputs[name] = box
    return box


# ----------------------------------------------------------------------------------- op inputs
# Built as Inductor's own lowerings build them (mm_args / grouped_mm_args realize the inputs).


def mm(m: int, n: int, k: int, *, weight_t: bool = True):
    """x @ W.T (``weight_t``: B K-major, the nn.Linear case) or x @ B with B row-major."""
    b = _input("b", (k, n), BF16, [1, k]) if weight_t else _input("b", (k, n), BF16)
    _, _, _, layout, a, b = mm_args(_input("a", (m, k), BF16), b)
    return MMKernelInputs([a, b]), [aten_mm.bind((a, b), layout)]


def addmm(m: int, n: int, k: int):
    """nn.Linear with a bias: addmm(b, x, W.T). Inductor hands the choices handler the bias as given
    ([N]); the op glue broadcasts it over rows for every family."""
    bias = realize_inputs(_input("bias", (n,), BF16))
    _, _, _, layout, a, b = mm_args(_input("a", (m, k), BF16), _input("b", (k, n), BF16, [1, k]))
    return (MMKernelInputs([bias, a, b], scalars={"alpha": 1, "beta": 1}),
            [aten_addmm.bind((bias, a, b), layout, alpha=1, beta=1)])


def scaled_mm(m: int, n: int, k: int, scaling: str, bias: bool = False):
    """torch._scaled_mm(a, w.t(), scale_a, scale_b[, bias], out_dtype=bf16): fp8 with row-wise fp32
    scales, or MXFP8 with [rows, K/32] e8m0 scales."""
    _, _, _, layout, a, b = mm_args(_input("a", (m, k), FP8), _input("b", (k, n), FP8, [1, k]), out_dtype=BF16)
    if scaling == "row":
        sa, sb = _input("sa", (m, 1), torch.float32), _input("sb", (1, n), torch.float32)
    else:
        sa, sb = _input("sa", (m, k // 32), E8M0), _input("sb", (n, k // 32), E8M0)
    nodes = [a, b, *realize_inputs(sa, sb)] + ([realize_inputs(_input("bias", (n,), BF16))] if bias else [])
    return (MMKernelInputs(nodes, mat1_idx=0, mat2_idx=1, out_dtype=BF16),
            [aten__fp8_mm.bind(nodes, layout, out_dtype=BF16, use_fast_accum=False)])


def grouped_mm(tokens: int, n: int, k: int, groups: int):
    """F.grouped_mm(x, w, offs=offs): MoE tokens back to back, one (K, N) weight per expert."""
    _, _, layout, a, b, offs = grouped_mm_args(_input("x", (tokens, k), BF16), _input("w", (groups, k, n), BF16),
                                               _input("offs", (groups,), torch.int32))
    nodes = [a, b, realize_inputs(offs)]
    return FixedKernelInputs(nodes, layout, {"out_dtype": None}), [aten__grouped_mm.bind(nodes, layout, out_dtype=None)]


def rms_norm(rows: int, n: int, dtype: torch.dtype = BF16):
    nodes = [realize_inputs(_input("x", (rows, n), dtype)), realize_inputs(_input("w", (n,), dtype))]
    layout = ir.FixedLayout(ROCM, dtype, [rows, n])
    scalars = {"normalized_shape": [n], "eps": 1e-6}
    return (FixedKernelInputs(nodes, layout, scalars),
            [rms_norm_lowering.ATEN_CHOICE.bind(tuple(nodes), layout, **scalars)])


def topk(rows: int, n: int, k: int, dtype: torch.dtype = BF16):
    """The ``topk_op`` pass's op: indices of the top k along the last dimension."""
    nodes = [realize_inputs(_input("x", (rows, n), dtype))]
    layout = ir.FixedLayout(ROCM, torch.int64, [rows, k])
    scalars = {"k": k, "dim": -1, "largest": True, "sorted": True}
    return FixedKernelInputs(nodes, layout, scalars), [topk_lowering.ATEN_CHOICE.bind(tuple(nodes), layout, **scalars)]


# ------------------------------------------------------------------------------- the offers

# (preset, op, inputs, families offered beside ATen, in the preset's order)
OFFERS = {
    "gfx950_mm": ("gfx950", "mm", lambda: mm(64, 256, 512), ["triton.gemm", "flydsl.gemm"]),
    "gfx1250_mm": ("gfx1250", "mm", lambda: mm(64, 256, 512),
                   ["triton.gemm", "triton.tdm_gemm", "flydsl.tdm_gemm", "flydsl.gemm"]),
    "gfx1250_addmm": ("gfx1250", "addmm", lambda: addmm(64, 256, 512),
                      ["triton.gemm", "triton.tdm_gemm", "flydsl.tdm_gemm", "flydsl.gemm"]),
    "gfx950_mxfp8_scaled_mm": ("gfx950", "scaled_mm", lambda: scaled_mm(64, 256, 512, "mx"), ["flydsl.mx_scaled_mm"]),
    "gfx1250_fp8_rowwise_bias": ("gfx1250", "scaled_mm", lambda: scaled_mm(64, 256, 512, "row", bias=True),
                                 ["triton.tdm_gemm", "flydsl.tdm_gemm"]),
    "gfx950_grouped_mm": ("gfx950", "grouped_mm", lambda: grouped_mm(256, 128, 256, 8), ["flydsl.grouped_mm"]),
    "gfx1250_grouped_mm": ("gfx1250", "grouped_mm", lambda: grouped_mm(256, 128, 256, 8), ["flydsl.grouped_mm"]),
    "gfx950_rms_norm": ("gfx950", "rms_norm", lambda: rms_norm(64, 1024), ["helion.rmsnorm"]),
    "gfx950_topk_vocab": ("gfx950", "topk", lambda: topk(8, 32000, 50), ["triton.topk"]),
    "gfx950_topk_router": ("gfx950", "topk", lambda: topk(4096, 128, 8, torch.float32), ["triton.topk"]),
}


def _expected_configs(family: str, kernel_inputs, op: str, target: str) -> list[dict]:
    """The family's own candidates for this instance: its configs() (the quick budget: 4)."""
    from inductor_ext.lowering import adapters

    module = registry.get(family)
    problem = adapters.prepare(module, kernel_inputs, op).problem
    return [dataclasses.asdict(c) for c in module.configs(problem, target)[:4]]


@pytest.mark.parametrize("case", sorted(OFFERS))
def test_each_family_is_offered_beside_aten_with_its_configs(rocm, case: str) -> None:
    target, op, make, families = OFFERS[case]
    kernel_inputs, aten = make()
    _, offered = rocm(target, op, kernel_inputs, aten)
    decision = decision_record.decisions[-1]
    assert decision.reason == "benchmark" and offered[0] is aten[0]
    kinds = [c["family"] for c in decision.candidates]
    assert kinds[0] == "aten" and list(dict.fromkeys(kinds[1:])) == families, kinds
    for family in families:
        got = [c["config_dict"] for c in decision.candidates if c["family"] == family]
        assert got == _expected_configs(family, kernel_inputs, op, target), family
    for choice, candidate in zip(offered, decision.candidates):
        assert choice.name == candidate["name"]
        if candidate["family"] != "aten" and registry.get(candidate["family"]).choice_kind == "extern":
            # extern: a registered, callable kernel
            assert choice.name.startswith(f"ext_{candidate['family'].replace('.', '_')}_")
            # the op's inputs, in its order (addmm's bias as a broadcast view of the same buffer)
            assert [n.get_name() for n in choice.input_nodes] == [n.get_name() for n in kernel_inputs.nodes()]


@pytest.mark.parametrize("case, target, op, make, family, why", [
    ("b_row_major", "gfx1250", "mm", lambda: mm(64, 256, 512, weight_t=False), "flydsl.tdm_gemm",
     "needs A and B contiguous along K"),
    ("k_not_tdm_multiple", "gfx1250", "mm", lambda: mm(64, 256, 200), "flydsl.tdm_gemm", "not a multiple of 32"),
    ("fp8_rowwise_on_gfx950", "gfx950", "scaled_mm", lambda: scaled_mm(64, 256, 512, "row"), "flydsl.mx_scaled_mm",
     "MX needs float8_e8m0fnu block scales"),
    ("mx_on_gfx1250", "gfx1250", "scaled_mm", lambda: scaled_mm(64, 256, 512, "mx"), "triton.tdm_gemm",
     "fp32 tensor-wise or row-wise scales only"),
    ("rms_norm_fp64", "gfx950", "rms_norm", lambda: rms_norm(8, 64, torch.float64), "helion.rmsnorm",
     "takes an input in"),
    ("topk_k_over_64", "gfx950", "topk", lambda: topk(8, 1000, 100), "triton.topk", "k=100 is outside 1..64"),
])
def test_a_refusal_is_logged_with_its_reason(rocm, caplog, case, target, op, make, family, why) -> None:
    kernel_inputs, aten = make()
    with records_of(caplog, ext_choices.log.name):
        _, offered = rocm(target, op, kernel_inputs, aten)
    decision = decision_record.decisions[-1]
    assert family not in {c["family"] for c in decision.candidates}
    lines = [r.getMessage() for r in caplog.records if f"ext: {family} not offered" in r.getMessage()]
    assert len(lines) == 1 and why in lines[0] and "(problem: " in lines[0], lines
    if len(offered) == 1:  # no family could serve it: ATen alone, and the decision says why
        assert offered[0] is aten[0] and decision.reason.startswith("fallback: ") and why in decision.reason


@pytest.mark.parametrize("case", ["gfx950_mm", "gfx1250_fp8_rowwise_bias", "gfx950_grouped_mm", "gfx950_rms_norm",
                                  "gfx950_topk_router"])
def test_cached_winner_comes_back_as_the_one_choice(rocm, case: str) -> None:
    target, op, make, _ = OFFERS[case]
    kernel_inputs, aten = make()
    choices, offered = rocm(target, op, kernel_inputs, aten)
    decision = decision_record.decisions[-1]
    winner = next(c for c, cand in zip(offered, decision.candidates)
                  if cand["family"].startswith(("flydsl", "helion", "triton.topk")))
    timings = {c: 1.0 for c in offered} | {winner: 0.25}
    assert choices.override_best_choice(winner, timings) is winner
    family = decision.candidates[decision.index_of(winner)]["family"]
    entry = ext_choices.cache_for(choices.config).get(decision.key)
    assert entry.winner == family and entry.aten_time_us == 1000.0
    _, again = rocm(target, op, kernel_inputs, aten)
    assert [c.name for c in again] == [winner.name]
    assert decision_record.decisions[-1].reason == "cache" and decision_record.decisions[-1].winner == winner.name


def test_a_cached_aten_win_keeps_aten(rocm) -> None:
    kernel_inputs, aten = mm(64, 256, 512)
    choices, offered = rocm("gfx1250", "mm", kernel_inputs, aten)
    timings = {c: 0.5 for c in offered} | {offered[0]: 0.1}
    choices.override_best_choice(offered[0], timings)
    _, again = rocm("gfx1250", "mm", kernel_inputs, aten)
    assert again == [aten[0]] and decision_record.decisions[-1].reason == "cache"


def test_flydsl_is_not_offered_for_cpu_tensors_even_in_interpret_mode() -> None:
    """A FlyDSL launch without a ROCm GPU aborts the process: FlyDSL families have no CPU executor."""
    interpret = presets.resolve({"preset": "gfx950", "interpret": True})
    assert "no CPU executor" in refusals.here(interpret, registry.get("flydsl.gemm"), "cpu").reason
    assert refusals.here(interpret, registry.get("helion.rmsnorm"), "cpu") is None  # the interpreter
    assert refusals.here(interpret, registry.get("triton.gemm"), "cpu") is None
    assert [f.name for f in ext_choices.offered_families(interpret, "mm", "cpu")] == ["triton.gemm"]
    plain = presets.resolve({"preset": "gfx950"})
    assert "options={'preset': 'gfx950', 'interpret': True}" in refusals.here(
        plain, registry.get("helion.rmsnorm"), "cpu").reason


# ----------------------------------------- the kernels Inductor renders from triton.tdm_gemm


def _inductor_kernel(choice) -> KernelSource:
    """The Triton kernel Inductor generated for a template choice, as a KernelSource to compile
    (Inductor's launcher decorator dropped: the compile needs the @triton.jit function only)."""
    text = open(choice.bmreq.module_path).read()
    source = re.sub(r"@triton_heuristics\.template\(.*?\n\)\n", "", text, flags=re.S)
    signature = eval(re.search(r"'signature': (\{[^}]*\})", text).group(1))  # a dict of strings
    name = re.search(r"@triton\.jit\ndef (\w+)\(", source).group(1)
    launch = {k: int(v) for k, v in re.findall(r"^(num_warps|num_stages)=(\d+),", text, re.M)}
    return KernelSource(name=name, source=source, template="triton.tdm_gemm", config={}, signature=signature,
                        launch=launch)


def _rendered_tdm_choice(kernel_inputs, aten: list, op: str, cache: str) -> KernelSource:
    config = presets.resolve({"preset": "gfx1250", "autotune_cache": cache, "templates": ["triton.tdm_gemm"]})
    offered = ext_choices.ExtChoices(config).offer(op, kernel_inputs, aten)
    return _inductor_kernel(offered[1])


def test_inductor_renders_the_tdm_template_for_mm(rocm, monkeypatch, tmp_path) -> None:
    """mm through the same template: two named inputs, no scale step (the compile of this frame
    is the family's own tier I; scaled_mm's is compiled below)."""
    _pretend_rocm(monkeypatch, "gfx1250")  # ``rocm`` holds the graph being lowered
    ks = _rendered_tdm_choice(*mm(64, 256, 512), "mm", str(tmp_path / "autotune.db"))
    assert "def triton_ext_tdm_gemm(arg_A, arg_B, out_ptr0)" in ks.source
    assert "SCALING : tl.constexpr = 0" in ks.source and "tl.load(SA" not in ks.source
    assert "tl.make_tensor_descriptor(A" in ks.source


@pytest.fixture(scope="module")
def rendered_scaled_mm(isa_cache: str | None, tmp_path_factory) -> tuple[str, dict[str, str]]:
    """The first triton.tdm_gemm choice of a row-wise fp8 scaled_mm with a bias, as Inductor renders
    it, compiled for gfx1250."""
    mp = pytest.MonkeyPatch()
    try:
        with V.set_graph_handler(GraphLowering(torch.fx.symbolic_trace(lambda x: x))):
            _pretend_rocm(mp, "gfx1250")
            ks = _rendered_tdm_choice(*scaled_mm(64, 256, 512, "row", bias=True), "scaled_mm",
                                      str(tmp_path_factory.mktemp("autotune") / "autotune.db"))
    finally:
        mp.undo()
    return ks.source, isa.compile_for_target(ks, "gfx1250", cache=isa_cache)


@pytest.mark.isa
def test_inductor_renders_the_tdm_template_for_scaled_mm_and_it_compiles_for_gfx1250(rendered_scaled_mm) -> None:
    source, asm = rendered_scaled_mm
    facts = amd.INSTRUCTIONS["gfx1250"]
    isa.assert_has_instructions(asm, "gfx1250", [facts["tdm_load"], facts["tdm_wait"], facts["wmma_fp8"]])
    # the scales and the bias are template inputs, applied to the fp32 accumulator
    assert "def triton_ext_tdm_gemm(arg_A, arg_B, arg_SA, arg_SB, arg_BIAS, out_ptr0)" in source
    assert "SCALING : tl.constexpr = 2" in source and "HAS_BIAS : tl.constexpr = True" in source
    assert re.search(r"acc = acc \* tl\.load\(SA \+ idx_m \* 1", source) and "tl.load(BIAS + idx_n * 1" in source
