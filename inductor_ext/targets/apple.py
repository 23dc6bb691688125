"""Apple silicon through MPS."""

from __future__ import annotations

import functools
import subprocess
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


@functools.cache
def chip_name() -> str:
    """The Apple chip as autotune records name an MPS device (their key's ``device_name``), e.g.
    "Apple M2 Pro": an M1's timings are no evidence on an M4. "mps" where macOS does not say."""
    try:
        done = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                              timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return "mps"
    name = done.stdout.strip()
    return name if done.returncode == 0 and name.startswith("Apple") else "mps"


VENDOR = Vendor("apple", (MPS,), {}, PRESETS, detect, order=30)
