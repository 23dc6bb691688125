"""Decision tables: tuned decisions shipped as data, for machines that never tuned.

A table is a JSON file of cache entries (``cache_entry.Entry``) whose keys are *portable*: the
key of the problem as a compile makes it, with the device named by its CPU form (the ISA torch's
kernels run at and the thread count, ``targets/cpu.py: host_form``) instead of the machine's model,
and no package versions or template source hash. So one table serves every machine of that form
and outlives a torch upgrade; a config it names is still checked by its family before it serves.

Tables are data, read like a foreign cache: the file is size-bounded JSON, every entry goes
through the cache's validator (a template config field by field, ``templates/allowed.py``), a
refused entry is skipped with one log line, and a refused file is skipped whole with one line.
Nothing here can fail a compile. The package's own tables live in ``autotune/tables/`` (built by
``scripts/build_decision_tables.py``); a user's own come first (``options={"decision_tables": ...}``).
Which table entry serves is the exact portable key; ``cost_model.py`` reads the same entries for
problems no entry covers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from inductor_ext.autotune.cache_entry import SCHEMA_VERSION, BadRow, Entry, ProblemKey, bounded_json, printable
from inductor_ext.autotune.cache_json import document_problem, valid_entries

__all__ = ["TABLE_FORMAT", "Table", "TableSet", "load_table", "package_table_paths", "portable", "table_text"]

log = logging.getLogger("inductor_ext.autotune")

TABLE_FORMAT = "inductor_ext.decision_table"
MAX_TABLE_BYTES = 32 * 1024 * 1024
MAX_REFUSED_LINES = 5  # per table: a wholly foreign table says so in a few lines, not thousands
# What a table says of where its numbers come from; every field a short printable string.
PROVENANCE = ("cpu", "form", "date", "torch", "inductor_ext", "command")


def portable(key: ProblemKey, form: str) -> ProblemKey:
    """``key`` as a table holds it: the device as its CPU ``form``, no versions, no source hash."""
    return dataclasses.replace(key, device_name=form, versions=(), template_hash="")


@dataclass(frozen=True)
class Table:
    """One table as read: its usable entries by portable-key digest."""

    name: str  # the file, or "package:<file>" for the package's own
    provenance: Mapping[str, str]
    entries: Mapping[str, Entry]
    refused: int  # entries the validator refused
    digest: str  # of the file's bytes: a compiled graph's key holds it

    def get(self, key: ProblemKey) -> Entry | None:
        entry = self.entries.get(key.digest())
        return entry if entry is not None and entry.key == key else None


def table_text(entries: Iterable[Entry], provenance: Mapping[str, str]) -> str:
    """A table file's text: sorted, indented JSON (diffable), entries by op then shape."""
    missing = [f for f in PROVENANCE if f not in provenance]
    if missing:
        raise ValueError(f"a table's provenance needs {', '.join(missing)}")
    ordered = sorted(entries, key=lambda e: (e.key.op, e.key.shapes, e.key.canonical_json()))
    doc = {"format": TABLE_FORMAT, "schema_version": SCHEMA_VERSION, "provenance": dict(provenance),
           "entries": [e.to_dict() for e in ordered]}
    return json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=True, allow_nan=False) + "\n"


def _refused(name: str, what: str) -> None:
    log.warning("ext: decision table %s refused, compiles run as without it: %s", name, printable(what))


def parse_table(data: bytes, name: str) -> Table | None:
    """``data`` as a table, or None with one log line when the file is refused whole. Each entry
    the validator refuses is skipped with one line (the first few) and counted."""
    if len(data) > MAX_TABLE_BYTES:
        _refused(name, f"{len(data)} bytes; at most {MAX_TABLE_BYTES} are read")
        return None
    try:
        doc = bounded_json(data.decode("utf-8"), name, MAX_TABLE_BYTES, max_depth=10)
    except UnicodeDecodeError as e:
        _refused(name, f"not UTF-8 text ({e.reason})")
        return None
    except BadRow as e:
        _refused(name, str(e))
        return None
    why = _document_problem(doc)
    if why is not None:
        _refused(name, why)
        return None
    entries: dict[str, Entry] = {}
    refused = 0

    def refuse(i: int, d: object, e: Exception) -> None:
        nonlocal refused
        refused += 1
        if refused <= MAX_REFUSED_LINES:
            log.warning("ext: decision table %s: entries[%d] refused and skipped: %s", name, i, printable(str(e)))

    for _, entry in valid_entries(doc["entries"], refuse):
        entries.setdefault(entry.key.digest(), entry)  # first of duplicates, as a lookup would
    if refused > MAX_REFUSED_LINES:
        log.warning("ext: decision table %s: %d entries refused in all", name, refused)
    return Table(name, dict(doc["provenance"]), entries, refused, hashlib.sha256(data).hexdigest())


def _document_problem(doc: Any) -> str | None:
    """Why ``doc`` is no table, or None."""
    why = document_problem(doc, TABLE_FORMAT, ("format", "schema_version", "provenance", "entries"))
    if why is not None:
        return why
    provenance = doc["provenance"]
    if not isinstance(provenance, dict) or any(f not in provenance for f in PROVENANCE) or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) <= 512 and v.isprintable()
            for k, v in provenance.items()):
        return f"provenance must map {', '.join(PROVENANCE)} to short printable strings"
    return None


def package_table_paths() -> list[Path]:
    """The package's own tables (``autotune/tables/*.json``), by name."""
    folder = importlib.resources.files("inductor_ext.autotune") / "tables"
    if not folder.is_dir():
        return []
    return sorted((Path(str(p)) for p in folder.iterdir() if p.name.endswith(".json")), key=lambda p: p.name)


_tables: dict[tuple[str, str], tuple[str, Table | None]] = {}  # (path, name): parsed once per content
_lock = threading.Lock()


def load_table(path: str | os.PathLike[str], name: str | None = None) -> Table | None:
    """The table at ``path`` (None with one line when missing or refused), parsed once per content
    of the file in this process (its bytes, not its stat: an edit in place can keep the mtime)."""
    path = Path(path)
    label = name or str(path)
    try:
        if not path.is_file():
            _refused(label, "no such file" if not path.exists() else "not a regular file")
            return None
        with open(path, "rb") as f:
            data = f.read(MAX_TABLE_BYTES + 1)
    except OSError as e:
        _refused(label, e.strerror or str(e))
        return None
    digest = hashlib.sha256(data).hexdigest()
    with _lock:
        known = _tables.get((str(path), label))
        if known is not None and known[0] == digest:
            return known[1]  # a refused file said so once
        table = parse_table(data, label)
        _tables[(str(path), label)] = (digest, table)
        return table


class TableSet:
    """The tables of one compile, in order (the user's first, then the package's): first match wins."""

    def __init__(self, tables: Sequence[Table]) -> None:
        self.tables = list(tables)

    @classmethod
    def for_paths(cls, user_paths: Sequence[str], package: bool = True) -> TableSet:
        found = [load_table(p) for p in user_paths]
        if package:
            found += [load_table(p, f"package:{p.name}") for p in package_table_paths()]
        return cls([t for t in found if t is not None])

    def get(self, key: ProblemKey, form: str) -> tuple[Entry, str] | None:
        """The first entry for ``key`` on a machine of ``form``, and the table it came from."""
        wanted = portable(key, form)
        for table in self.tables:
            entry = table.get(wanted)
            if entry is not None:
                return entry, table.name
        return None

    def entries(self, form: str) -> list[Entry]:
        """Every entry measured on a machine of ``form`` (the cost model's evidence), first of equals."""
        seen: dict[str, Entry] = {}
        for table in self.tables:
            for digest, entry in table.entries.items():
                if entry.key.device_name == form:
                    seen.setdefault(digest, entry)
        return list(seen.values())

    def digest(self) -> str:
        return hashlib.sha256("|".join(f"{t.name}={t.digest}" for t in self.tables).encode()).hexdigest()
