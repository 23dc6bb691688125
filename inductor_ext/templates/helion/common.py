"""What the Helion families share: a kernel body written once, made into a Helion kernel per backend,
its generated source, the gfx950 compile of the FlyDSL backend's code, and the two launches.

Helion imports Triton and torch, so nothing here imports them at load: kernel bodies are plain
functions whose ``torch`` and ``hl`` globals are bound when a kernel is first made (Helion parses
the body's source and resolves its globals while tracing).

Helion specializes on shapes and strides: the generated code bakes them in, so a problem carries
every size and a tier I compile is per problem. Code generation runs in this process, which must
not have FlyDSL's MLIR loaded (see ``runtime/helion_flydsl.py``).
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

from inductor_ext.runtime import asm_cache
from inductor_ext.runtime import flydsl as flydsl_runtime
from inductor_ext.runtime import helion_flydsl

# Helion backend per target: FlyDSL on gfx950 (wave64: Helion's FlyDSL code assumes 64 lanes);
# CPU tensors run the Triton backend in Triton's interpreter.
BACKENDS = {"gfx950": "flydsl", "cpu": "triton"}

TensorArg = tuple[str, tuple[int, ...], tuple[int, ...], str]  # ("tensor", shape, stride, dtype)


def tensor_arg(shape: tuple[int, ...], dtype: str, stride: tuple[int, ...] | None = None) -> TensorArg:
    if stride is None:
        stride, step = [], 1
        for size in reversed(shape):
            stride.insert(0, step)
            step *= size
    return ("tensor", tuple(shape), tuple(stride), dtype)


def _stand_ins(args: tuple[Any, ...]) -> tuple[Any, ...]:
    import torch

    out = []
    for a in args:
        if isinstance(a, tuple) and a and a[0] == "tensor":
            _, shape, stride, dtype = a
            span = 1 + sum((s - 1) * st for s, st in zip(shape, stride))
            out.append(torch.zeros(max(span, 1), dtype=getattr(torch, dtype)).as_strided(shape, stride))
        else:
            out.append(a)
    return tuple(out)


@functools.lru_cache(maxsize=None)
def make_kernel(body: Callable[..., Any], backend: str, block_m: int) -> Any:
    """The Helion kernel of ``body`` for ``backend`` with ``block_m`` rows per program."""
    import helion
    import helion.language as hl
    import torch

    body.__globals__.setdefault("hl", hl)
    body.__globals__.setdefault("torch", torch)
    return helion.kernel(body, backend=backend, config=helion.Config(block_sizes=[block_m]))


@functools.lru_cache(maxsize=256)
def generated_code(body: Callable[..., Any], backend: str, block_m: int, args: tuple[Any, ...]) -> str:
    """Helion's generated module for ``args`` (tensor specs from :func:`tensor_arg`, scalars as is),
    cached on disk (``runtime.asm_cache``) by the body's source, the arguments and Helion's version:
    importing Helion and tracing costs seconds."""
    import hashlib
    import importlib.metadata
    import inspect
    import json

    # the body's first line too: Helion's code cites the body's source lines (``# src[rmsnorm.py:NN]``)
    key = hashlib.sha256(json.dumps([inspect.getsource(body), body.__code__.co_firstlineno, backend, block_m,
                                     repr(args), importlib.metadata.version("helion")]).encode()).hexdigest()
    path = asm_cache.cache_dir() / f"helion-{body.__name__}-{backend}-{key[:24]}.json.gz"
    cached = asm_cache.read(path, key)
    if cached is not None:
        return cached["code"]
    code = _generate(body, backend, block_m, args)
    asm_cache.write(path, key, {"code": code})
    return code


def _generate(body: Callable[..., Any], backend: str, block_m: int, args: tuple[Any, ...]) -> str:
    if "flydsl._mlir" in sys.modules:  # checked before importing Helion, which takes seconds
        raise RuntimeError("Helion code generation needs a process without FlyDSL's MLIR loaded (its lowering "
                           "imports CuTeDSL, whose bindings clash with FlyDSL's)")
    import helion

    kernel = make_kernel(body, backend, block_m)
    return kernel.bind(_stand_ins(args)).to_code(helion.Config(block_sizes=[block_m]))


def render(family: str, body: Callable[..., Any], name: str, config: Any, target: str, rows: int,
           args: tuple[Any, ...]) -> Any:
    """The ``KernelSource`` of a row-wise Helion family: the module Helion generates for the target's
    backend, launched one wave per row (``config.block_m`` rows per program)."""
    from dataclasses import asdict

    from inductor_ext.templates.base import KernelSource

    backend = BACKENDS[target]
    return KernelSource(name=name, source=generated_code(body, backend, config.block_m, args), template=family,
                        config=asdict(config), language=backend,
                        launch={"grid": (-(-rows // config.block_m), 1, 1), "block": (64 * config.block_m, 1, 1)})


def flydsl_isa(body: Callable[..., Any], jobs: list[tuple[str, int, tuple[Any, ...]]], *,
               cache: str | None = None) -> list[dict[str, str]]:
    """The FlyDSL backend's modules compiled for gfx950: jobs of (name, block_m, args)."""
    fly = [flydsl_runtime.FlyJob("inductor_ext.runtime.helion_flydsl:compile_job",
                                 {"code": generated_code(body, "flydsl", block_m, args), "host": body.__name__,
                                  "args": list(args)}, "gfx950", name)
           for name, block_m, args in jobs]
    return flydsl_runtime.compile_jobs(fly, cache=cache)


def run(body: Callable[..., Any], block_m: int, args: tuple[Any, ...], *values: Any) -> Any:
    """Run the kernel on ``values``: CPU tensors through Helion's Triton backend (Triton's
    interpreter: tier C), ROCm tensors through the FlyDSL backend's module with the typed launcher
    (tier D). ``args`` are the specs the FlyDSL module was generated for."""
    import torch

    if values[0].device.type == "cpu":
        return make_kernel(body, "triton", block_m)(*values)
    if values[0].device.type != "cuda" or torch.version.hip is None:
        raise RuntimeError(f"Helion's FlyDSL kernels run only on an AMD GPU under ROCm (or CPU tensors in Triton's "
                           f"interpreter); got tensors on {values[0].device}")
    module = helion_flydsl.load_generated(generated_code(body, "flydsl", block_m, args),
                                          str(asm_cache.cache_dir() / "helion_flydsl"))
    return getattr(module, body.__name__)(*values, _launcher=helion_flydsl.launch)
