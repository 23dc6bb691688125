"""What a family does after lowering is read from its record, so a non-GEMM family can claim an
NVIDIA target: it takes only its own configs (the GEMM tile policies need ``config_from_tile``),
PDL only where it declares ``pdl``, and a Triton template family its own launch grid."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

import _nongemm_nvidia_family as rows
from inductor_ext.autotune import policy
from inductor_ext.lowering import adapters, decision_record
from inductor_ext.lowering.passes import register_pass
from inductor_ext.lowering.passes.rms_norm_op import RmsNormOp
from inductor_ext.templates import registry
from inductor_ext.templates.triton import gemm

register_pass(RmsNormOp)  # the package registers it through its entry point (pyproject.toml)


@pytest.fixture
def families(monkeypatch: pytest.MonkeyPatch) -> dict[str, registry.Family]:
    found = {**registry.families(), rows.NAME: rows.FAMILY}
    monkeypatch.setattr(registry, "families", lambda: found)  # found as if it were a file in templates/
    return found


def test_a_non_gemm_family_takes_only_its_own_configs_on_nvidia() -> None:
    problem = rows.Problem(8, 64)
    assert not rows.FAMILY.takes_tiles and gemm.FAMILY.takes_tiles
    assert [p.name for p in policy.default_policies("sm_90a", rows.FAMILY)] == ["default"]
    assert [p.name for p in policy.default_policies("sm_90a", gemm.FAMILY)] == ["decode", "nvmatmulheuristics",
                                                                              "default"]
    # every policy of the target asked directly: the tile policies decline, never read problem.m
    for p in policy.default_policies("sm_90a"):
        assert p.applies(rows.FAMILY, problem, "sm_90a") is (p.name == "default")
    got = policy.candidates(rows.FAMILY, problem, "sm_90a", "full", policies=policy.default_policies("sm_90a"))
    assert got == [policy.Candidate(c, "default") for c in rows.ALL_CONFIGS]
    assert policy.candidates(rows.FAMILY, problem, "sm_90a", "full") == got


def test_a_non_gemm_family_on_nvidia_compiles_and_is_timed_against_aten(families, tmp_path) -> None:
    """hopper in interpret mode: the family's candidates and ATen's rms_norm are each timed, and
    the answer is right (the compile used to fail: decode_policy read ``problem.m``)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    x, w = torch.randn(8, 64), torch.randn(64)

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (64,), w, 1e-5) * 2

    options = {"preset": "hopper", "interpret": True, "templates": [rows.NAME], "passes": ["rms_norm_op"],
               "autotune": "quick", "autotune_cache": str(tmp_path / "cache.db"),
               "inductor": {"fx_graph_cache": False}}
    first = len(decision_record.decisions)
    rows.calls.clear()
    with torch.no_grad():
        got = torch.compile(fn, backend="ext", options=options)(x, w)
    torch.testing.assert_close(got, fn(x, w), rtol=1e-5, atol=1e-5)
    (decision,) = [d for d in decision_record.decisions[first:] if d.op == "rms_norm"]
    assert decision.reason != "autotune off" and not decision.reason.startswith("fallback"), decision.reason
    timed = {(c["kind"], c["family"]): c for c in decision.candidates if c["time_us"] is not None}
    assert ("aten", "aten") in timed and ("template", rows.NAME) in timed, decision.candidates
    ours = [c for c in decision.candidates if c["family"] == rows.NAME]
    assert [c["config_dict"] for c in ours] == [dataclasses.asdict(c) for c in rows.ALL_CONFIGS]
    assert {c["policy"] for c in ours} == {"default"}  # no GEMM tile policy proposed anything
    assert rows.calls and all(t == "sm_90a" for _, _, t in rows.calls)


def rows_grid(m, n, meta, *, cdiv):
    """One program per BLOCK_M rows, whatever the width: a row-wise kernel's grid."""
    return (cdiv(m, meta["BLOCK_M"]), 1, 1)


def test_a_triton_template_family_declares_its_launch_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    import sympy

    row_wise = dataclasses.replace(gemm.FAMILY, name="fake.row_wise_template", grid=rows_grid)
    found = {**registry.families(), row_wise.name: row_wise}
    monkeypatch.setattr(registry, "families", lambda: found)
    assert adapters.triton_template(gemm.NAME).grid(1000, 300, {"BLOCK_M": 64, "BLOCK_N": 128}) == (16 * 3, 1, 1)
    template = adapters.triton_template(row_wise.name)
    assert template.grid(1000, 300, {"BLOCK_M": 64, "BLOCK_N": 128}) == (16, 1, 1)
    m, n = sympy.symbols("m n", positive=True, integer=True)
    (x, y, z) = template.grid.sympy_call(m, n, {"BLOCK_M": 64})  # symbolic sizes: Inductor's CeilDiv
    assert (y, z) == (1, 1) and x.free_symbols == {m}
    with pytest.raises(registry.FamilyError, match="grid is the launch grid of a triton_template family"):
        dataclasses.replace(rows.FAMILY, grid=rows_grid)
