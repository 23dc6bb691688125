"""Where a compile's decisions are looked up and written: read-only layers, then the user's cache.

``options={"autotune_cache": ...}`` names one cache file or several. A named file is a
read-only layer (a cache built offline and shipped: an image layer, a read-only mount, a copied
file): it is read once per version of the file in a process, through a read-only connection,
every row validated, and never written. Layers are asked in the order named, first match wins,
and behind them stands the user's own writable cache (``cache.default_cache_path()``, in a
folder private to the user), where new decisions and machine facts go. So a fleet can ship one
cache per model and still tune what it misses.

One named file is the user's own writable cache instead of a layer when the compile times
(``quick``/``full``) and the file is theirs to write: its folder belongs to this user and no one
else may write to it, and so does the file when it exists. That is how ``tune build`` and a
project's own cache file work; a file in a read-only or shared folder is always a layer.

The key of a compiled graph holds ``DecisionSources.digest(dims)``: the exact content of every
entry, in every layer and in the user's cache, that the graph could be served from, so any edit
that could change a served decision recompiles, and an entry for other sizes (another model's,
added or edited) does not. Which entries a graph could use is known before it is lowered only
approximately, so the scope is a superset: ``dims``, every size of every tensor in the graph
Inductor is about to compile (``graph_scope``); an entry is in scope when each size in its key is
one of them (a decision's inputs are views of the graph's tensors), and every entry of a dynamic
problem is. Outside a graph's compile (AOTAutograd's cache key) the scope is every entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
import threading
import warnings
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from inductor_ext.autotune.cache import (AutotuneCache, AutotuneCacheWarning, CacheFileError, default_cache_path,
                                         folder_problem, read_rows, rows_digest)
from inductor_ext.autotune.cache_entry import BadRow, Entry, ProblemKey, decode_row
from inductor_ext.templates.allowed import InvalidField

__all__ = ["DecisionSources", "Layer", "current_scope", "graph_scope", "in_scope", "load_layer", "own_writable"]

log = logging.getLogger("inductor_ext.autotune")


_graph_dims: ContextVar[frozenset[int] | None] = ContextVar("inductor_ext_graph_dims", default=None)


@contextlib.contextmanager
def graph_scope(dims: frozenset[int] | None) -> Iterator[None]:
    """Within this block, a key's digest covers only the entries whose sizes are all in ``dims``."""
    token = _graph_dims.set(dims)
    try:
        yield
    finally:
        _graph_dims.reset(token)


def current_scope() -> frozenset[int] | None:
    return _graph_dims.get()


def in_scope(key: ProblemKey, dims: frozenset[int] | None) -> bool:
    """Whether a graph whose tensors have the sizes ``dims`` could be served ``key``'s entry."""
    return dims is None or bool(key.dynamic) or all(d in dims for shape in key.shapes for d in shape)


def entries_digest(entries: Iterable[Entry]) -> str:
    """A digest of exactly what ``entries`` would serve, in any order."""
    texts = sorted(json.dumps(e.to_dict(), sort_keys=True, separators=(",", ":")) for e in entries)
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()


@dataclass(frozen=True)
class Layer:
    """A read-only cache as one compile sees it: its usable entries by key digest, and a digest
    of the rows the file held when read."""

    path: Path
    entries: dict[str, Entry]
    digest: str
    skipped: int  # rows refused by the validator

    def get(self, key: ProblemKey) -> Entry | None:
        entry = self.entries.get(key.digest())
        return entry if entry is not None and entry.key == key else None

    def scoped_digest(self, dims: frozenset[int] | None) -> str:
        """The whole file's rows with no scope, else the usable entries in scope."""
        if dims is None:
            return self.digest
        return entries_digest(e for e in self.entries.values() if in_scope(e.key, dims))


_Signature = tuple[bytes, ...]
_layers: dict[str, tuple[_Signature | None, Layer | None]] = {}  # by path: read once per version of the file
_lock = threading.Lock()


def _signature(path: Path) -> _Signature | None:
    """The bytes of the file and its ``-wal``, hashed: a re-read is due when they change. Not their
    stat: a row edited in place (WAL checkpointed, same size) within the file system's timestamp
    granularity leaves inode, size and mtime as they were (CI saw it)."""
    sig = []
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            if not stat.S_ISREG(p.stat().st_mode):  # a FIFO would block the read; SQLite refuses it
                sig.append(repr(p.stat()).encode())
                continue
            with open(p, "rb") as f:
                sig.append(hashlib.file_digest(f, "blake2b").digest())
        except OSError:
            if p == path:
                return None
            sig.append(b"")
    return tuple(sig)


def _warn(path: Path, message: str) -> None:
    warnings.warn(f"inductor_ext autotune cache {path}: {message}", AutotuneCacheWarning, stacklevel=4)


def load_layer(path: str | os.PathLike[str]) -> Layer | None:
    """``path`` as a read-only layer, or None (one line) when it is missing or refused whole (not
    SQLite, corrupt, a schema that is not ext's, another schema version): the compile then runs
    as without it. Read once per version of the file in this process."""
    path = Path(path)
    sig = _signature(path)
    with _lock:
        known = _layers.get(str(path))
        if known is not None and known[0] == sig:
            return known[1]
        layer = _read(path) if sig is not None else None
        if sig is None:
            _warn(path, "does not exist: nothing is read from it (build one with `inductor-ext tune build`)")
        _layers[str(path)] = (sig, layer)
        return layer


def _read(path: Path) -> Layer | None:
    try:
        with AutotuneCache(path, mode="read") as reader:
            rows = reader._run("read", read_rows, [])
            entries = {}
            for row in rows:
                entry = reader._decode(row)
                if entry is not None:
                    entries[row[0]] = entry
    except CacheFileError as e:
        _warn(path, f"refused, the compile runs as without it: {str(e).removeprefix(f'{path}: ')}")
        return None
    skipped = len(rows) - len(entries)
    if skipped:
        log.warning("inductor_ext autotune cache %s: %d of %d entries refused by the validator and skipped",
                    path, skipped, len(rows))
    return Layer(path, entries, rows_digest(rows), skipped)


def own_writable(path: Path) -> bool:
    """Whether ``path`` is a cache file this user may write without anyone else being able to
    swap it: its folder (which ext creates 0700 when missing) and the file, if there, belong
    to this user, are writable by no one else, and this process may write them."""
    folder = path.parent
    if not folder.exists():
        return True
    if folder_problem(folder) is not None or not os.access(folder, os.W_OK):
        return False
    if not path.exists():
        return True
    try:
        info = path.stat()
    except OSError:
        return False
    return (hasattr(os, "getuid") is False or info.st_uid == os.getuid()) \
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and os.access(path, os.W_OK)


_writable: dict[str, AutotuneCache] = {}  # one per path per process: a bad file warns once


def writable_cache(path: Path) -> AutotuneCache:
    """The user's own cache at ``path``, one object per path per process."""
    with _lock:
        cache = _writable.get(str(path))
        if cache is None:  # a forked child reopens it itself (AutotuneCache._connection)
            cache = _writable[str(path)] = AutotuneCache(path)
        return cache


_decoded: dict[tuple, Entry | None] = {}  # rows of the user's cache, decoded once per process


def _usable(row: tuple) -> Entry | None:
    """``row`` as the entry it serves, or None where the validator refuses it (a lookup says why)."""
    if row not in _decoded:
        if len(_decoded) > 100_000:
            _decoded.clear()
        try:
            _decoded[row] = decode_row(*row)
        except (BadRow, InvalidField):
            _decoded[row] = None
    return _decoded[row]


class DecisionSources:
    """The layers (in order) and the user's writable cache of one compile."""

    def __init__(self, named: tuple[str, ...], times: bool, *, cached: bool = True) -> None:
        if not cached:  # Inductor's caches are off (TORCHINDUCTOR_FORCE_DISABLE_CACHES): ours too
            self.layers = []
            self.writable = AutotuneCache(":memory:")
            log.info("inductor_ext autotune cache: not read or written, Inductor's caches are disabled "
                     "(force_disable_caches); every decision is made afresh")
        elif len(named) == 1 and times and own_writable(Path(named[0])):
            self.layers: list[Layer] = []
            self.writable = writable_cache(Path(named[0]))
        else:
            self.layers = [layer for layer in map(load_layer, named) if layer is not None]
            self.writable = writable_cache(default_cache_path())
            for path in named:
                log.debug("inductor_ext autotune cache %s: read as a read-only layer; new decisions go to %s",
                          path, self.writable.path)

    def get(self, key: ProblemKey) -> tuple[Entry, str] | None:
        """The first entry for ``key``, layers first, and where it came from."""
        for layer in self.layers:
            entry = layer.get(key)
            if entry is not None:
                return entry, str(layer.path)
        entry = self.writable.get(key)
        return None if entry is None else (entry, str(self.writable.path or ":memory:"))

    def put(self, entry: Entry) -> None:
        self.writable.put(entry)

    def digest(self, dims: frozenset[int] | None = None) -> str:
        """The exact content of every source, in order, that a graph whose tensors have the sizes
        ``dims`` could be served from (every entry when None): a compiled graph's key holds it."""
        parts = [f"{layer.path}={layer.scoped_digest(dims)}" for layer in self.layers]
        mine = self.writable.state() if dims is None else entries_digest(
            e for e in map(_usable, self.writable._all_rows()) if e is not None and in_scope(e.key, dims))
        parts.append(f"{self.writable.path}={mine}")
        return hashlib.sha256("|".join(parts).encode()).hexdigest()
