"""The model zoo on each device preset in interpret mode: the kernels the preset's device would get
(ext's GEMM templates forced wherever they take the GEMM, so a model's numbers go through them),
run on CPU tensors by ext's executors: Triton's interpreter (hopper, blackwell, gfx1250), the
Metal-on-CPU executor (mps), Intel's OpenCL CPU device (xpu). The decoder and the MoE, inference and
one training step, against eager. The default run holds one case per preset; ``pytest -m zoo`` the
rest."""

from __future__ import annotations

from typing import Any

import pytest

import zoo_models as zoo
from inductor_ext import presets
from inductor_ext.testing.sycl_device import SKIP_REASON as SYCL_MISSING

PRESETS = ("hopper", "blackwell", "gfx1250", "mps", "xpu")
MODELS = ("llama", "mixtral")
# The family that must have served at least one of the model's fp32 GEMMs (prefill and training
# shapes, M = 16). None for mps: its Metal GEMM templates take decode (M <= 4) and fp8 GEMMs only, so
# ATen serves these; the Metal codegen still generates every other kernel.
SERVES = {"hopper": "triton.gemm", "blackwell": "triton.gemm", "gfx1250": "triton.gemm", "mps": None,
          "xpu": "sycl.gemm"}
DEFAULT = {("hopper", "llama", "inference"), ("blackwell", "mixtral", "training"), ("gfx1250", "llama", "inference"),
           ("mps", "mixtral", "training"), ("xpu", "llama", "inference")}


def options(preset: str) -> dict[str, Any]:
    # Every family of the preset is forced: a family that serves a GEMM then computes it, whatever
    # the interpreter's timings (ATen always wins those). One that cannot run on CPU tensors
    # (FlyDSL, CuTeDSL) or refuses the shape leaves it to ATen with a log line.
    return {"preset": preset, "interpret": True, "force_template": list(presets.PRESETS[preset]["templates"])}


def _marks(preset: str, case: tuple[str, str, str]) -> list[pytest.MarkDecorator]:
    marks = [] if case in DEFAULT else [pytest.mark.zoo]
    if preset == "xpu":
        marks += [pytest.mark.sycl, pytest.mark.skipif(SYCL_MISSING is not None,
                                                        reason=f"SYCL kernels cannot run here: {SYCL_MISSING}")]
    return marks


CASES = [pytest.param(p, m, w, marks=_marks(p, (p, m, w)), id=f"{p}-{m}-{w}")
         for p in PRESETS for m in MODELS for w in ("inference", "training")]


@pytest.mark.interp
@pytest.mark.parametrize("preset, name, what", CASES)
def test_matches_eager(interpreter: None, preset: str, name: str, what: str) -> None:
    check = zoo.check_inference if what == "inference" else zoo.check_training_step
    served = check(name, options(preset))
    if SERVES[preset] is not None:
        assert SERVES[preset] in served, f"{preset}: no GEMM of {name} went through {SERVES[preset]} ({served})"
