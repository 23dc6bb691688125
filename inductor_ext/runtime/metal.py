"""Launching MSL kernels: on ``mps`` tensors through ``torch.mps.compile_shader`` (one library
per source, compiled once per process), on CPU tensors through the Metal-on-CPU executor.

``launch(source, kernel, grid, threadgroup, *args)`` dispatches ``grid`` threadgroups of
``threadgroup`` threads (ints or 1-3 tuples) with ``args`` (tensors, Python ints and floats)
bound in order to the kernel's buffers, the same way on both devices.
"""

from __future__ import annotations

import threading
from typing import Any

from inductor_ext.runtime import metal_cpu
from inductor_ext.runtime.metal_cpu.launch import as_dims

_mps_libraries: dict[str, Any] = {}
_lock = threading.Lock()


def _device_type(args: tuple[Any, ...]) -> str:
    import torch

    devices = {a.device.type for a in args if isinstance(a, torch.Tensor)}
    if len(devices) != 1:
        raise ValueError(f"a Metal kernel's tensors must all be on one device (mps, or cpu for the CPU "
                         f"executor); got {sorted(devices) or 'no tensors'}")
    return devices.pop()


def mps_library(source: str) -> Any:
    """``torch.mps.compile_shader(source)``, cached per source."""
    import torch

    with _lock:
        lib = _mps_libraries.get(source)
        if lib is None:
            lib = _mps_libraries[source] = torch.mps.compile_shader(source)
    return lib


def launch(source: str, kernel: str, grid: Any, threadgroup: Any, *args: Any) -> None:
    """Run ``kernel`` of ``source`` on the device of its tensors (``mps``, or ``cpu`` through
    the Metal-on-CPU executor, checked)."""
    g, tg = as_dims(grid, "grid"), as_dims(threadgroup, "threadgroup")
    device = _device_type(args)
    if device == "mps":
        threads = [g[i] * tg[i] for i in range(3)]
        getattr(mps_library(source), kernel)(*args, threads=threads, group_size=list(tg))
    elif device == "cpu":
        metal_cpu.run(source, kernel, g, tg, *args)
    else:
        raise ValueError(f"Metal kernels run on mps tensors (or cpu tensors through the CPU executor), not {device}")
