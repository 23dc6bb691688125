"""A graph's C++ kernels built from the moment Inductor generates each, not after all of codegen.

Inductor writes each CPU kernel into the graph's module as ``async_compile.cpp_pybinding(argtypes,
r'''source''')`` and its builds start only when that module is loaded, after the whole graph is
generated: meanwhile one of these two cores idles, and the module then waits on every build (16
for the llama row of ``bench/compile_time.py``, ~8 s on 2 cores, the largest phase of ext's first
compile). Inside ext's compiles each such kernel's build is submitted to Inductor's own compile
pool (``AsyncCompile.submit``) as its definition is written into the wrapper, with the arguments
the module will pass; when the module loads, ``CppCodeCache`` finds the same key in its table and
waits for the build already under way instead of starting another. The kernel text is read as
Inductor wrote it (no Python is evaluated); a definition of any other form is left to the module.
Kernels that can share a compiler run are gathered into ``kernel_batches``' batches instead,
each batch started as soon as it is full. Where Inductor compiles inline (``compile_threads`` 1)
nothing starts early. Inductor's function is restored on exit (as in ``jinja_templates``).
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any, Iterator

from torch._inductor.async_compile import AsyncCompile, get_compile_threads
from torch._inductor.codecache import CppPythonBindingsCodeCache
from torch._inductor.codegen.wrapper import PythonWrapperCodegen

from inductor_ext.lowering import kernel_batches

log = logging.getLogger("inductor_ext")

_CALL = "async_compile.cpp_pybinding("
_SOURCE_OPEN = ", r'''"
_SOURCE_CLOSE = "''')"
_ARG_TYPE = re.compile(r"'([^'\\]*)'")


def kernel_build_args(kernel_body: str) -> tuple[list[str], str] | None:
    """The (argtypes, source) Inductor's module passes to ``cpp_pybinding`` for ``kernel_body``,
    or None where the body is not exactly one such call with a list of plain strings."""
    body = kernel_body.strip()
    if not (body.startswith(_CALL) and body.endswith(_SOURCE_CLOSE)):
        return None
    listed, opened, rest = body[len(_CALL):-len(_SOURCE_CLOSE)].partition(_SOURCE_OPEN)
    if not opened:
        return None
    argtypes, source = _ARG_TYPE.findall(listed), rest
    if repr(argtypes) != listed or "'''" in source:
        return None
    return argtypes, source


def start_alone(argtypes: list[str], source: str) -> bool:
    """Submit the build of one kernel (the arguments its module passes) to Inductor's compile
    pool; False where Inductor compiles inline."""
    if get_compile_threads() <= 1:
        return False
    CppPythonBindingsCodeCache.load_pybinding_async(argtypes, source, submit_fn=AsyncCompile.submit)
    return True


@contextlib.contextmanager
def started_as_generated() -> Iterator[None]:
    """Inside: each CPU kernel Inductor writes into a graph's Python module starts building."""
    original = PythonWrapperCodegen.__dict__["define_kernel"]

    def define_kernel(self: Any, kernel_name: str, kernel_body: str, *args: Any, **kwargs: Any) -> Any:
        gpu = kwargs.get("gpu", args[1] if len(args) > 1 else True)
        if not gpu:
            try:
                built = kernel_build_args(kernel_body)
                if built is not None and not kernel_batches.prefetch(self, *built):
                    start_alone(*built)
            except Exception as e:  # noqa: BLE001  (the module builds it as it would have)
                log.debug("ext: early build of %s not started (%s)", kernel_name, e)
        return original(self, kernel_name, kernel_body, *args, **kwargs)

    PythonWrapperCodegen.define_kernel = define_kernel  # type: ignore[method-assign]
    try:
        yield
    finally:
        PythonWrapperCodegen.define_kernel = original  # type: ignore[method-assign]
