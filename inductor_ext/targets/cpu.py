"""The host CPU (and the place where every other target's kernels are tested)."""

from __future__ import annotations

import functools
import platform
from typing import Any

from inductor_ext.targets.base import INTERPRETER, Target, Vendor

# INTERPRETER: a Triton family's "cpu" target is Triton's interpreter (its small tiles, PDL calls
# as no-ops: runtime/triton_interp), for tests of its kernels on CPU tensors; compiles run GPU
# presets in interpret mode instead. CPU templates (RUNS_ON_CPU) are native here.
CPU = Target("cpu", "cpu", "cpu", "the host CPU: ATen, Inductor's C++ codegen and C++ GEMM templates",
             capabilities=frozenset({INTERPRETER}))
# The preset for devices ext has no preset for: plain Inductor, ATen GEMMs, dumps.
NONE = Target("none", "any", "any", "any other device: plain Inductor with ATen GEMMs")

PRESETS = {
    "cpu": {
        "description": "CPU: Inductor's C++ GEMM templates (AMX / AVX-512 / AVX2 micro-kernels, weights "
                       "packed once under freezing) autotuned against ATen (oneDNN / MKL), decode "
                       "attention as Inductor-compiled reductions and prefill attention as a C++ flash "
                       "kernel of ext's (AVX-512 or AVX2), each against ATen's SDPA",
        "target": "cpu",
        "passes": ["nvfp4_alpha_fold", "decode_attention_op", "prefill_attention_op"], "autotune": "model", "pdl": "off",
        # Only families whose kernels run on the CPU itself (RUNS_ON_CPU).
        "templates": ["cpp.gemm", "cpp.decode_attention", "cpp.flash_attention"],
        # CPU timings move with other processes: a template must win clearly to replace ATen.
        "template_margin": 0.05,
        # Inference graphs only (Inductor freezes under torch.no_grad()); guarded (lowering/frozen_params).
        "freezing": True,
    },
    "aten": {
        "description": "any other device: plain Inductor with ATen GEMMs, ext dumps only",
        "target": "none",
        "passes": [], "templates": [], "autotune": "off", "pdl": "off", "template_margin": 0.0,
    },
}


def host_name() -> str:
    """The host CPU as autotune records name it (their key's ``device_name``, as a GPU's name):
    its model and its form (``host_form``). A decision timed on one CPU is no evidence on another:
    a record made on an AVX-512 host names micro-kernels an AVX2 host cannot build (it fell back to
    ATen there), and 2-thread timings say little at 32."""
    return f"{_model_name()}, {host_form()}"


def host_form() -> str:
    """What decides which CPU kernels win, without the model's name: the ISA torch's CPU kernels
    run at (``ATEN_CPU_CAPABILITY`` honoured, as Inductor does), AMX and AVX512-BF16 where they are
    used, and the intra-op threads now, e.g. ``AVX512 AMX AVX512-BF16, 2 threads``. Decision tables
    (``autotune/decision_tables.py``) are per form."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    features = []
    if capability == "AVX512":
        features += ["AMX"] * torch.cpu._is_amx_tile_supported()
        features += ["AVX512-BF16"] * torch.cpu._is_avx512_bf16_supported()
    isa = " ".join([capability, *features])
    threads = torch.get_num_threads()
    return f"{isa}, {threads} thread{'' if threads == 1 else 's'}"


@functools.cache
def _model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass  # not Linux: the platform module's description
    return platform.processor() or platform.machine() or "unknown CPU"


def detect(device: Any) -> tuple[str, str] | None:
    return ("cpu", "CPU tensors") if device.type == "cpu" else None


VENDOR = Vendor("cpu", (CPU, NONE), {}, PRESETS, detect, order=0)
