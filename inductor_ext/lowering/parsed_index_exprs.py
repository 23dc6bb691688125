"""Inductor's C++ template index expressions, parsed once per text during ext's compiles.

Inductor's C++ GEMM template names its tile bounds as strings ("m_start", "k_end", ...) and
parses each with sympy every time it slices or views a buffer
(``cpp_template_kernel.parse_expr_with_index_symbols``): 1200 parses of a few distinct strings,
1.46 s of a llama-768 first compile on this 2-core AVX2 machine (cProfile, note 57), more than
the rest of the template's rendering. The parse depends on the text alone and gives an
immutable sympy expression, so inside ext's compiles each text is parsed once for the process
and the same expression is returned after. Lists are rebuilt per call (a caller may change its
list). Inductor's function is restored on exit (as in ``jinja_templates``, a compile in another
thread meanwhile shares the memo).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import sympy
import torch._inductor.lowering  # noqa: F401  (first: cpp_template_kernel imported alone is a circular import in 2.15)
from torch._inductor.codegen import cpp_template_kernel

_lock = threading.Lock()
_parsed: dict[str, sympy.Expr] = {}


def memoized(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse`` remembered per text; an expression passes through, a list is parsed item by item."""

    def parse_once(expr: Any) -> Any:
        if isinstance(expr, sympy.Expr):
            return expr
        if isinstance(expr, (list, tuple)):
            return [parse_once(item) for item in expr]
        text = str(expr)
        with _lock:
            found = _parsed.get(text)
        if found is None:
            found = parse(text)
            with _lock:
                found = _parsed.setdefault(text, found)
        return found

    return parse_once


@contextlib.contextmanager
def parsed_once() -> Iterator[None]:
    """Inside: Inductor's C++ templates parse each index expression text once for the process."""
    original = cpp_template_kernel.parse_expr_with_index_symbols
    cpp_template_kernel.parse_expr_with_index_symbols = memoized(original)
    try:
        yield
    finally:
        cpp_template_kernel.parse_expr_with_index_symbols = original
