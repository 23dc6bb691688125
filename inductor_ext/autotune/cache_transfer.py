"""Combining caches: merge, import, export, and writing a cache file whole.

Nothing here runs SQL from another file or writes into one: a source is read through a
read-only connection (its schema checked first, ``cache.read_entries``) or parsed as JSON
(``cache_json``), every entry goes through the validator (``cache_entry``), and the result is
written by ext into a new file beside the output, renamed over it only once it is complete. So a
failed command leaves nothing behind, and a file with a trigger or a CHECK clause is refused,
never written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from inductor_ext.autotune import cache as store
from inductor_ext.autotune.cache import read_entries
from inductor_ext.autotune.cache_entry import Entry, MergeReport, merge
from inductor_ext.autotune.cache_json import OutputError, read_json, write_json

__all__ = ["OutputError", "check_output", "merged_entries", "read_entries", "read_json", "write_cache", "write_json"]


def check_output(out: Path, update: bool, what: str = "cache") -> None:
    """``OutputError`` (one line) unless ``out`` can be written as asked: its folder exists (it is
    never created), ``out`` is not there yet unless ``update`` says to add to it."""
    folder = out.parent
    if not folder.is_dir():
        raise OutputError(f"{out}: no folder {str(folder)!r} to write it in (create it first)")
    if out.is_dir():
        raise OutputError(f"{out} is a folder; give the {what} file to write")
    if out.exists() and not update:
        raise OutputError(f"{out} exists; pass --update to add to it, or name a new file")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{out}: the folder {str(folder)!r} is not writable by you")


def write_cache(entries: Iterable[Entry], out: Path) -> None:
    """A new cache file at ``out`` holding ``entries``, built in a private folder beside it and
    renamed into place: a reader never sees half a file, and a failure leaves nothing behind."""
    try:
        scratch = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))  # 0700
    except OSError as e:
        raise OutputError(f"{out}: cannot write in {out.parent} ({e.strerror or e})") from None
    try:
        with store.AutotuneCache(scratch / "cache.db") as cache:
            if cache.in_memory:
                raise OutputError(f"{out}: cannot write a cache in {out.parent}")
            for entry in entries:
                cache.put(entry)
            cache.checkpoint()  # the file alone is the whole cache, ready to copy
        os.replace(scratch / "cache.db", out)
    except OutputError:
        raise
    except OSError as e:
        raise OutputError(f"{out}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def merged_entries(sources: Iterable[tuple[str, list[Entry], int]]) -> tuple[list[Entry], list[MergeReport]]:
    """Each source's entries merged in order (newer wins), with one report per source."""
    current: dict[str, Entry] = {}
    reports = []
    for name, entries, skipped in sources:
        report, _ = merge(current, entries, name, skipped)
        reports.append(report)
    return list(current.values()), reports
