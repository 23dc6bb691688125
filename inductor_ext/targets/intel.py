"""Intel GPUs through XPU."""

from __future__ import annotations

from typing import Any

from inductor_ext.targets.base import Target, Vendor

XPU = Target("xpu", "intel", "xpu", "Intel GPU (XPU): SYCL and Triton kernels")

PRESETS = {
    "xpu": {
        "description": "Intel XPU: ATen and Inductor's XPU codegen (no ext templates verified yet)",
        "target": "xpu",
        "passes": [], "templates": [], "autotune": "off", "pdl": "off", "template_margin": 0.0,
    },
}


def detect(device: Any) -> tuple[str, str] | None:
    return ("xpu", "Intel GPU") if device.type == "xpu" else None


VENDOR = Vendor("intel", (XPU,), {}, PRESETS, detect, order=40)
