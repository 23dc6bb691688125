"""Inductor's mkldnn linear packing, kept out of ext's frozen compiles without changing it for
anyone else in the process.

Under freezing, Inductor rewrites a linear with a constant weight (``mm``/``addmm``) into
mkldnn's packed linear before lowering, so no GEMM lowering, and so none of ext's choices, sees
it. ext's C++ GEMM family packs constant weights itself and wants the ``mm``. Turning
``cpp.weight_prepack`` off for ext's compile is not enough: Inductor registers its freezing
patterns once per process (``freezing_patterns.lazy_init`` is cached), under the config of the
first freezing compile. If that compile is ext's, the user's own ``torch.compile`` with freezing
never packs again; if it is the user's, ext's linears are packed anyway (measured: every linear of
the cpu_decode decoder went to ``mkldnn._linear_pointwise`` when Inductor max-autotune had
compiled first in the process).

So around an ext compile that keeps linears as ``mm``: the patterns are first registered under
the caller's config, as their own first freezing compile would, and only for the length of the
compile the linear-packing entries are left out of the pass that holds them. As with
``cold_timing``, this is process state while inside: a compile in another thread at that moment
would not pack its linears either.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any, Iterator

from torch._inductor.fx_passes import freezing_patterns
from torch._inductor.pattern_matcher import PatternMatcherPass

_PACKING_MODULE = "torch._inductor.fx_passes.mkldnn_fusion"


def packs_linear(entry: Any) -> bool:
    """Whether a freezing-pattern entry is Inductor's mkldnn/MKL linear packing."""
    check = getattr(entry, "extra_check", None)
    return getattr(check, "__name__", "") == "_is_packable_linear" and check.__module__ == _PACKING_MODULE


def _passes_with_linear_packing() -> list[PatternMatcherPass]:
    return [p for p in freezing_patterns.pass_patterns
            if any(packs_linear(e) for entries in p.patterns.values() for e in entries)]


@contextlib.contextmanager
def linears_left_as_mm() -> Iterator[None]:
    """Inside: freezing leaves linears as ``mm``/``addmm``; Inductor's patterns registered under
    the config active on entry (call it before applying ext's config patches)."""
    freezing_patterns.lazy_init()
    saved = []
    for matcher in _passes_with_linear_packing():
        kept: defaultdict[Any, list[Any]] = defaultdict(list)
        for key, entries in matcher.patterns.items():
            kept[key] = [e for e in entries if not packs_linear(e)]
        saved.append((matcher, matcher.patterns))
        matcher.patterns = kept
    try:
        yield
    finally:
        for matcher, patterns in saved:
            matcher.patterns = patterns
