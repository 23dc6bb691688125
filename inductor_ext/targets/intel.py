"""Intel GPUs through XPU."""

from __future__ import annotations

from typing import Any

from inductor_ext.targets.base import Target, Vendor

XPU = Target("xpu", "intel", "xpu", "Intel GPU (XPU): SYCL and Triton kernels", codegen="sycl")

# SYCL facts ext's SYCL kernels (codegen/sycl, templates/sycl) are generated for. Every Intel GPU
# (Xe: 8/16/32 lanes, Xe-HPC: 16/32) and Intel's OpenCL CPU device (4..64) support sub-groups of
# 16, so kernels that use sub-group operations require 16
# ([[sycl::reqd_sub_group_size(16)]]; the sub_group_size kernel property is ignored).
SYCL_SUB_GROUP_SIZE = 16
# Largest work-group ext's kernels use: every Intel GPU allows 512 or more (the CPU device 8192).
SYCL_WORK_GROUP_LIMIT = 256
# Work-group local memory ext's kernels stay within (Xe GPUs have 64 KiB per work-group).
SYCL_LOCAL_MEMORY_LIMIT = 64 * 1024

PRESETS = {
    "xpu": {
        # Kernels: Inductor's Triton codegen for XPU stays the default; options={"xpu_codegen":
        # "sycl"} (codegen/sycl) switches to ext's SYCL kernels, which interpret mode always uses.
        "description": "Intel XPU: SYCL GEMM/gemv templates against oneDNN; Inductor's Triton kernels "
                       "(xpu_codegen='sycl': ext's SYCL kernels)",
        "target": "xpu",
        "passes": [], "templates": ["sycl.gemm"], "autotune": "quick", "pdl": "off", "template_margin": 0.02,
    },
}


def detect(device: Any) -> tuple[str, str] | None:
    return ("xpu", "Intel GPU") if device.type == "xpu" else None


def device_name(device: Any) -> str:
    """The GPU as autotune records name it (their key's ``device_name``): one Intel GPU's timings
    (and subgroup sizes) are no evidence on another."""
    import torch

    return torch.xpu.get_device_name(device)


VENDOR = Vendor("intel", (XPU,), {}, PRESETS, detect, order=40)
