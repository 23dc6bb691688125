"""Inductor's FX graph cache entries written to disk beside the compile, not inside it.

A frozen graph whose GEMM templates packed its weights carries them as constants of its cache
entry: on the llama row of ``bench/compile_time.py`` 155 MB, whose hashing and writing took
~0.5 s of the first compile, after the graph was ready to run. Inside ext's compiles Inductor
still serializes the entry in the compiling thread (its content is fixed from then on: bytes),
and one background thread writes it (Inductor's own ``_write_to_local_cache``: its file name,
atomic rename and layout). A lookup of the FX graph cache inside ext's compiles first waits for
the writes handed over before it, so a graph compiled again in this process finds its entry as
before. The writer runs at the lowest priority (nice 19): at the default one, on 2 cores, the
graph's calls in the first 0.5 s after the compile ran at 25 ms instead of 11-12 ms while it
wrote (13 ms at nice 19). It is not a daemon: the interpreter waits for the writes at exit. A
write that fails says so in one warning, as Inductor's own does, and fails nothing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
from typing import Any, Callable, Iterator

from torch._inductor.codecache import FxGraphCache

from inductor_ext.runtime.background_builds import lowest_priority

log = logging.getLogger("inductor_ext")

__all__ = ["wait_for_writes", "written_in_background"]


_writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ext-fx-cache-write",
                                                initializer=lowest_priority)
_pending: list[concurrent.futures.Future[None]] = []
_lock = threading.Lock()


def _write(write: Callable[[str, bytes], None], key: str, content: bytes) -> None:
    try:
        write(key, content)
    except Exception as e:
        log.warning("ext: Inductor's FX graph cache entry %s could not be written (%s: %s); the graph "
                    "compiles again in the next process", key, type(e).__name__, e)


def wait_for_writes() -> None:
    """Returns once every write handed to the background writer so far is on disk (or failed)."""
    with _lock:
        pending, _pending[:] = list(_pending), []
    for future in pending:
        future.result()


@contextlib.contextmanager
def written_in_background() -> Iterator[None]:
    """Within this block, FX graph cache entries are written by the background writer and
    lookups wait for it first. Inductor's functions are restored on exit."""
    write = vars(FxGraphCache)["_write_to_local_cache"]
    lookup = vars(FxGraphCache)["_lookup_graph"]

    def write_later(key: str, content: bytes) -> None:
        future = _writer.submit(_write, write.__func__, key, content)
        with _lock:
            _pending.append(future)

    def lookup_after_writes(*args: Any, **kwargs: Any) -> Any:
        wait_for_writes()
        return lookup.__func__(*args, **kwargs)

    FxGraphCache._write_to_local_cache = staticmethod(write_later)  # type: ignore[method-assign]
    FxGraphCache._lookup_graph = staticmethod(lookup_after_writes)  # type: ignore[method-assign]
    try:
        yield
    finally:
        FxGraphCache._write_to_local_cache = write  # type: ignore[method-assign]
        FxGraphCache._lookup_graph = lookup  # type: ignore[method-assign]
