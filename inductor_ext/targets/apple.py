"""Apple silicon through MPS."""

from __future__ import annotations

from typing import Any

from inductor_ext.targets.base import Target, Vendor

# Apple GPU facts Metal kernels are written against (all Apple7+ GPUs, M1 to M4).
SIMD_WIDTH = 32  # threads per SIMD group (threadExecutionWidth)
MAX_THREADS_PER_THREADGROUP = 1024
THREADGROUP_MEMORY_BYTES = 32 * 1024  # maxThreadgroupMemoryLength

MPS = Target("mps", "apple", "mps", "Apple GPU (MPS): Metal Shading Language kernels", codegen="metal")

PRESETS = {
    "mps": {
        "description": "Apple MPS: ATen and Inductor's Metal codegen (no ext templates verified yet)",
        "target": "mps",
        "passes": [], "templates": [], "autotune": "off", "pdl": "off", "template_margin": 0.0,
    },
}


def detect(device: Any) -> tuple[str, str] | None:
    return ("mps", "Apple GPU") if device.type == "mps" else None


VENDOR = Vendor("apple", (MPS,), {}, PRESETS, detect, order=30)
