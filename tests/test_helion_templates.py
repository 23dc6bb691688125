"""helion.rmsnorm and helion.softmax: one Helion kernel each, in three tiers.

- G: the FlyDSL and Triton modules Helion generates (tests/golden/helion_*/).
- I (``-m isa``): the FlyDSL backend's module compiled for gfx950 (runtime.helion_flydsl bridges
  FlyDSL 0.5), instructions asserted.
- C (``-m interp``): the Triton backend's kernel in Triton's interpreter vs kernels.norms.
"""

from __future__ import annotations

import os
import re
import sys

if "triton" not in sys.modules:  # Triton picks its interpreter at first import (see conftest.py)
    os.environ["TRITON_INTERPRET"] = "1"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from inductor_ext.kernels.norms import rms_norm_reference  # noqa: E402
from inductor_ext.kernels.softmax import softmax_reference  # noqa: E402
from inductor_ext.templates.family import OpSpec, TensorSpec  # noqa: E402
from inductor_ext.templates.helion import rmsnorm, softmax  # noqa: E402
from inductor_ext.testing import golden, isa  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"
RMS, SMX = rmsnorm.RmsNormProblem(64, 1000), softmax.SoftmaxProblem(64, 1000)
CFG = rmsnorm.RmsNormConfig(1)


@pytest.mark.parametrize("family,problem", [(rmsnorm, RMS), (softmax, SMX)], ids=["rmsnorm", "softmax"])
@pytest.mark.parametrize("backend", ["flydsl", "triton"])
def test_generated_source_golden(family, problem, backend: str) -> None:
    text = family.source(problem, CFG, backend)
    assert re.search(r"# src\[\w+\.py:\d+\]", text)  # Helion cites the body's lines: not pinned by the golden
    text = re.sub(r"(# src\[\w+\.py):\d+\]", r"\1]", text)
    golden.assert_golden(GOLDEN / family.NAME.replace(".", "_"), f"{backend}_{problem.rows}x{problem.n}", text)
    if backend == "flydsl":  # the code FlyDSL 0.5 needs the alias for
        assert "from flydsl.expr.vector import" in text


# -------------------------------------------------------------------------------- tier I ISA

ISA = {name: (family, [pattern for _, pattern in family.KEY_INSTRUCTIONS["gfx950"]])
       for name, family in (("rmsnorm", rmsnorm), ("softmax", softmax))}


@pytest.fixture(scope="module")
def compiled(isa_cache: str | None) -> dict[str, list[dict[str, str]]]:
    return {"rmsnorm": rmsnorm.isa_many([(RMS, CFG, "gfx950"), (RMS, rmsnorm.RmsNormConfig(4), "gfx950")], cache=isa_cache),
            "softmax": softmax.isa_many([(SMX, CFG, "gfx950")], cache=isa_cache)}


@pytest.mark.isa
@pytest.mark.parametrize("name", sorted(ISA))
def test_flydsl_backend_compiles_for_gfx950(compiled: dict[str, list[dict[str, str]]], name: str) -> None:
    import json

    for asm in compiled[name]:
        isa.assert_has_instructions(asm, "gfx950", ISA[name][1])
        meta = json.loads(asm["metadata"])
        (kernel,) = meta["kernels"].values()
        assert kernel["wavefront_size"] == 64 and kernel["vgpr_spill_count"] == 0


def test_codegen_refuses_a_process_with_flydsl_mlir(monkeypatch: pytest.MonkeyPatch) -> None:
    from inductor_ext.templates.helion import common

    monkeypatch.setitem(sys.modules, "flydsl._mlir", object())
    with pytest.raises(RuntimeError, match="clash"):
        common._generate(rmsnorm.rmsnorm_body, "flydsl", 1, (("tensor", (2, 8), (8, 1), "float32"),
                                                            ("tensor", (8,), (1,), "float32"), 1e-6))


# ----------------------------------------------------------------------- family protocol


def test_problem_for() -> None:
    x = TensorSpec((2, 3, 1000), (3000, 1000, 1), "bfloat16")
    w = TensorSpec((1000,), (1,), "bfloat16")
    p = rmsnorm.problem_for(OpSpec("rms_norm", (x, w), x, {"normalized_shape": [1000], "eps": 1e-5}))
    assert (p.rows, p.n, p.eps) == (6, 1000, 1e-5)
    p = rmsnorm.problem_for(OpSpec("rms_norm", (x, w), x, {"normalized_shape": [1000], "eps": None}))
    assert p.eps == torch.finfo(torch.float32).eps  # torch.rms_norm's default: its math dtype's epsilon
    assert "last dimension" in rmsnorm.problem_for(OpSpec("rms_norm", (x, None), x, {"normalized_shape": [3, 1000]}))
    assert "contiguous" in rmsnorm.problem_for(OpSpec("rms_norm", (TensorSpec((4, 8), (1, 4), "bfloat16"), None),
                                                      x, {"normalized_shape": [8]}))
    p = softmax.problem_for(OpSpec("softmax", (x,), x, {"dim": 2}))
    assert (p.rows, p.n) == (6, 1000)
    assert "last dimension" in softmax.problem_for(OpSpec("softmax", (x,), x, {"dim": 0}))


# ---------------------------------------------------------------------- tier C interpreter


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("shape,dtype", [((1, 1000), torch.bfloat16), ((3, 5, 96), torch.float16), ((7, 33), torch.float32)],
                         ids=["one_row_bf16", "3d_fp16", "odd_fp32"])
@pytest.mark.parametrize("block_m", [1, 4])
def test_interp_rmsnorm(shape: tuple[int, ...], dtype: torch.dtype, block_m: int) -> None:
    from inductor_ext.runtime.triton_interp import interpreter_fixes

    g = torch.Generator().manual_seed(sum(shape))
    x, w = torch.randn(shape, generator=g).to(dtype), torch.randn(shape[-1], generator=g).to(dtype)
    problem = rmsnorm.RmsNormProblem(x.numel() // shape[-1], shape[-1], str(dtype).removeprefix("torch."), 1e-5)
    with interpreter_fixes():
        out = rmsnorm.call(problem, rmsnorm.RmsNormConfig(block_m), "gfx950", x, w)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(out, rms_norm_reference(x, w, 1e-5), rtol=tol, atol=tol)


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("shape,dtype", [((1, 1000), torch.bfloat16), ((3, 5, 96), torch.float16), ((7, 33), torch.float32)],
                         ids=["one_row_bf16", "3d_fp16", "odd_fp32"])
def test_interp_softmax(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    from inductor_ext.runtime.triton_interp import interpreter_fixes

    x = (torch.randn(shape, generator=torch.Generator().manual_seed(3)) * 4).to(dtype)
    problem = softmax.SoftmaxProblem(x.numel() // shape[-1], shape[-1], str(dtype).removeprefix("torch."))
    with interpreter_fixes():
        out = softmax.call(problem, rmsnorm.RmsNormConfig(1), "gfx950", x)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(out, softmax_reference(x), rtol=tol, atol=tol)
