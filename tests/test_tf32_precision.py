"""fp32 GEMMs run at the precision PyTorch would use for the same op (issue 27).

PyTorch's default fp32 matmul precision is "highest" (full fp32); TF32 only after
``torch.set_float32_matmul_precision("high")`` (or "medium", or
``torch.backends.cuda.matmul.fp32_precision = "tf32"``). Lowering reads the setting at compile time
into the op's spec, the template family carries it in its problem (``GemmProblem.allow_tf32``), so
the kernel, the autotune cache key and the dumps all say which precision ran; Inductor's FX graph
cache keys on the same setting. The Triton interpreter drops the low mantissa bits of a TF32
dot's inputs as the GPU does (``runtime/triton_interp``), so tier C sees TF32's error.
"""

from __future__ import annotations

from typing import Iterator

import pytest
import torch

from _script_runner import interpret_env, run_json_script
from inductor_ext.autotune.cache import ProblemKey
from inductor_ext.lowering import ops
from inductor_ext.runtime.triton_interp import interpreter_fixes
from inductor_ext.templates.family import OpSpec, TensorSpec
from inductor_ext.templates.triton import gemm


@pytest.fixture
def matmul_precision() -> Iterator[None]:
    """Restores torch's fp32 matmul precision (legacy and per-backend settings) after the test."""
    legacy = torch.get_float32_matmul_precision()
    saved = {b: torch._C._get_fp32_precision_getter(b, "matmul") for b in ("cuda", "mkldnn")}
    yield
    torch.set_float32_matmul_precision(legacy)
    for backend, value in saved.items():
        torch._C._set_fp32_precision_setter(backend, "matmul", value)
    assert torch.get_float32_matmul_precision() == legacy  # not left in a mixed legacy/new state


def _mm_spec(dtype: str, precision: str | None) -> OpSpec:
    scalars = {} if precision is None else {"fp32_precision": precision}
    return OpSpec("mm", (TensorSpec((8, 16), (16, 1), dtype), TensorSpec((16, 32), (32, 1), dtype)),
                  TensorSpec((8, 32), (32, 1), dtype), scalars, "cuda")


# ------------------------------------------------------------------ the setting, read in lowering

@pytest.mark.parametrize("setting,expected", [("highest", "ieee"), ("high", "tf32"), ("medium", "tf32")])
def test_lowering_reads_the_legacy_setting(matmul_precision: None, setting: str, expected: str) -> None:
    torch.set_float32_matmul_precision(setting)
    assert ops.fp32_matmul_precision() == expected
    assert ops.problem_fp32_precision("addmm", ("float32", "float32", "float32")) == expected
    assert ops.problem_fp32_precision("mm", ("bfloat16", "bfloat16")) == ""  # not an fp32 GEMM


def test_lowering_reads_the_per_backend_setting(matmul_precision: None) -> None:
    assert ops.fp32_matmul_precision() == "ieee"  # PyTorch's default
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    assert ops.fp32_matmul_precision() == "tf32"
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    torch.backends.fp32_precision = "tf32"  # the generic parent does not override an explicit child
    assert ops.fp32_matmul_precision() == "ieee"
    torch.backends.fp32_precision = "none"


def test_inductor_fx_graph_cache_keys_on_the_setting(matmul_precision: None) -> None:
    # ext's compiled graphs hold kernels built for one precision: Inductor's FX graph key must differ
    from torch._inductor import codecache

    gm = torch.fx.symbolic_trace(lambda a, b: a @ b)
    inputs = [torch.randn(4, 4), torch.randn(4, 4)]

    def key() -> str:
        return codecache.compiled_fx_graph_hash(gm, inputs, {}, [])[0]

    torch.set_float32_matmul_precision("highest")
    ieee = key()
    torch.set_float32_matmul_precision("high")
    assert key() != ieee
    torch.set_float32_matmul_precision("highest")
    assert key() == ieee


# ------------------------------------------------------------------ the problem and the template

def test_problem_carries_the_precision_and_only_tf32_targets_use_it() -> None:
    assert gemm.problem_for(_mm_spec("float32", None)).allow_tf32 is False  # no setting: full fp32
    ieee, tf32 = gemm.problem_for(_mm_spec("float32", "ieee")), gemm.problem_for(_mm_spec("float32", "tf32"))
    assert (ieee.allow_tf32, tf32.allow_tf32) == (False, True)
    assert [gemm.input_precision(ieee, t) for t in ("sm_90a", "sm_100a")] == ["ieee", "ieee"]
    assert [gemm.input_precision(tf32, t) for t in ("sm_90a", "sm_100a")] == ["tf32", "tf32"]
    # AMD's fp32 MFMA/WMMA and the CPU have no TF32 here; 16-bit inputs never change
    assert [gemm.input_precision(tf32, t) for t in ("gfx950", "gfx1250", "cpu")] == ["ieee"] * 3
    assert gemm.input_precision(gemm.problem_for(_mm_spec("bfloat16", "tf32")), "sm_90a") == "ieee"
    assert gemm.kernel_name(tf32, gemm.GemmConfig(64, 64, 32)) != gemm.kernel_name(ieee, gemm.GemmConfig(64, 64, 32))


@pytest.mark.interp
def test_template_in_the_interpreter_computes_what_the_gpu_does() -> None:
    g = torch.Generator().manual_seed(27)
    a, b = torch.randn(37, 70, generator=g), torch.randn(70, 45, generator=g)
    config = gemm.GemmConfig(32, 32, 32, 8, 4, 1)
    with interpreter_fixes() as fixes:
        assert "tf32_dot" in fixes
        exact = gemm.run(a, b, config, target="sm_90a")
        tf32 = gemm.run(a, b, config, target="sm_90a", allow_tf32=True)
    torch.testing.assert_close(exact, a @ b, rtol=1e-5, atol=1e-5)

    def truncated(x: torch.Tensor) -> torch.Tensor:  # the tensor core reads the top 19 bits
        return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)

    torch.testing.assert_close(tf32, truncated(a) @ truncated(b), rtol=1e-5, atol=1e-5)
    assert (tf32 - a @ b).abs().max() > 1e-3  # TF32's error, which full fp32 would not show


def test_autotune_key_names_the_precision() -> None:
    fields = dict(op="mm", shapes=((8, 16), (16, 32)), strides=((16, 1), (32, 1)), dtypes=("float32",) * 2,
                  device_name="NVIDIA H200", arch="sm_90a")
    ieee, tf32 = ProblemKey(**fields, fp32_precision="ieee"), ProblemKey(**fields, fp32_precision="tf32")
    assert ieee.digest() != tf32.digest() and "tf32" in tf32.describe() and "tf32" not in ieee.describe()
    assert ProblemKey.from_dict(tf32.to_dict()) == tf32
    # a key the precision does not apply to is what it was before the field existed
    plain = ProblemKey(**{**fields, "dtypes": ("bfloat16",) * 2})
    assert "fp32_precision" not in plain.to_dict() and ProblemKey.from_dict(plain.to_dict()) == plain
    with pytest.raises(ValueError, match="fp32_precision must be one of"):
        ProblemKey(**fields, fp32_precision="highest")


# ------------------------------------------------------------------ a compile, in interpret mode

@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("tf32")
    return run_json_script("_tf32_script.py", str(out), timeout=600, env=interpret_env(out))


@pytest.mark.interp
def test_default_precision_compiles_ieee_and_matches_eager(compiled: dict) -> None:
    run = compiled["default"]
    assert run["input_precisions"] == ["ieee"]
    assert run["winners"] and all(w.startswith("triton_ext_gemm") for w in run["winners"])
    assert run["max_rel_err"] < 1e-5, run  # full fp32: TF32 would be ~1e-3
    assert all(p["fp32_precision"] == "ieee" for p in run["problems"])  # the dumps' decisions say so
    assert all(k["fp32_precision"] == "ieee" for k in run["keys"])


@pytest.mark.interp
def test_high_precision_compiles_tf32_with_tf32_error(compiled: dict) -> None:
    run = compiled["high"]
    assert run["input_precisions"] == ["tf32"]
    assert 1e-4 < run["max_rel_err"] < 1e-2, run  # TF32's 10 mantissa bits, as on the GPU
    assert all(p["fp32_precision"] == "tf32" for p in run["problems"])
    default_digests = {k["digest"] for k in compiled["default"]["keys"]}
    assert not default_digests & {k["digest"] for k in run["keys"]}  # no cached winner is shared


@pytest.mark.parametrize("op", ["mm", "bmm", "addmm"])
def test_every_fp32_gemm_keys_its_decision_on_the_matmul_precision(op):
    """bmm as much as mm: a batched fp32 GEMM runs TF32 or IEEE as torch says, so its key and its
    dump must say which (a bmm decided under one precision must not serve the other)."""
    saved = torch.backends.cuda.matmul.fp32_precision
    try:
        for setting, want in (("tf32", "tf32"), ("ieee", "ieee")):
            torch.backends.cuda.matmul.fp32_precision = setting
            assert ops.problem_fp32_precision(op, ("float32", "float32")) == want
        assert ops.problem_fp32_precision(op, ("bfloat16", "bfloat16")) == ""
    finally:
        torch.backends.cuda.matmul.fp32_precision = saved
