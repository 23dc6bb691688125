"""Moving entries between caches: merge, import, export, and writing a cache file whole.

Nothing here runs SQL from another file or writes into one: a source is read through a
read-only connection (its schema checked first, ``cache.open_read_only``) or parsed as JSON,
every entry goes through the validator (``cache_entry``), and the result is written by ext into
a new file beside the output, renamed over it only once it is complete. So a failed command
leaves nothing behind, and a file with a trigger or a CHECK clause is refused, never written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from inductor_ext.autotune import cache as store
from inductor_ext.autotune.cache_entry import (SCHEMA_VERSION, BadRow, Entry, MergeConflict, MergeReport,
                                               ProblemKey, bounded_json, shown)
from inductor_ext.templates.allowed import InvalidField

EXPORT_FORMAT = "inductor_ext.autotune"
MAX_EXPORT = 256 * 1024 * 1024  # an export of 10k entries is ~60 MB


class OutputError(OSError):
    """An output file that cannot be written as asked; the message is one line."""


def read_entries(path: Path) -> tuple[list[Entry], int]:
    """The usable entries of cache ``path`` (read-only) and how many rows were skipped."""
    with store.AutotuneCache(path, mode="read") as source:
        rows = source._all_rows()
        entries = [e for e in map(source._decode, rows) if e is not None]
    return entries, len(rows) - len(entries)


def read_json(path: Path, report: Callable[[str, str], None]) -> tuple[list[Entry], int]:
    """The entries of an export file. A malformed file: ValueError (one line). An entry that fails
    the validator is skipped with one line (``report``) and counted."""
    try:
        size = path.stat().st_size
        if size > MAX_EXPORT:
            raise ValueError(f"{path}: {size} bytes; at most {MAX_EXPORT} are read")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason})") from None
    try:
        doc = bounded_json(text, str(path), MAX_EXPORT, max_depth=10)
    except BadRow as e:
        raise ValueError(str(e)) from None
    if not isinstance(doc, dict) or set(doc) != {"format", "schema_version", "entries"}:
        raise ValueError(f"{path}: expected an object with format, schema_version, entries")
    if doc["format"] != EXPORT_FORMAT or type(doc["schema_version"]) is not int \
            or doc["schema_version"] != SCHEMA_VERSION:
        raise ValueError(f"{path}: format {shown(doc['format'])} "
                         f"v{shown(doc['schema_version'])}, expected {EXPORT_FORMAT!r} v{SCHEMA_VERSION}")
    if not isinstance(doc["entries"], list):
        raise ValueError(f"{path}: entries must be a list")
    incoming: list[Entry] = []
    seen: set[str] = set()
    skipped = 0
    for i, d in enumerate(doc["entries"]):
        try:
            entry = Entry.from_dict(d)
        except (InvalidField, BadRow) as e:
            skipped += 1
            report(f"import {path} {i}", f"skipping {path} entries[{i}] ({_describe(d)}): {e}")
            continue
        digest = entry.key.digest()
        if digest in seen:
            raise ValueError(f"{path}: entries[{i}]: duplicate key {entry.key.describe()}")
        seen.add(digest)
        incoming.append(entry)
    return incoming, skipped


def _describe(d: object) -> str:
    try:
        return ProblemKey.from_dict(d["key"]).describe()  # type: ignore[index]
    except (BadRow, KeyError, TypeError):
        return "an unreadable key"


def merge(current: dict[str, Entry], incoming: Iterable[Entry], source: str,
          skipped: int = 0) -> tuple[MergeReport, list[Entry]]:
    """``incoming`` merged over ``current`` (by key digest): per key the newer ``created`` wins.
    Returns the report and the incoming entries that win (to be written)."""
    report = MergeReport(source=source, skipped_invalid=skipped)
    winners = []
    for new in incoming:
        digest = new.key.digest()
        old = current.get(digest)
        if old is None:
            winners.append(new)
            current[digest] = new
            report.added += 1
            continue
        # The device is part of the key, so both sides measured the same device:
        # the newer measurement (newer code, drivers) is the better one.
        theirs_newer = new.created > old.created
        if new.winner != old.winner:
            report.conflicts.append(MergeConflict(digest, new.key.describe(), old.winner, new.winner,
                                                  "theirs" if theirs_newer else "ours"))
        if theirs_newer:
            winners.append(new)
            report.replaced += 1
        else:
            report.kept += 1
        current[digest] = new if theirs_newer else old
    return report, winners


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


def _temp_beside(out: Path, suffix: str) -> Path:
    """A fresh file beside ``out`` (so the final rename stays on one file system)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=suffix)
    except OSError as e:
        raise OutputError(f"{out}: cannot write in {out.parent} ({e.strerror or e})") from None
    os.close(fd)
    return Path(tmp)


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


def to_json_text(entries: Iterable[Entry]) -> str:
    """Entries as sorted, indented JSON: same contents -> same bytes. Grouped by op, then
    numerically by shape, so related problems sit together in a diff."""
    ordered = sorted(entries, key=lambda e: (e.key.op, e.key.shapes, e.key.canonical_json()))
    doc = {"format": EXPORT_FORMAT, "schema_version": SCHEMA_VERSION, "entries": [e.to_dict() for e in ordered]}
    return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n"


def write_json(entries: Iterable[Entry], out: Path) -> None:
    """``entries`` exported to ``out``, written beside it and renamed into place."""
    text = to_json_text(entries)
    tmp = _temp_beside(out, ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as e:
        raise OutputError(f"{out}: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)


def merged_entries(sources: Iterable[tuple[str, list[Entry], int]]) -> tuple[list[Entry], list[MergeReport]]:
    """Each source's entries merged in order (newer wins), with one report per source."""
    current: dict[str, Entry] = {}
    reports = []
    for name, entries, skipped in sources:
        report, _ = merge(current, entries, name, skipped)
        reports.append(report)
    return list(current.values()), reports
