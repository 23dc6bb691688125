"""The autotune cache's SQLite store: which choice won for a problem, one file per cache.

One row per problem key::

    schema_version(version INTEGER)            -- exactly one row: SCHEMA_VERSION
    entries(digest TEXT PRIMARY KEY,           -- ProblemKey.digest()
            key_json TEXT,                     -- the key's canonical JSON, checked on read
            schema_version INTEGER,            -- per row, so a stray row is detectable too
            device_name TEXT, created REAL,    -- plain columns, for ad-hoc SQL
            entry_json TEXT)                   -- the rest of the Entry
    facts(key TEXT PRIMARY KEY, value TEXT)    -- machine facts (the vector-ISA probe)

The key, the entry and the validator every row passes live in ``cache_entry.py``; read-only
layers (a shipped cache) and the lookup order in ``cache_layers.py``; merge, import and export
into files ext creates in ``cache_transfer.py``; the JSON export format in ``cache_json.py``.

A file is data, all of it: before any row is read or written, the file's schema must be ext's
three tables with ext's columns and nothing else (``check_schema``: no trigger, view, extra
index, CHECK or DEFAULT clause), so no SQL stored in a file ever runs on ext's reads or writes.
Every row goes through ``cache_entry.decode_row`` before it is used.

Several processes (compile workers, benchmark jobs) may write one file at once: the file
uses WAL journaling, every write is one ``BEGIN IMMEDIATE`` transaction, SQLite's busy
timeout waits for the lock and we retry a few more times on ``database is locked``.

Bad data is never fatal and never returned; each kind of problem is reported once per
cache object with an ``AutotuneCacheWarning`` naming the file and what was wrong:

* A row that fails the validator (another schema version, JSON too large or too deep, a number
  out of range, a name that exists nowhere, a key that does not match its digest or the key
  asked for) is ignored: a miss. A template config value its family does not allow is counted
  (``invalid``) with one line per entry naming the family, the field and what is allowed.
* A whole file that is unusable -- not SQLite, truncated or otherwise corrupt (it must pass
  ``PRAGMA quick_check`` on open), from another schema version, another program's
  database, a schema that is not ext's, or not openable at all -- is left exactly as it is and
  the cache carries on in memory for the life of the object: lookups miss, puts land in memory.
  We deliberately do not rename it aside and start fresh: another process may be
  mid-way through the same decision and would then move the *new* file aside, and a
  newer inductor_ext owning a newer schema must not find its file moved. Delete the file
  (or point ``INDUCTOR_EXT_CACHE_DIR`` elsewhere) to start afresh.
* A file ext would write in a folder that is not private to this user (owned by another uid,
  or writable by group or others) is not written: the cache carries on in memory, one line.

Reading a cache never creates or changes one: ``mode="if-exists"`` treats a missing file as an
empty cache, says so once at WARNING and creates neither the file nor its folder; ``mode="read"``
(``tune show``, shipped layers, merge's inputs) opens the file through a read-only connection
(``immutable=1`` unless a live ``-wal`` beside it in a writable folder holds recent entries) and
raises ``CacheFileError`` with one line when it is missing or unusable.

Caller mistakes (an invalid ``Entry``) raise ``ValueError`` / ``TypeError``: those are bugs.

This module must work on torch 2.11 too, so it uses only the standard library, platformdirs (and
the template families' plain-data field declarations).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import sqlite3
import stat
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import platformdirs

from inductor_ext.autotune.cache_entry import (SCHEMA_VERSION, BadRow, Entry, MergeConflict, MergeReport,
                                               ProblemKey, check_foreign, decode_row, merge, row_values)
from inductor_ext.autotune import cache_json
from inductor_ext.templates.allowed import InvalidField

__all__ = [
    "SCHEMA_VERSION",
    "AutotuneCache",
    "AutotuneCacheWarning",
    "CacheFileError",
    "Entry",
    "MergeConflict",
    "MergeReport",
    "ProblemKey",
    "check_schema",
    "default_cache_path",
    "user_cache_at",
]

_BUSY_TIMEOUT_S = 10.0  # SQLite itself waits this long for a lock...
_LOCK_RETRIES = 6  # ...and we retry the whole transaction this many times on top.
MAX_FACT = 64 * 1024  # a machine fact is a few hundred bytes

T = TypeVar("T")
log = logging.getLogger("inductor_ext.autotune")
_MODES = ("create", "if-exists", "read")


class AutotuneCacheWarning(UserWarning):
    """A cache file or row was unusable and has been ignored."""


class CacheFileError(Exception):
    """A cache file opened with ``mode="read"`` is missing or unusable; the message is one line."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path


_user_cache_override: list[Path] = []  # tune build's private scratch cache, innermost last


def default_cache_path() -> Path:
    """The user's own writable cache: ``$INDUCTOR_EXT_CACHE_DIR/autotune.db``, else
    ``<user cache dir>/inductor_ext/autotune.db`` (platformdirs': ``$XDG_CACHE_HOME`` or
    ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS)."""
    if _user_cache_override:
        return _user_cache_override[-1]
    override = os.environ.get("INDUCTOR_EXT_CACHE_DIR")
    if override:
        return Path(override).expanduser() / "autotune.db"
    return Path(platformdirs.user_cache_dir("inductor_ext", appauthor=False)) / "autotune.db"


@contextlib.contextmanager
def user_cache_at(path: Path) -> Iterator[None]:
    """Within this block the user's writable cache is ``path`` (``tune build`` tunes into a
    private scratch file, then copies the validated result to its output)."""
    _user_cache_override.append(path)
    try:
        yield
    finally:
        _user_cache_override.remove(path)


def folder_problem(folder: Path) -> str | None:
    """Why ext must not write a cache in ``folder`` (another user owns it, or group or others
    may write to it, so they could swap the file under us), or None where it may."""
    if not hasattr(os, "getuid"):  # Windows: no POSIX owners or modes
        return None
    try:
        info = folder.stat()
    except OSError as e:
        return f"cannot read {folder}: {e.strerror or e}"
    if info.st_uid != os.getuid():
        return f"{folder} belongs to uid {info.st_uid}, not to you (uid {os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{folder} is writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def make_private_folder(folder: Path) -> None:
    """Create ``folder`` and each missing parent with mode 0700 (an existing one is left as it is)."""
    missing = []
    for level in (folder, *folder.parents):
        if level.exists():
            break
        missing.append(level)
    for level in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it first
            level.mkdir(mode=0o700)


# -------------------------------------------------------------------------- schema

_DDL = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS entries ("
    " digest TEXT PRIMARY KEY, key_json TEXT NOT NULL, schema_version INTEGER NOT NULL,"
    " device_name TEXT NOT NULL, created REAL NOT NULL, entry_json TEXT NOT NULL)",
    # Facts about the machine a compile would otherwise measure again (e.g. Inductor's vector-ISA
    # probe), by a key that names everything the measurement depends on; not merged or exported.
    "CREATE TABLE IF NOT EXISTS facts (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
# What sqlite_master holds for a file ext made: each table as its DDL was written (SQLite drops
# "IF NOT EXISTS"), and the primary keys' automatic indexes (no SQL of their own).
_SCHEMA = {
    ("table", "schema_version"): _DDL[0].replace(" IF NOT EXISTS", ""),
    ("table", "entries"): _DDL[1].replace(" IF NOT EXISTS", ""),
    ("table", "facts"): _DDL[2].replace(" IF NOT EXISTS", ""),
    ("index", "sqlite_autoindex_entries_1"): None,
    ("index", "sqlite_autoindex_facts_1"): None,
}
_OPTIONAL = {("table", "facts"), ("index", "sqlite_autoindex_facts_1")}  # files from before facts were kept
_UPSERT = (
    "INSERT OR REPLACE INTO entries (digest, key_json, schema_version, device_name, created, entry_json)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_SELECT = "SELECT digest, key_json, schema_version, entry_json FROM entries"


class _UnusableFile(Exception):
    """The file is SQLite but not ours (other schema version, another program's tables, SQL of its own)."""


def check_schema(conn: sqlite3.Connection) -> bool:
    """True for a file with nothing in it yet. ``_UnusableFile`` for one whose schema is not exactly
    ext's: a trigger, view or index of its own, a table with other columns or clauses (CHECK,
    DEFAULT), another program's tables, another schema version. Nothing else is read before this."""
    objects = {(kind, name): sql for kind, name, sql in
               conn.execute("SELECT type, name, sql FROM sqlite_master")}
    if not objects:
        return True
    if ("table", "schema_version") not in objects:
        tables = sorted(name for kind, name in objects if kind == "table")
        raise _UnusableFile(f"not an autotune cache (tables: {', '.join(tables) or 'none'})")
    for (kind, name), sql in sorted(objects.items()):
        if (kind, name) not in _SCHEMA:
            raise _UnusableFile(f"holds a {kind} {name!r} that inductor_ext never makes; such a file is "
                                "refused whole (a trigger or view would run SQL from the file)")
        if sql != _SCHEMA[(kind, name)]:
            raise _UnusableFile(f"its {kind} {name!r} is not the one inductor_ext makes ({sql!r})")
    lacking = [name for (kind, name) in _SCHEMA if (kind, name) not in objects and (kind, name) not in _OPTIONAL]
    if lacking:
        raise _UnusableFile(f"lacks {', '.join(lacking)}")
    versions = conn.execute("SELECT version FROM schema_version").fetchall()
    if versions != [(SCHEMA_VERSION,)]:  # INTEGER affinity: a stored 1.0 or '1' reads back as 1
        found = ", ".join(repr(v[0]) for v in versions) or "none"
        raise _UnusableFile(f"schema version {found}, this inductor_ext reads {SCHEMA_VERSION}")
    return False


def _is_busy(e: sqlite3.Error) -> bool:
    msg = str(e).lower()
    return isinstance(e, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


def _is_damage(e: sqlite3.Error) -> bool:
    # Corruption, "file is not a database", I/O and permission errors are all
    # DatabaseError/OperationalError. Programming/Integrity/Interface errors are our bugs.
    return isinstance(e, sqlite3.DatabaseError) and not isinstance(
        e, (sqlite3.ProgrammingError, sqlite3.IntegrityError, sqlite3.InterfaceError)
    )


def open_read_only(path: Path) -> sqlite3.Connection:
    """``path`` opened so that nothing is written or created, its schema checked: read-only while a
    ``-wal`` beside it in a folder this process may write to holds recent entries (SQLite then
    reuses the files that are there), else immutable (a read-only open of a WAL database would
    create ``-wal`` and ``-shm`` files; in a read-only folder it could not open at all).
    ``CacheFileError`` with one line when it is missing or unusable."""
    if not path.is_file():
        raise CacheFileError(path, "no such autotune cache")
    live = path.with_name(path.name + "-wal").exists() and os.access(path.parent, os.W_OK)
    uri = f"{path.resolve().as_uri()}?{'mode=ro' if live else 'immutable=1'}"
    conn = None
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA query_only=ON")  # belt and braces: this connection never writes
        check = conn.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise sqlite3.DatabaseError(f"corrupt: quick_check says {check[0][0]!r}")
        if check_schema(conn):
            raise _UnusableFile("an empty file, not an autotune cache")
        return conn
    except (sqlite3.Error, _UnusableFile) as e:
        if conn is not None:
            conn.close()
        raise CacheFileError(path, f"not a usable autotune cache ({e})") from None


def read_rows(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """Every entries row, by digest."""
    return conn.execute(_SELECT + " ORDER BY digest").fetchall()


def rows_digest(rows: list[tuple[Any, ...]]) -> str:
    """A digest of exactly what ``rows`` hold: any edit of any field of any row changes it."""
    h = hashlib.sha256()
    for row in rows:
        h.update(repr(row).encode())  # repr: a str and an int of the same text differ
    return h.hexdigest()


# A connection inherited through fork() must be neither used nor closed in the child
# (closing could checkpoint/delete the parent's WAL). Parked here so GC never closes it.
_FORK_ORPHANS: list[sqlite3.Connection] = []


class AutotuneCache:
    """SQLite-backed map ProblemKey -> Entry, safe for several writer processes.

    ``path=None`` uses ``default_cache_path()``; ``":memory:"`` keeps everything in memory.
    ``mode``: ``"create"`` makes the file (and its folder) when missing; ``"if-exists"`` never
    creates it (a missing file is an empty in-memory cache, with one WARNING); ``"read"`` opens
    an existing file read-only and raises ``CacheFileError`` otherwise.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, mode: str = "create") -> None:
        if mode not in _MODES:
            raise ValueError(f"mode {mode!r} is not one of {_MODES}")
        self.mode = mode
        self.path: Path | None = None if path == ":memory:" else Path(path or default_cache_path())
        self.hits = 0
        self.misses = 0
        self.puts = 0
        self.invalid = 0  # entries read back and ignored: a config its family does not allow
        self.skipped = 0  # rows read back and ignored: any other field the validator refused
        self.in_memory = self.path is None  # True once the file has been given up on
        self._lock = threading.RLock()
        self._reported: set[str] = set()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._open()

    # -- connection handling

    def _open(self) -> None:
        if self.path is None:
            self._conn = self._memory_connection()
            return
        if self.mode != "create" and not self.path.exists():
            if self.mode == "read":
                raise CacheFileError(self.path, "no such autotune cache")
            log.warning("inductor_ext autotune cache %s does not exist: it is only read here (autotune='cache-only'), "
                        "so nothing is created and every GEMM runs ATen; build one with `inductor-ext tune build`",
                        self.path)
            self.in_memory = True
            self._conn = self._memory_connection()
            return
        if self.mode != "create":  # read, never written: puts then land in memory
            try:
                self._conn = open_read_only(self.path)
            except CacheFileError as e:
                if self.mode == "read":
                    raise
                self._go_in_memory(f"cannot use it ({e})")
            return
        make_private_folder(self.path.parent)
        unsafe = folder_problem(self.path.parent)
        if unsafe is not None:  # another user could swap the file: keep decisions in memory
            self._go_in_memory(f"not written: {unsafe} (set INDUCTOR_EXT_CACHE_DIR to a folder of yours)")
            return
        conn = None
        try:
            conn = sqlite3.connect(
                str(self.path), timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self._retry(lambda: self._init_file(conn))
            self._conn = conn
        except (OSError, sqlite3.Error, _UnusableFile) as e:
            if isinstance(e, sqlite3.Error) and not _is_damage(e):
                raise
            if conn is not None:
                conn.close()
            why = "still locked after retries" if isinstance(e, sqlite3.Error) and _is_busy(e) else str(e)
            self._go_in_memory(f"cannot use it ({why})")

    @staticmethod
    def _memory_connection() -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        for stmt in _DDL:
            conn.execute(stmt)
        conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
        return conn

    @classmethod
    def _init_file(cls, conn: sqlite3.Connection) -> None:
        # Reading every page once on open catches truncation and bit rot before any row
        # can be misread; an autotune cache is small, so this stays in the milliseconds.
        check = conn.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise sqlite3.DatabaseError(f"corrupt: quick_check says {check[0][0]!r}")
        check_schema(conn)  # before any write: a file that is not ours stays byte-identical
        # WAL lets readers proceed while one process writes; on filesystems without shared
        # memory it stays in rollback-journal mode, which is slower but just as safe.
        conn.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL never corrupts; a power cut may drop the last few puts, fine for a cache.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("BEGIN IMMEDIATE")  # two processes creating the same file: one waits
        try:
            if check_schema(conn):  # again, now under the write lock
                for stmt in _DDL:
                    conn.execute(stmt)
                conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            conn.execute(_DDL[1])  # repairs a file whose entries table was dropped
            conn.execute(_DDL[2])  # a file from before facts were kept gains the table
            conn.execute("COMMIT")
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise sqlite3.ProgrammingError("AutotuneCache is closed")
        if self._pid != os.getpid() and not self.in_memory:
            _FORK_ORPHANS.append(self._conn)
            self._pid = os.getpid()
            self._open()
        assert self._conn is not None
        return self._conn

    def _go_in_memory(self, why: str) -> None:
        self._report("file", f"{why}; continuing in memory, the file is left untouched")
        self.in_memory = True
        self._conn = self._memory_connection()

    def _report(self, kind: str, message: str) -> None:
        # Once per kind per cache object: a bad file must not flood the compile log.
        if kind in self._reported:
            return
        self._reported.add(kind)
        warnings.warn(f"inductor_ext autotune cache {self.path or ':memory:'}: {message}",
                      AutotuneCacheWarning, stacklevel=4)

    @staticmethod
    def _retry(fn: Callable[[], T]) -> T:
        delay = 0.02
        for attempt in range(_LOCK_RETRIES):
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if not _is_busy(e) or attempt == _LOCK_RETRIES - 1:
                    raise
                time.sleep(delay * (1 + random.random()))  # jitter: don't retry in lockstep
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    def _run(self, what: str, fn: Callable[[sqlite3.Connection], T], on_busy: T) -> T:
        """Run fn with lock retries. Damage switches to memory and reruns fn there; only our
        own bugs (ProgrammingError, IntegrityError) propagate."""
        with self._lock:
            try:
                return self._retry(lambda: fn(self._connection()))
            except sqlite3.Error as e:
                if _is_busy(e):
                    self._report("busy", f"{what} skipped: database still locked after retries")
                    return on_busy
                if not _is_damage(e) or self.in_memory:
                    raise
                self._go_in_memory(f"{what} failed ({e})")
            return fn(self._connection())

    @staticmethod
    def _write(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        # IMMEDIATE takes the write lock up front, so a read-then-write cannot deadlock
        # against another writer; the whole function body commits or nothing does.
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
            return result
        finally:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the original error is the one worth raising

    # -- rows

    def _decode(self, row: tuple[Any, ...], want_key_json: str | None = None) -> Entry | None:
        """Row -> Entry, or None (reported once) when it cannot be trusted (``cache_entry.decode_row``)."""
        try:
            return decode_row(*row, want_key_json=want_key_json)
        except InvalidField as e:  # once per entry: each names its own bad value
            self.invalid += 1
            self._report(f"config {str(row[0])[:64]}", f"ignoring the entry for {getattr(e, 'problem', '?')}: {e} (as if absent)")
            return None
        except BadRow as e:
            self.skipped += 1
            self._report("row", f"ignoring row {str(row[0])[:12]}: {e} (further bad rows are ignored silently)")
            return None

    def _all_rows(self) -> list[tuple[Any, ...]]:
        return self._run("read", read_rows, [])

    # -- public API

    def get(self, key: ProblemKey) -> Entry | None:
        key_json = key.canonical_json()
        digest = key.digest()
        row = self._run("get", lambda c: c.execute(_SELECT + " WHERE digest = ?", (digest,)).fetchone(), None)
        entry = self._decode(row, key_json) if row is not None else None
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def put(self, entry: Entry) -> None:
        """Store entry, replacing any entry for the same key (the last put wins)."""
        entry.validate()  # a bad entry is a caller bug: raise before touching the file
        check_foreign(entry)  # what is written must read back: the reader refuses what this refuses
        values = row_values(entry)
        stored = self._run("put", lambda c: self._write(c, lambda w: bool(w.execute(_UPSERT, values))), False)
        self.puts += stored  # a put skipped because the file stayed locked does not count

    def get_fact(self, key: str) -> str | None:
        """The value stored for machine fact ``key``, or None."""
        row = self._run("get fact", lambda c: c.execute("SELECT value FROM facts WHERE key = ?", (key,)).fetchone(),
                        None)
        if row is None:
            return None
        if not isinstance(row[0], str) or len(row[0]) > MAX_FACT:
            self._report("fact", f"ignoring the fact {key!r}: not text of at most {MAX_FACT} characters")
            return None
        return row[0]

    def put_fact(self, key: str, value: str) -> None:
        """Store machine fact ``key`` (the last put wins)."""
        self._run("put fact", lambda c: self._write(
            c, lambda w: w.execute("INSERT OR REPLACE INTO facts (key, value) VALUES (?, ?)", (key, value))), None)

    def entries(self) -> list[Entry]:
        """All usable entries, ordered by key digest."""
        return [e for e in map(self._decode, self._all_rows()) if e is not None]

    def __len__(self) -> int:
        return len(self.entries())

    def checkpoint(self) -> None:
        """Move every committed entry into the database file itself, so a copy of that one file
        (a cache built offline, shipped) holds them all: WAL keeps recent writes in ``-wal``
        beside it until the last connection closes, which a process exiting may never do."""
        self._run("checkpoint", lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone(), None)

    def state(self) -> str:
        """A digest of every row's exact content: part of the key of every compiled graph whose
        decisions were read from this cache, so that any edit (a winner changed, a row re-imported
        with the same ``created``) keys a new graph, where Inductor's FX graph cache would otherwise
        hand back one built from the old entries. A file locked past the retries matches nothing."""
        rows = self._run("state", read_rows, None)
        return f"unknown:{time.time_ns()}" if rows is None else rows_digest(rows)

    def merge_from(self, other_path: str | os.PathLike[str]) -> MergeReport:
        """Merge another cache file into this one: per key the newer ``created`` wins. The other
        file is only read (``mode="read"``): FileNotFoundError when missing, CacheFileError when
        unusable; each of its rows is validated, none of its SQL runs."""
        other_path = Path(other_path)
        if not other_path.exists():
            raise FileNotFoundError(other_path)
        if self.path is not None and self.path.exists() and other_path.samefile(self.path):
            return MergeReport(source=str(other_path))
        incoming, skipped = read_entries(other_path)
        return self.merge_entries(incoming, str(other_path), skipped)

    def merge_entries(self, incoming: list[Entry], source: str, skipped: int = 0) -> MergeReport:
        """``incoming`` merged in, per key the newer ``created`` wins; the report counts each."""
        def apply(conn: sqlite3.Connection) -> MergeReport:
            current = {}
            for new in incoming:
                digest = new.key.digest()
                row = conn.execute(_SELECT + " WHERE digest = ?", (digest,)).fetchone()
                old = self._decode(row, new.key.canonical_json()) if row is not None else None
                if old is not None:
                    current[digest] = old
            report, winners = merge(current, incoming, source, skipped)  # fresh on every retry
            for entry in winners:
                conn.execute(_UPSERT, row_values(entry))
            return report

        empty = MergeReport(source=source, skipped_invalid=skipped)
        return self._run("merge", lambda c: self._write(c, apply), empty)

    def export_json(self, path: str | os.PathLike[str]) -> None:
        """Write all entries as sorted, indented JSON: same contents -> same bytes."""
        cache_json.write_json(self.entries(), Path(path))

    def import_json(self, path: str | os.PathLike[str]) -> MergeReport:
        """Merge an ``export_json`` file (newer wins). A malformed file: ValueError and nothing
        imported. An entry that fails the validator is skipped, counted (``skipped_invalid``) and
        reported in one line."""
        incoming, skipped = cache_json.read_json(Path(path), self._report)
        return self.merge_entries(incoming, str(path), skipped)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> AutotuneCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self.in_memory else str(self.path)
        return (f"AutotuneCache({where}, hits={self.hits}, misses={self.misses}, puts={self.puts}, "
                f"invalid={self.invalid})")


def read_entries(path: Path) -> tuple[list[Entry], int]:
    """The usable entries of cache ``path``, read through a read-only connection, and how many rows
    the validator skipped. ``CacheFileError`` when the file is missing or unusable."""
    with AutotuneCache(path, mode="read") as source:
        rows = source._all_rows()
        entries = [e for e in map(source._decode, rows) if e is not None]
    return entries, len(rows) - len(entries)
