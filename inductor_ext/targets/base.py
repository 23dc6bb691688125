"""What a hardware target is, as data: one ``Target`` per ISA, one ``Datasheet`` per part.

Vendor modules (``targets/nvidia.py``, ``targets/amd.py``, ...) hold these facts and nothing
else; every other layer asks the registry (``inductor_ext.targets``) instead of testing a
name's prefix, so a new vendor is one new file here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

# Capability names used across the package (a target lists the ones it has).
PDL = "pdl"  # programmatic dependent launch (griddepcontrol)
TF32 = "tf32"  # fp32 GEMMs may run on TF32 tensor cores (as torch's allow_tf32)
NVFP4_MMA = "nvfp4_mma"  # block-scaled NVFP4 MMA (tcgen05 kind::mxf4nvf4 block16)
MX_MMA = "mx_mma"  # MXFP4/MXFP8 block-scaled MMA with e8m0 scales
TDM = "tdm"  # AMD Tensor Data Mover (tensor_load_to_lds)
NVMMH = "nvmmh"  # nvMatmulHeuristics models this GPU
INTERPRETER = "interpreter"  # Triton templates run here only in Triton's interpreter


@dataclass(frozen=True)
class Datasheet:
    """Public peak figures of one accelerator (dense, no sparsity) and assumed efficiencies,
    for cost models. Never a measurement."""

    name: str
    peak_flops: dict[str, float]  # by dtype name: "bf16", "fp16", "fp32", "tf32", "fp8"
    hbm_bandwidth: float  # bytes/s
    link_bandwidth: float  # bytes/s, per GPU, one direction, all intra-node links together
    link_latency: float  # seconds per ring step inside a node
    gpus_per_node: int = 8
    internode_bandwidth: float = 50e9  # bytes/s per GPU (one 400 Gb/s NIC per GPU)
    internode_latency: float = 10e-6  # seconds per ring step across nodes
    collective_launch: float = 8e-6  # fixed cost of one collective (launch, protocol setup)
    kernel_launch: float = 2e-6  # fixed cost of one non-trivial compute kernel
    flops_efficiency: float = 0.70  # achievable fraction of peak FLOP/s for GEMM-like ops
    memory_efficiency: float = 0.80  # achievable fraction of HBM bandwidth
    link_efficiency: float = 0.80  # achievable fraction of link bandwidth (NCCL/RCCL bus bandwidth)
    source: str = ""

    def flops_for(self, dtype: Any) -> float:
        """Peak FLOP/s for a torch dtype (or its name); bf16's for anything unlisted."""
        name = str(dtype).removeprefix("torch.")
        key = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp32",
               "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}.get(name, "bf16")
        return self.peak_flops.get(key, self.peak_flops["bf16"])


@dataclass(frozen=True)
class Target:
    """One compile target: an ISA and the facts every layer needs about it."""

    name: str  # "sm_90a", "gfx950", "mps", "xpu", "cpu"
    vendor: str  # "nvidia", "amd", "apple", "intel", "cpu"
    device_type: str  # torch device type of its tensors ("cuda" for ROCm too)
    description: str
    capabilities: frozenset[str] = frozenset()
    # Triton: GPUTarget(backend, arch, warp_size) to compile for it without the device.
    triton: tuple[str, int | str, int] | None = None
    asm_key: str | None = None  # which compiled text holds its final assembly: "ptx", "amdgcn"
    mma_instruction: str | None = None  # regex of its matrix instruction in that assembly
    sass_mma_instruction: str | None = None  # the same in SASS (cuobjdump), NVIDIA only
    datasheet: str | None = None  # Datasheet name for cost models
    nvmmh_gpu: str | None = None  # nvMatmulHeuristics GPU enum member
    multiprocessors: int | None = None  # SMs / CUs of the reference part
    codegen: str | None = None  # ext's device codegen for it (codegen/<name>), if any

    def has(self, capability: str) -> bool:
        return capability in self.capabilities

    @property
    def compiles_with_triton(self) -> bool:
        return self.triton is not None


@dataclass(frozen=True)
class Vendor:
    """What one vendor module contributes to the registry."""

    name: str
    targets: tuple[Target, ...]
    datasheets: dict[str, Datasheet] = field(default_factory=dict)
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    # detect(torch.device, props) -> (preset name, why) or None when not this vendor's device
    detect: Callable[[Any], tuple[str, str] | None] = lambda device: None
    order: int = 100  # where its presets are listed (cpu first)
