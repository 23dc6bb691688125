"""A decision's C++ candidates built at once, in Inductor's compile worker pool, before any is timed.

Inductor precompiles a selection's choices in a thread pool (``select_algorithm.make_precompile_fn``)
except on CPython 3.11.0-3.11.8, where it skips precompiling altogether (cpython#106905, a race in
the AST validator's recursion count between threads compiling Python) — this machine's Python is
3.11.7. Each C++ candidate was then built as it was first timed, one after another: 21 builds in
series, ~123 s of the demo's cold compile on a loaded machine, 52 s on a quiet one (issue 29,
bench/compile_time.py's breakdown).

A C++ candidate's build compiles no Python: the worker writes a file and runs the compiler in a
subprocess. So ext submits every C++ choice's source to ``CppCodeCache.load_async`` with Inductor's
own pool (``AsyncCompile.submit``: ``compile_threads`` workers, one per core by default; inline when
that is 1) and waits for all of them before handing the choices back: the builds overlap each other
and are over before the first timed call (a compiler running beside a timed call would be timed
too). ``CppBenchmarkRequest`` later loads the same source with the same flags and finds it built.
A build that fails is left to the benchmark, which builds it again and drops the candidate with the
compiler's message (``candidate_guard``). The builds include Inductor's precompiled ``cpp_prefix.h``
(``_PrefixHeaderCache``), which Inductor's own C++ kernels use and its benchmark builds do not,
and candidates that can share a compiler run are built a few to one (``candidate_batches``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch._inductor.lowering  # noqa: F401  (first: cpp_template_kernel imported alone is a circular import in 2.15)
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.codecache import CppCodeCache, _get_cpp_prefix_header
from torch._inductor.codegen.cpp_template_kernel import CppTemplateCaller
from torch._inductor.select_algorithm import DataProcessorChoiceCallerWrapper

from inductor_ext.lowering import candidate_batches, candidate_guard

log = logging.getLogger(__name__)


class _PrefixHeaderCache(CppCodeCache):
    """``CppCodeCache`` (its in-memory table, keys and output paths: ``CppBenchmarkRequest`` finds
    what is built here) whose builds include Inductor's precompiled ``cpp_prefix.h``, as Inductor's
    own C++ kernels do (``CppPythonBindingsCodeCache``): a template includes that header first, and
    parsing it was most of each candidate's build. The key is the source and the command line
    without the header, so the binary is the one the benchmark would build; where the compiler
    cannot use the precompiled header it parses the header itself."""

    @classmethod
    def _get_uncompiled_header(cls, device: str) -> str | None:
        return _get_cpp_prefix_header(device)


def cpp_sources(choices: list[Any]) -> list[str]:
    """The distinct C++ sources of ``choices`` that Inductor would build to time them."""
    sources: dict[str, None] = {}
    for choice in choices:  # only these: other callers' bmreq may assert when read (SubgraphChoiceCaller)
        _, caller = unwrapped(choice)
        if isinstance(caller, CppTemplateCaller):
            sources.setdefault(caller.bmreq.source_code)
    return list(sources)


def unwrapped(choice: Any) -> tuple[list[DataProcessorChoiceCallerWrapper], Any]:
    """The ``DataProcessorChoiceCallerWrapper`` chain around ``choice``, outermost first (how the
    C++ GEMM template hands its choices over, to pack the weight it benchmarks with), and the caller
    inside it (``choice`` itself where none wraps it)."""
    wrappers = []
    while isinstance(choice, DataProcessorChoiceCallerWrapper):
        wrappers.append(choice)
        choice = choice._wrapped
    return wrappers, choice


def build_all(choices: list[Any]) -> int:
    """Build every C++ source of ``choices`` in Inductor's compile pool and wait for them; the
    number of sources handed to it."""
    sources = cpp_sources(choices)
    if not sources:
        return 0
    start = time.perf_counter()
    try:  # a few to a compiler run where they can share one (candidate_batches)
        batches, alone = candidate_batches.submit(sources, _submitted)
    except Exception as e:  # noqa: BLE001  (writing a batch failed: each is built alone)
        log.debug("ext: C++ candidates not batched (%s)", candidate_guard.reason(e))
        batches, alone = [], sources
    loads = _submit_alone(alone)
    # a batch that failed (logged once) has its sources built alone, still side by side
    loads += _submit_alone([s for batch in batches if batch.view(0) is None for s in batch.sources])
    for load in loads:
        try:
            load()
        except Exception as e:  # noqa: BLE001  (its benchmark builds it again and drops it, saying why)
            log.debug("ext: a C++ candidate did not build (%s)", candidate_guard.reason(e))
    log.debug("ext: built %d C++ candidates in %.1f s (%d batches)", len(sources), time.perf_counter() - start,
              len(batches))
    return len(sources)


def _submitted(source: str) -> Any:
    return _PrefixHeaderCache.load_async(source, device_type="cpu", submit_fn=AsyncCompile.submit)


def _submit_alone(sources: list[str]) -> list[Any]:
    loads = []
    for source in sources:  # all submitted first, so the pool runs them side by side
        try:
            loads.append(_submitted(source))
        except Exception as e:  # noqa: BLE001  (writing the source failed: its benchmark says why)
            log.debug("ext: could not submit a C++ candidate's build (%s)", candidate_guard.reason(e))
    return loads
