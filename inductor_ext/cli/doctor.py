"""``inductor-ext doctor``: the toolchains and executors found here, and what each preset can do.

For every preset: whether its kernels can be *compiled* for its device here (the ISA proof of
``inductor-ext asm``), *run* (its device is present) and *verified* on CPU (tier C: the Triton
interpreter, the Metal-on-CPU executor, Intel's OpenCL CPU device). Nothing is compiled or
written: each tool is looked up where ext itself looks for it (``zig ld.lld`` is named as such,
without the wrapper script a compile writes for it).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
from dataclasses import asdict, dataclass
from typing import Any, Callable


@dataclass
class Finding:
    name: str
    found: bool
    detail: str  # a path or a version; what to install when missing
    used_for: str


def _module(name: str, distribution: str, install: str, used_for: str) -> Finding:
    """Found without importing it (some take seconds, or fail to import without their device)."""
    if importlib.util.find_spec(name) is None:
        return Finding(distribution, False, install, used_for)
    try:
        return Finding(distribution, True, importlib.metadata.version(distribution), used_for)
    except importlib.metadata.PackageNotFoundError:
        return Finding(distribution, True, "version unknown", used_for)


def _tool(name: str, find: Callable[[], str | None], install: str, used_for: str) -> Finding:
    path = find()
    return Finding(name, path is not None, path or install, used_for)


def findings() -> list[Finding]:
    import torch

    from inductor_ext.runtime import toolchain
    from inductor_ext.runtime.sycl import wheels

    sycl = wheels.find()
    devices = [("cuda", torch.cuda.is_available() and torch.version.hip is None, "NVIDIA GPU"),
               ("rocm", torch.cuda.is_available() and torch.version.hip is not None, "AMD GPU"),
               ("mps", torch.backends.mps.is_available(), "Apple GPU"),
               ("xpu", hasattr(torch, "xpu") and torch.xpu.is_available(), "Intel GPU")]
    return [
        _module("triton", "triton", 'pip install "inductor-ext[nvidia]"',
                "Triton templates: compile for NVIDIA/AMD, run in the interpreter on CPU"),
        _tool("ptxas", toolchain.ptxas, "comes with triton (or set TRITON_PTXAS_PATH)", "NVIDIA PTX -> cubin"),
        _tool("cuobjdump", toolchain.cuobjdump, "comes with triton (or set TRITON_CUOBJDUMP_PATH)",
              "NVIDIA SASS listings (inductor-ext asm)"),
        _module("cutlass", "nvidia-cutlass-dsl", 'pip install "inductor-ext[nvidia]"', "CuTeDSL templates (blackwell)"),
        _module("cuda", "cuda-python", 'pip install "inductor-ext[nvidia]"', "CuTeDSL's CUDA driver bindings"),
        _tool("ld.lld", lambda: toolchain.ld_lld(write=False), toolchain.LLD_INSTALL,  # no zig wrapper written
              "AMDGPU code objects (gfx950, gfx1250)"),
        _module("flydsl", "flydsl", 'pip install "inductor-ext[amd]"', "FlyDSL templates (gfx950, gfx1250)"),
        _module("helion", "helion", 'pip install "inductor-ext[amd]"', "Helion templates (gfx950)"),
        _tool("g++", toolchain.gxx, "apt-get install g++",
              "Inductor's C++ kernels, the Metal-on-CPU executor and the SYCL host shim"),
        Finding("SYCL wheels", sycl is not None, f"intel-sycl-rt {sycl.version}" if sycl else
                (wheels.missing() or 'pip install "inductor-ext[sycl]"'), "SYCL kernels on the OpenCL CPU device"),
        _tool("spirv-dis", toolchain.spirv_dis, 'pip install "inductor-ext[sycl]"', "SPIR-V listings (asm --target xpu)"),
        *(Finding(f"{kind} device", ok, torch.cuda.get_device_name() if ok and kind in ("cuda", "rocm") else
                  ("present" if ok else "none here"), f"running on an {what}") for kind, ok, what in devices),
    ]


# preset -> (tools to compile for its device, device to run on, tools to verify it on CPU)
_NEEDS: dict[str, tuple[tuple[str, ...], str | None, tuple[str, ...]]] = {
    "cpu": (("g++",), None, ("g++",)),
    "hopper": (("triton", "ptxas"), "cuda device", ("triton",)),
    "blackwell": (("triton", "ptxas", "nvidia-cutlass-dsl", "cuda-python"), "cuda device", ("triton",)),
    "gfx950": (("triton", "ld.lld", "flydsl", "helion"), "rocm device", ("triton",)),
    "gfx1250": (("triton", "ld.lld", "flydsl"), "rocm device", ("triton",)),
    "mps": (("g++",), "mps device", ("g++",)),
    "xpu": (("SYCL wheels",), "xpu device", ("SYCL wheels", "g++")),
    "aten": ((), None, ()),
}


def preset_status(found: dict[str, bool]) -> list[dict[str, Any]]:
    """Per preset: can it compile, run, be verified here, and what is missing for each."""
    from inductor_ext import presets

    rows = []
    for name in presets.PRESETS:
        compile_with, device, verify_with = _NEEDS.get(name, ((), None, ()))
        lacking = lambda tools: [t for t in tools if not found.get(t)]  # noqa: E731
        row = {"preset": name, "compile": not lacking(compile_with), "run": device is None or found.get(device, False),
               "verify": not lacking(verify_with)}
        missing = sorted(set(lacking(compile_with)) | set(lacking(verify_with)))
        if not row["run"]:
            missing.append(f"no {device.removesuffix(' device')} device")
        row["missing"] = missing
        rows.append(row)
    return rows


def main(args: argparse.Namespace) -> int:
    from inductor_ext import tables

    tools = findings()
    status = preset_status({f.name: f.found for f in tools})
    if args.json:
        print(json.dumps({"tools": [asdict(f) for f in tools], "presets": status}, indent=2))
        return 0
    print(tables.render(("tool / executor", "found", "where / how to get it", "used for"),
                        [(f.name, "yes" if f.found else "no", f.detail, f.used_for) for f in tools]))
    print()
    yes = lambda ok: "yes" if ok else "no"  # noqa: E731
    print(tables.render(("preset", "compile", "run", "verify on CPU", "missing"),
                        [(r["preset"], yes(r["compile"]), yes(r["run"]), yes(r["verify"]), ", ".join(r["missing"]))
                         for r in status]))
    return 0
