"""Helion's FlyDSL backend, compiled for gfx950 without a GPU (and launched on one).

Helion 1.5.1 (``@helion.kernel(backend="flydsl")``) generates a module holding a ``@flyc.kernel`` and a
host function that calls ``_launcher(kernel, grid, *args, _num_threads=N)``. Two gaps to FlyDSL 0.5,
bridged here:

- the generated code imports ``full`` and ``ReductionOp`` from ``flydsl.expr.vector``, a module
  FlyDSL 0.5 no longer has (both live in ``flydsl.expr.typing``): :func:`install_vector_alias`
  registers a module of that name holding them;
- Helion's default launcher annotates every launcher argument ``fx.Tensor`` and compiles through
  ``flyc.compile``, which returns nothing under ``COMPILE_ONLY``: :func:`compile_job` (a builder for
  ``runtime.flydsl``) runs the host function with a launcher that records the kernel, its grid and
  arguments, and builds a ``@flyc.jit`` wrapper with one annotation per argument type.

Helion's code generation (``bind(...).to_code(config)``) runs in the caller's process, which must
not have loaded FlyDSL's MLIR libraries: Helion's lowering imports CuTeDSL, whose MLIR bindings
abort the process when FlyDSL's are already loaded (nanobind "duplicate key"). Only the generated
text travels to the FlyDSL compile subprocess.
"""

from __future__ import annotations

import linecache
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from inductor_ext.runtime.private_files import private_dir, write_if_different
from inductor_ext.runtime.triton_loader import module_from_source

__all__ = ["install_vector_alias", "compile_job"]


def install_vector_alias() -> None:
    """Make ``from flydsl.expr.vector import full, ReductionOp`` work on FlyDSL 0.5."""
    if "flydsl.expr.vector" in sys.modules:
        return
    from flydsl.expr.typing import ReductionOp, full

    module = types.ModuleType("flydsl.expr.vector")
    module.full, module.ReductionOp = full, ReductionOp
    sys.modules["flydsl.expr.vector"] = module


_ANNOTATION = {"tensor": "fx.Tensor", "float": "fx.Float32", "int": "fx.Int32"}


def _stand_in(arg: Any) -> Any:
    """A CPU tensor for a ``("tensor", shape, stride, dtype)`` spec; scalars as they are."""
    import torch

    if isinstance(arg, (tuple, list)) and arg and arg[0] == "tensor":
        _, shape, stride, dtype = arg
        span = 1 + sum((s - 1) * st for s, st in zip(shape, stride))
        return torch.zeros(max(span, 1), dtype=getattr(torch, dtype)).as_strided(tuple(shape), tuple(stride))
    return arg


def _jit_wrapper(kernel: Any, grid: tuple[int, ...], args: tuple[Any, ...], threads: int) -> Any:
    """A ``@flyc.jit`` launcher for ``kernel`` whose parameters carry their FlyDSL types."""
    import torch

    kinds = ["tensor" if isinstance(a, torch.Tensor) else "float" if isinstance(a, float) else "int" for a in args]
    params = ", ".join(f"a{i}: {_ANNOTATION[k]}" for i, k in enumerate(kinds))
    call = ", ".join(f"a{i}" for i in range(len(args)))
    gx, gy, gz = (*grid, 1, 1, 1)[:3]
    src = (f"import flydsl.expr as fx\nimport flydsl.compiler as flyc\n\n\ndef _make(kernel):\n"
           f"    @flyc.jit\n    def helion_launch({params}, stream: fx.Stream = fx.Stream(None)):\n"
           f"        kernel({call}).launch(grid=({gx}, {gy}, {gz}), block=({threads}, 1, 1), stream=stream)\n"
           f"    return helion_launch\n")
    name = f"<inductor_ext_helion_launch_{abs(hash(src))}>"
    linecache.cache[name] = (len(src), None, src.splitlines(keepends=True), name)  # FlyDSL reads the source
    namespace: dict[str, Any] = {}
    exec(compile(src, name, "exec"), namespace)
    return namespace["_make"](kernel)


def compile_job(job: dict[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    """Builder for ``runtime.flydsl`` (runs in its subprocess): ``job`` holds the generated ``code``,
    the ``host`` function's name and its arguments (``("tensor", shape, stride, dtype)`` specs and
    plain scalars). Returns the jit launcher and the arguments it takes."""
    install_vector_alias()
    # FlyDSL re-parses the kernel's source, so the module must live in a file.
    fd, path = tempfile.mkstemp(prefix="helion_flydsl_", suffix=".py", dir=os.getcwd())
    with os.fdopen(fd, "w") as f:
        f.write(job["code"])
    module = module_from_source(f"inductor_ext_helion_{os.path.basename(path)[:-3]}", Path(path), job["code"])
    launches: list[tuple[Any, tuple[Any, ...]]] = []

    def record(kernel: Any, grid: tuple[int, ...], *args: Any, _num_threads: int = 64, **kwargs: Any) -> None:
        if kwargs:
            raise ValueError(f"unexpected Helion launcher arguments {sorted(kwargs)}")
        launches.append((_jit_wrapper(kernel, grid, args, _num_threads), args))

    getattr(module, job["host"])(*(_stand_in(a) for a in job["args"]), _launcher=record)
    if len(launches) != 1:
        raise ValueError(f"the Helion host function launched {len(launches)} kernels; one is supported")
    return launches[0]


def load_generated(code: str, directory: str) -> types.ModuleType:
    """Import Helion's generated FlyDSL module from a file under ``directory`` (FlyDSL re-parses
    kernel sources, so they must live in a file)."""
    install_vector_alias()
    import hashlib

    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    name = f"inductor_ext_helion_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    folder = private_dir(Path(directory))
    path = write_if_different(folder / f"{name}.py", code)
    return module_from_source(name, path, code)  # the text generated here, never a __pycache__


_compiled: dict[tuple[Any, ...], Any] = {}


def launch(kernel: Any, grid: tuple[int, ...], *args: Any, _num_threads: int = 64, **kwargs: Any) -> None:
    """A ``_launcher`` for Helion's generated host functions on a ROCm GPU (tier D): the typed
    ``@flyc.jit`` wrapper, compiled once per kernel, grid, block and argument types, on the
    current PyTorch stream."""
    import flydsl.compiler as flyc
    import flydsl.expr as fx
    import torch

    if kwargs:
        raise ValueError(f"unexpected Helion launcher arguments {sorted(kwargs)}")
    kinds = tuple(type(a).__name__ if not isinstance(a, torch.Tensor) else (a.dtype, a.dim()) for a in args)
    key = (id(kernel), tuple(grid), _num_threads, kinds)
    stream = fx.Stream(torch.cuda.current_stream())
    if key not in _compiled:
        _compiled[key] = (kernel, flyc.compile(_jit_wrapper(kernel, grid, args, _num_threads), *args, stream))
    _compiled[key][1](*args, stream)
