"""A decision's C++ candidates built a few to a compiler run, each timed from its batch's library.

``parallel_builds`` builds a decision's C++ candidates side by side before any is timed; each was
one g++ run, and each run pays ~0.6 s for the vector headers' pending template instantiations
(``kernel_batches``). Here candidates whose sources can share a unit are built ``BATCH_SIZE`` to a
library: each in a namespace of its own, its one ``extern "C"`` entry renamed ``<entry>__ext<i>``
(a decision's candidates share their entry name, e.g. ``cpp_CppMicroGemmFP32Vec``). Inductor's
``CppBenchmarkRequest`` loads a candidate with ``CppCodeCache.load(source)`` and looks its entry up
by name; inside ext's compiles that load, for a batched source, returns a view of the batch's
library that answers the entry's name with the member's renamed entry. The library is built and
cached by ``CppCodeCache.load_async`` (with Inductor's precompiled ``cpp_prefix.h``, as
``parallel_builds`` builds). A batch that fails to build is never a candidate's failure: its
sources are then loaded one by one, as Inductor loads them (a broken candidate fails there and is
dropped with the compiler's message, ``candidate_guard``), with one log line.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any, Callable, Iterator

from torch._inductor.codecache import CppCodeCache

from inductor_ext.lowering import kernel_batches

log = logging.getLogger("inductor_ext")

BATCH_SIZE = kernel_batches.BATCH_SIZE
_ENTRY = re.compile(r'\bextern\s+"C"\s+void\s+([A-Za-z_]\w*)\s*\(')
_RENAMED = "__ext"

# source -> its batch and place in it, for the loads of this compile (cleared when it ends)
_served: dict[str, tuple[Batch, int]] = {}
_serving = 0  # how many compiles are inside served_from_batches (only there is anything batched)


def batchable(source: str) -> bool:
    """Whether a candidate's source can be built in a batch: shareable, with one ``void`` C entry."""
    return kernel_batches.shareable(source) and len(_ENTRY.findall(source)) == 1


def batch_source(sources: list[str]) -> str:
    """One translation unit holding every source, each in its namespace with its entry renamed."""
    parts = [kernel_batches.includes_apart(s) for s in sources]
    includes = list(dict.fromkeys(line for inc, _ in parts for line in inc))
    units = [f"namespace ext_candidate_{i} {{\n"
             + _ENTRY.sub(lambda m, i=i: f'extern "C" void {m.group(1)}{_RENAMED}{i}(', body)
             + f"\n}}  // namespace ext_candidate_{i}" for i, (_, body) in enumerate(parts)]
    return "\n".join(["// inductor_ext: a batch of C++ candidates, one namespace each", *includes, *units])


class LibraryView:
    """A batch library as one candidate's own: its entry's name gives the member's renamed entry."""

    def __init__(self, library: Any, index: int) -> None:
        self._library, self._index = library, index

    def __getattr__(self, name: str) -> Any:
        return getattr(self._library, f"{name}{_RENAMED}{self._index}")


class Batch:
    """Candidates built as one library once submitted."""

    def __init__(self, sources: list[str], get_library: Callable[[], Any]) -> None:
        self.sources, self._get_library, self._failed = sources, get_library, False

    def view(self, index: int) -> LibraryView | None:
        """Member ``index``'s view of the library; None once the batch failed to build."""
        if not self._failed:
            try:
                return LibraryView(self._get_library(), index)
            except Exception as e:  # noqa: BLE001  (each candidate is then built alone)
                self._failed = True
                log.warning("ext: %d C++ candidates did not build as one unit (%s); each is built alone",
                            len(self.sources), kernel_batches.error_line(e))
        return None


def submit(sources: list[str], load_async: Callable[[str], Callable[[], Any]]) -> tuple[list[Batch], list[str]]:
    """Batch the batchable ``sources`` (``BATCH_SIZE`` to a library, ``load_async`` submitting
    each library's build) and serve them to this compile's loads; returns the batches and the
    sources left to build alone."""
    if not _serving:  # nothing would serve the batch's members: each is built alone
        return [], list(sources)
    together = [s for s in sources if batchable(s)]
    alone = [s for s in sources if not batchable(s)]
    batches = []
    for start in range(0, len(together), BATCH_SIZE):
        chunk = together[start:start + BATCH_SIZE]
        if len(chunk) == 1:
            alone += chunk
            continue
        batch = Batch(chunk, load_async(batch_source(chunk)))
        batches.append(batch)
        _served.update((s, (batch, i)) for i, s in enumerate(chunk))
    return batches, alone


@contextlib.contextmanager
def served_from_batches() -> Iterator[None]:
    """Inside: ``CppCodeCache.load`` of a batched candidate's source returns its batch's view."""
    original = CppCodeCache.__dict__["load"]

    def load(cls: type, main_code: str, *args: Any, **kwargs: Any) -> Any:
        found = _served.get(main_code) if cls is CppCodeCache and not args and kwargs in ({}, {"device_type": "cpu"}) else None
        view = found[0].view(found[1]) if found else None
        return view if view is not None else original.__func__(cls, main_code, *args, **kwargs)

    global _serving
    CppCodeCache.load = classmethod(load)  # type: ignore[method-assign, assignment]
    _serving += 1
    try:
        yield
    finally:
        _serving -= 1
        CppCodeCache.load = original  # type: ignore[method-assign]
        if not _serving:
            _served.clear()
