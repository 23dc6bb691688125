"""The export format of an autotune cache: sorted, indented JSON (diffable, reviewable), read back
with every entry validated (``cache_entry``), and written beside its output then renamed into
place. Plain data and files: no SQLite here (``cache.py``), no combining of files
(``cache_transfer.py``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from inductor_ext.autotune.cache_entry import SCHEMA_VERSION, BadRow, Entry, ProblemKey, bounded_json, shown
from inductor_ext.templates.allowed import InvalidField

__all__ = ["EXPORT_FORMAT", "OutputError", "document_problem", "read_json", "temp_beside", "to_json_text",
           "valid_entries", "write_json"]

EXPORT_FORMAT = "inductor_ext.autotune"
MAX_EXPORT = 256 * 1024 * 1024  # an export of 10k entries is ~60 MB


class OutputError(OSError):
    """An output file that cannot be written as asked; the message is one line."""


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
    why = document_problem(doc, EXPORT_FORMAT, ("format", "schema_version", "entries"))
    if why is not None:
        raise ValueError(f"{path}: {why}")
    incoming: list[Entry] = []
    seen: set[str] = set()
    skipped = 0

    def skip(i: int, d: object, e: Exception) -> None:
        nonlocal skipped
        skipped += 1
        report(f"import {path} {i}", f"skipping {path} entries[{i}] ({_describe(d)}): {e}")

    for i, entry in valid_entries(doc["entries"], skip):
        digest = entry.key.digest()
        if digest in seen:
            raise ValueError(f"{path}: entries[{i}]: duplicate key {entry.key.describe()}")
        seen.add(digest)
        incoming.append(entry)
    return incoming, skipped


def document_problem(doc: object, fmt: str, fields: Sequence[str]) -> str | None:
    """Why ``doc`` is not a ``fmt`` document of exactly ``fields`` (``format``, ``schema_version``
    this version, ``entries`` a list, and any others the caller checks), or None."""
    if not isinstance(doc, dict) or set(doc) != set(fields):
        return f"expected an object with {', '.join(fields)}"
    if doc["format"] != fmt or type(doc["schema_version"]) is not int or doc["schema_version"] != SCHEMA_VERSION:
        return f"format {shown(doc['format'])} v{shown(doc['schema_version'])}, expected {fmt!r} v{SCHEMA_VERSION}"
    if not isinstance(doc["entries"], list):
        return "entries must be a list"
    return None


def valid_entries(items: list[Any], refuse: Callable[[int, Any, Exception], None]) -> Iterator[tuple[int, Entry]]:
    """Each of ``items`` the validator reads as an entry, with its index; each one it refuses goes
    to ``refuse`` (index, item, why) and is skipped."""
    for i, d in enumerate(items):
        try:
            entry = Entry.from_dict(d)
        except (InvalidField, BadRow) as e:
            refuse(i, d, e)
            continue
        yield i, entry


def _describe(d: object) -> str:
    try:
        return ProblemKey.from_dict(d["key"]).describe()  # type: ignore[index]
    except (BadRow, KeyError, TypeError):
        return "an unreadable key"


def temp_beside(out: Path, suffix: str) -> Path:
    """A fresh file beside ``out`` (so the final rename stays on one file system)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=suffix)
    except OSError as e:
        raise OutputError(f"{out}: cannot write in {out.parent} ({e.strerror or e})") from None
    os.close(fd)
    return Path(tmp)


def to_json_text(entries: Iterable[Entry]) -> str:
    """Entries as sorted, indented JSON: same contents -> same bytes. Grouped by op, then
    numerically by shape, so related problems sit together in a diff."""
    ordered = sorted(entries, key=lambda e: (e.key.op, e.key.shapes, e.key.canonical_json()))
    doc = {"format": EXPORT_FORMAT, "schema_version": SCHEMA_VERSION, "entries": [e.to_dict() for e in ordered]}
    return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n"


def write_json(entries: Iterable[Entry], out: Path) -> None:
    """``entries`` exported to ``out``, written beside it and renamed into place."""
    text = to_json_text(entries)
    tmp = temp_beside(out, ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as e:
        raise OutputError(f"{out}: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)
