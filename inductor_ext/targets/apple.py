"""Apple silicon through MPS."""

from __future__ import annotations

from typing import Any

from inductor_ext.targets.base import Target, Vendor

# Apple GPU facts Metal kernels are written against (all Apple7+ GPUs, M1 to M4).
SIMD_WIDTH = 32  # threads per SIMD group (threadExecutionWidth)
MAX_THREADS_PER_THREADGROUP = 1024
THREADGROUP_MEMORY_BYTES = 32 * 1024  # maxThreadgroupMemoryLength

MPS = Target("mps", "apple", "mps", "Apple GPU (MPS): Metal Shading Language kernels", codegen="metal")

# Every Metal family passed tier C (the Metal-on-CPU executor) and is autotuned against ATen on
# the Mac; vocab_softmax hands decode softmaxes over a large vocabulary to metal.softmax.
PRESETS = {
    "mps": {
        "description": "Apple MPS: Inductor's Metal codegen, Metal templates (FP8 scaled_mm, linear gemv, "
                       "MoE grouped_mm gemv, vocabulary softmax) autotuned against ATen",
        "target": "mps",
        "passes": ["vocab_softmax"],
        "templates": ["metal.scaled_mm", "metal.linear_gemv", "metal.grouped_mm", "metal.softmax"],
        "autotune": "quick", "pdl": "off", "template_margin": 0.02,
    },
}


def detect(device: Any) -> tuple[str, str] | None:
    return ("mps", "Apple GPU") if device.type == "mps" else None


VENDOR = Vendor("apple", (MPS,), {}, PRESETS, detect, order=30)
