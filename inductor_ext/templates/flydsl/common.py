"""What the FlyDSL families share outside the kernels: reading layouts off strides, size limits,
candidate filtering, flat tensor views and stand-in arguments for compile-only builds.

No FlyDSL or torch import at load (families are imported by module scan); torch is imported
inside the functions that take tensors.
"""

from __future__ import annotations

from typing import Any, Sequence, TypeVar

from inductor_ext.templates.flydsl.tiling import MAX_TENSOR_BYTES

C = TypeVar("C")


def major(stride: Sequence[int], k_axis: int, other_axis: int, k: int, vec: int = 8) -> tuple[bool, bool]:
    """(K is the contiguous dimension, ``vec``-element loads along it are aligned) of a 2-D operand.

    A run of ``vec`` along K needs K % vec == 0 (a run never crosses a row end, so masking K is
    exact) and the other stride a multiple of ``vec`` (every run starts 16-byte aligned); a run
    along the other dimension needs the K stride a multiple of ``vec``. Strides with neither
    dimension contiguous load one element at a time."""
    if stride[k_axis] == 1:
        return True, k % vec == 0 and stride[other_axis] % vec == 0
    if stride[other_axis] == 1:
        return False, stride[k_axis] % vec == 0
    return True, False


def size_reason(*numels: int, elem_bytes: float) -> str | None:
    """Buffer offsets are 32-bit: every operand stays under 2 GiB."""
    big = [n for n in numels if n * elem_bytes >= MAX_TENSOR_BYTES]
    return f"an operand of {big[0] * elem_bytes / 2**30:.1f} GiB exceeds the 2 GiB buffer range" if big else None


def fitting(table: Sequence[C], m: int, n: int) -> list[C]:
    """Configs whose tile is not far larger than the problem (at least one)."""
    fit = [c for c in table if c.block_m <= max(16, 2 * m) and c.block_n <= max(16, 2 * n)]  # type: ignore[attr-defined]
    return fit or [min(table, key=lambda c: c.block_m * c.block_n)]  # type: ignore[attr-defined]


def placeholder(dtype: str, numel: int = 64) -> Any:
    """A CPU tensor standing in for a device one in a compile-only build (FlyDSL reads its dtype and
    layout, never its data)."""
    import torch

    return torch.zeros(numel, dtype=getattr(torch, dtype))


def span(t: Any) -> int:
    """Elements from a view's first to its last element (its flat extent)."""
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) if t.numel() else 0


def span_bytes(t: Any) -> int:
    return span(t) * t.element_size()


def flat(t: Any) -> Any:
    """A 1-D view over ``t``'s extent (kernels take flat buffers and strides as numbers)."""
    return t.as_strided((max(span(t), 1),), (1,))


def aligned(nbytes: int, *tensors: Any) -> bool:
    return all(t.data_ptr() % nbytes == 0 for t in tensors)


def check_device(family: str, tensor: Any) -> None:
    """FlyDSL launches only on a ROCm GPU: anywhere else a launch aborts the whole process (no
    libamdhip64), so say so first. A compile-only build (``COMPILE_ONLY=1``: the dry runs of
    ``call`` in the tests) traces the launcher with CPU stand-ins and launches nothing."""
    import os

    import torch

    if os.environ.get("COMPILE_ONLY") == "1":
        return
    if tensor.device.type != "cuda" or torch.version.hip is None:
        raise RuntimeError(f"{family} runs only on an AMD GPU under ROCm; got tensors on {tensor.device}"
                           f"{'' if torch.version.hip else ' with a torch built without ROCm'}")


def stream() -> Any:
    """The current PyTorch stream, as FlyDSL takes it (the null stream where there is no GPU: a
    compile-only dry run of ``call``)."""
    import flydsl.expr as fx
    import torch

    return fx.Stream(torch.cuda.current_stream() if torch.cuda.is_available() else None)


# ------------------------------------------------------------------ render and tier I, shared

_LAUNCHER = '''\
"""{family} {config_name} for {target}: the FlyDSL kernel {module}.build_launcher builds for
{problem!r}."""
from {problem_module} import {problem_cls}
from {config_module} import {config_cls}
from {module} import call

PROBLEM = {problem!r}
CONFIG = {config!r}


def {name}(*tensors):
    return call(PROBLEM, CONFIG, "{target}", *tensors)
'''


def render_launcher(module: str, family: str, problem: Any, config: Any, target: str, name: str, tiling: Any,
                    rows: int, cols: int, reason: str | None) -> Any:
    """A FlyDSL family's ``KernelSource``: a launcher module calling ``module.call`` (the kernel is
    built by the family's ``build_launcher``), with the grid, block, LDS and instruction it uses.
    ``reason`` (the family's refusal, if any) raises ValueError instead."""
    from dataclasses import asdict

    from inductor_ext.templates.base import KernelSource

    if reason:
        raise ValueError(f"{family} cannot serve {problem} with {config}: {reason}")
    source = _LAUNCHER.format(family=family, config_name=config.name(), target=target, module=module, problem=problem,
                              config=config, name=name, problem_module=type(problem).__module__,
                              problem_cls=type(problem).__qualname__, config_module=type(config).__module__,
                              config_cls=type(config).__qualname__)
    return KernelSource(name=name, source=source, template=family, config=asdict(config), language="flydsl",
                        launch={"grid": (-(-rows // config.block_m), -(-cols // config.block_n), 1),
                                "block": (tiling.threads, 1, 1), "lds_bytes": tiling.lds_bytes,
                                "mma": tiling.mma.instruction})


def compile_isa(module: str, family: str, targets: Sequence[str], jobs: Sequence[tuple[Any, Any, str]], *,
                reason: Any, static: Any, name: Any, cache: str | None = None) -> list[dict[str, str]]:
    """Tier I for a FlyDSL family: each (problem, config, target) compiled by ``module._compile_job``
    in ``runtime.flydsl``'s subprocess. ``reason(problem, config, target)`` refuses what the family
    does not serve; ``static(problem)`` keeps only what the compile depends on (sizes are runtime
    arguments); ``name(static_problem, config)`` labels the kernel."""
    from dataclasses import asdict

    from inductor_ext.runtime import flydsl as flydsl_runtime

    fly_jobs = []
    for problem, config, target in jobs:
        why = reason(problem, config, target) if target in targets else f"target not claimed (claims {tuple(targets)})"
        if why:
            raise ValueError(f"{family} {config.name()} on {target}: {why}")
        fixed = static(problem)
        fly_jobs.append(flydsl_runtime.FlyJob(f"{module}:_compile_job",
                                              {"problem": asdict(fixed), "config": asdict(config), "target": target},
                                              target, f"{name(fixed, config)}_{target}"))
    return flydsl_runtime.compile_jobs(fly_jobs, cache=cache)
