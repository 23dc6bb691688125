"""Inductor's jinja templates, compiled once per source in a process during ext's compiles.

Inductor compiles a jinja template from its source text each time it renders a kernel from it
(``KernelTemplate._template_from_string``; jinja's ``from_string`` does not cache): 527 compiles
of 35 distinct sources for the cpu_decode decoder's 25 C++ GEMMs, 5-8 s of a ~35 s cache-only
compile on this 2-core machine (``bench/cpu_decode.py``'s compile arm). A compiled template is
immutable and renders re-entrantly, so inside ext's compiles each source is compiled once and the
same template object is returned for it afterwards. Inductor's function is restored on exit (as
with ``cold_timing``, a compile in another thread meanwhile would share the memo).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

from torch._inductor.codegen.common import KernelTemplate

_lock = threading.Lock()
_compiled: dict[str, Any] = {}


def memoized(compile_source: Callable[[str], Any]) -> Callable[[str], Any]:
    """``compile_source`` remembered per source text (a None result, jinja missing, is not)."""

    def compile_once(source: str) -> Any:
        with _lock:
            found = _compiled.get(source)
        if found is None:
            found = compile_source(source)
            if found is not None:
                with _lock:
                    found = _compiled.setdefault(source, found)
        return found

    return compile_once


@contextlib.contextmanager
def compiled_once() -> Iterator[None]:
    """Inside: Inductor compiles each template source once for the process."""
    original = KernelTemplate.__dict__["_template_from_string"]
    KernelTemplate._template_from_string = staticmethod(memoized(original.__func__))  # type: ignore[method-assign]
    try:
        yield
    finally:
        KernelTemplate._template_from_string = original  # type: ignore[method-assign]
