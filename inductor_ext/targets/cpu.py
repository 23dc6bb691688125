"""The host CPU (and the place where every other target's kernels are tested)."""

from __future__ import annotations

from typing import Any

from inductor_ext.targets.base import INTERPRETER, Target, Vendor

# INTERPRETER: ext's Triton templates run here only in Triton's interpreter (interpret mode),
# which also runs their PDL calls as no-ops (runtime/triton_interp).
CPU = Target("cpu", "cpu", "cpu", "the host CPU: ATen and Inductor's C++ codegen",
             capabilities=frozenset({INTERPRETER}))
# The preset for devices ext has no preset for: plain Inductor, ATen GEMMs, dumps.
NONE = Target("none", "any", "any", "any other device: plain Inductor with ATen GEMMs")

PRESETS = {
    "cpu": {
        "description": "CPU: ATen and Inductor's C++ codegen; Triton templates only in interpret mode",
        "target": "cpu",
        "passes": ["nvfp4_alpha_fold"], "autotune": "off", "pdl": "off",
        "templates": ["triton.gemm", "triton.nvfp4_gemm", "triton.nvfp4_dequant_gemm"],
        "template_margin": 0.0,
    },
    "aten": {
        "description": "any other device: plain Inductor with ATen GEMMs, ext dumps only",
        "target": "none",
        "passes": [], "templates": [], "autotune": "off", "pdl": "off", "template_margin": 0.0,
    },
}


def detect(device: Any) -> tuple[str, str] | None:
    return ("cpu", "CPU tensors") if device.type == "cpu" else None


VENDOR = Vendor("cpu", (CPU, NONE), {}, PRESETS, detect, order=0)
