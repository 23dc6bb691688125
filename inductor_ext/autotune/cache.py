"""Persistent autotune cache: which choice won for a problem, stored in SQLite.

One row per problem key::

    schema_version(version INTEGER)            -- exactly one row: SCHEMA_VERSION
    entries(digest TEXT PRIMARY KEY,           -- ProblemKey.digest()
            key_json TEXT,                     -- the key's canonical JSON, checked on read
            schema_version INTEGER,            -- per row, so a stray row is detectable too
            device_name TEXT, created REAL,    -- plain columns, for ad-hoc SQL
            entry_json TEXT)                   -- the rest of the Entry

Several processes (compile workers, benchmark jobs) may write one file at once: the file
uses WAL journaling, every write is one ``BEGIN IMMEDIATE`` transaction, SQLite's busy
timeout waits for the lock and we retry a few more times on ``database is locked``.

Bad data is never fatal and never returned; each kind of problem is reported once per
cache object with an ``AutotuneCacheWarning`` naming the file and what was wrong:

* A row from another schema version, with unparsable JSON, or whose stored key does not
  match its digest or the key asked for (collision, tampering) is ignored: a miss.
* A cache is data, never code: an entry whose winner is a template family holds that family's
  config, whose values go into generated kernel source. Each value is checked against what the
  family declares for the field (``templates/allowed.py``); an entry with one it does not allow
  is ignored (a miss) and counted (``invalid``), with one line per entry naming the family, the
  field, the value and what is allowed. ``import_json`` skips such entries the same way.
* A whole file that is unusable -- not SQLite, truncated or otherwise corrupt (it must pass
  ``PRAGMA quick_check`` on open), from another schema version, another program's
  database, or not openable at all -- is left exactly as it is and the cache carries on
  in memory for the life of the object: lookups miss, puts land in memory only.
  We deliberately do not rename it aside and start fresh: another process may be
  mid-way through the same decision and would then move the *new* file aside, and a
  newer inductor_ext owning a newer schema must not find its file moved. Delete the file
  (or point ``INDUCTOR_EXT_CACHE_DIR`` elsewhere) to start afresh.

Reading a cache never creates one: ``mode="if-exists"`` (what ``autotune="cache-only"`` opens)
treats a missing file as an empty cache, says so once at WARNING and creates neither the file nor
its folder; ``mode="read"`` (``tune show``, ``export``, ``merge``'s inputs) opens the file read-only
and raises ``CacheFileError`` with one line when it is missing or unusable.

Caller mistakes (an invalid ``Entry``, an invalid JSON file given to ``import_json``) raise
``ValueError`` / ``TypeError``: those are bugs, not cache damage.

This module must work on torch 2.11 too, so it uses only the standard library, platformdirs (and
the template families' plain-data field declarations).

It stays one module past 600 lines on purpose: the key, the entry, the SQLite file and the merge
share one schema (``SCHEMA_VERSION``, the row layout, the key's canonical JSON) and one account of
bad data (each check warns once per cache object); split, each half would re-derive the other's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import operator
import os
import random
import sqlite3
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

import platformdirs

from inductor_ext.templates import registry
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
    "default_cache_path",
]

# Bump when the table layout, the key's canonical JSON or the Entry fields change.
SCHEMA_VERSION = 1
_EXPORT_FORMAT = "inductor_ext.autotune"

_BUSY_TIMEOUT_S = 10.0  # SQLite itself waits this long for a lock...
_LOCK_RETRIES = 6  # ...and we retry the whole transaction this many times on top.

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


def default_cache_path() -> Path:
    """``$INDUCTOR_EXT_CACHE_DIR/autotune.db``, else ``<user cache dir>/inductor_ext/autotune.db``
    (platformdirs': ``$XDG_CACHE_HOME`` or ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS)."""
    override = os.environ.get("INDUCTOR_EXT_CACHE_DIR")
    if override:
        return Path(override).expanduser() / "autotune.db"
    return Path(platformdirs.user_cache_dir("inductor_ext", appauthor=False)) / "autotune.db"


# --------------------------------------------------------------------------- keys


def _digest(canonical_json: str) -> str:
    return hashlib.sha256(canonical_json.encode()).hexdigest()


def _as_int(x: Any) -> int:
    if isinstance(x, bool):  # bool is an int subclass but never a size
        raise TypeError(f"expected an int, got {x!r}")
    return operator.index(x)  # accepts numpy ints, rejects floats and strings


def _int_rows(value: Iterable[Iterable[Any]], name: str) -> tuple[tuple[int, ...], ...]:
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of sequences of ints")
    return tuple(tuple(_as_int(x) for x in row) for row in value)


def _dtype_name(d: Any) -> str:
    # Accept torch.dtype without importing torch: str(torch.bfloat16) == "torch.bfloat16".
    s = str(d)
    return s[len("torch.") :] if s.startswith("torch.") else s


def _versions(value: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> tuple[tuple[str, str], ...]:
    pairs = list(value.items()) if isinstance(value, Mapping) else [tuple(p) for p in value]
    out: dict[str, str] = {}
    for pair in pairs:
        if len(pair) != 2:
            raise TypeError(f"versions entries must be (package, version) pairs, got {pair!r}")
        pkg, ver = str(pair[0]), str(pair[1])
        if pkg in out:
            raise ValueError(f"package {pkg!r} listed twice in versions")
        out[pkg] = ver
    return tuple(sorted(out.items()))  # order-independent: sorted by package


_FP32_PRECISIONS = ("", "tf32", "ieee")

_SHORT_DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
    "float64": "fp64",
    "float8_e4m3fn": "fp8e4m3",
    "float8_e4m3fnuz": "fp8e4m3fnuz",
    "float8_e5m2": "fp8e5m2",
    "float8_e5m2fnuz": "fp8e5m2fnuz",
    "int8": "i8",
    "int32": "i32",
    "int64": "i64",
}


def _require_fields(cls: type, d: Any, what: str) -> None:
    """ValueError unless ``d`` is a dict with exactly the dataclass ``cls``'s fields."""
    names = {f.name for f in fields(cls)}
    if not isinstance(d, dict) or set(d) != names:
        got = sorted(d) if isinstance(d, dict) else type(d).__name__
        raise ValueError(f"{what} must have exactly the fields {sorted(names)}, got {got}")


@dataclass(frozen=True)
class ProblemKey:
    """Everything that decides which kernel wins; equal keys may share a cached winner.

    Sequences are normalised on construction (lists -> tuples, torch dtypes -> "bfloat16",
    a versions dict -> sorted pairs), so equal problems hash and digest equal.
    """

    op: str  # e.g. "mm"
    shapes: tuple[tuple[int, ...], ...]  # one tuple per input
    strides: tuple[tuple[int, ...], ...]  # one tuple per input
    dtypes: tuple[str, ...]  # e.g. ("bfloat16", "bfloat16")
    device_name: str  # e.g. "NVIDIA H100 80GB HBM3"
    arch: str  # e.g. "sm_90a", "gfx950", "cpu"
    versions: tuple[tuple[str, str], ...] = ()  # (package, version), e.g. torch, triton, DSLs
    template_hash: str = ""  # source hash of the template family (templates.module_source_hash)
    preset: str = "default"
    # torch's fp32 matmul precision for a GEMM with fp32 inputs ("tf32" or "ieee": what ATen and
    # the templates then run); "" where it does not apply. Left out of to_dict when "", so the
    # keys (and digests) of every other problem are what they were before the field existed.
    fp32_precision: str = ""
    # Dynamic shapes: the symbolic dims of each input, by index ((0,) for a symbolic M of A), one
    # tuple per input. ``shapes`` then holds their size hints: the decision was tuned at those sizes
    # and serves every size the graph admits, so it never answers for the static problem of the
    # same sizes, nor that one for it. () for a static problem, left out of to_dict as above.
    dynamic: tuple[tuple[int, ...], ...] = ()
    # Whether the graph returns the op's output: then it is fresh memory in every call, and the
    # choices were timed writing fresh pages (lowering/cold_timing.py), which can rank them
    # otherwise than into a reused buffer. False is left out of to_dict, as above.
    returned: bool = False

    def __post_init__(self) -> None:
        setattr_ = object.__setattr__  # frozen: normalise in place once
        setattr_(self, "shapes", _int_rows(self.shapes, "shapes"))
        setattr_(self, "strides", _int_rows(self.strides, "strides"))
        if isinstance(self.dtypes, str):
            raise TypeError("dtypes must be a sequence of dtype names")
        setattr_(self, "dtypes", tuple(_dtype_name(d) for d in self.dtypes))
        setattr_(self, "versions", _versions(self.versions))
        for name in ("op", "device_name", "arch", "template_hash", "preset"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"ProblemKey.{name} must be a str, got {getattr(self, name)!r}")
        dynamic = _int_rows(self.dynamic, "dynamic")
        if any(dynamic):
            if len(dynamic) != len(self.shapes) or any(d < 0 or d >= len(s) for row, s in zip(dynamic, self.shapes)
                                                        for d in row):
                raise ValueError(f"ProblemKey.dynamic {dynamic!r} names dims the shapes {self.shapes!r} lack")
        setattr_(self, "dynamic", dynamic if any(dynamic) else ())
        if not isinstance(self.returned, bool):
            raise TypeError(f"ProblemKey.returned must be a bool, got {self.returned!r}")
        if self.fp32_precision not in _FP32_PRECISIONS:
            raise ValueError(f"ProblemKey.fp32_precision must be one of {_FP32_PRECISIONS}, "
                             f"got {self.fp32_precision!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "shapes": [list(s) for s in self.shapes],
            "strides": [list(s) for s in self.strides],
            "dtypes": list(self.dtypes),
            "device_name": self.device_name,
            "arch": self.arch,
            "versions": [list(p) for p in self.versions],
            "template_hash": self.template_hash,
            "preset": self.preset,
            **({"fp32_precision": self.fp32_precision} if self.fp32_precision else {}),
            **({"dynamic": [list(r) for r in self.dynamic]} if self.dynamic else {}),
            **({"returned": True} if self.returned else {}),
        }

    @classmethod
    def from_dict(cls, d: Any) -> ProblemKey:
        """Strict inverse of ``to_dict``; ValueError on anything else."""
        if isinstance(d, dict) and "fp32_precision" not in d:  # to_dict leaves out ""
            d = {**d, "fp32_precision": ""}
        if isinstance(d, dict) and "dynamic" not in d:  # likewise ()
            d = {**d, "dynamic": []}
        if isinstance(d, dict) and "returned" not in d:  # likewise False
            d = {**d, "returned": False}
        _require_fields(cls, d, "key")
        try:
            # JSON gives str already; refuse anything the constructor would silently str().
            if not all(isinstance(x, str) for x in d["dtypes"]) or not all(
                isinstance(p, list) and all(isinstance(x, str) for x in p) for p in d["versions"]
            ):
                raise ValueError("dtypes/versions must hold strings")
            return cls(**d)
        except (TypeError, ValueError) as e:
            raise ValueError(f"invalid key: {e}") from None

    def canonical_json(self) -> str:
        # Sorted keys, no whitespace, ASCII only: the same key gives the same bytes everywhere.
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    def digest(self) -> str:
        return _digest(self.canonical_json())

    def describe(self) -> str:
        """Short human text, e.g. ``"mm 128x64x256 bf16"`` (matmuls print M x N x K)."""
        dtypes = ",".join(dict.fromkeys(_SHORT_DTYPES.get(d, d) for d in self.dtypes))
        tf32 = "tf32" if self.fp32_precision == "tf32" else ""
        returned = "returned" if self.returned else ""
        return " ".join(p for p in (self.op, self._shape_text(), dtypes, tf32, returned) if p)

    def _shape_text(self) -> str:
        """Sizes as text, a symbolic one as ``~hint`` (dynamic shapes: tuned at the hint)."""
        marked = [tuple(f"~{n}" if self.dynamic and d in self.dynamic[i] else str(n) for d, n in enumerate(s))
                  for i, s in enumerate(self.shapes)]
        if "mm" in self.op and len(self.shapes) >= 2:
            (a, b), (ta, tb) = self.shapes[-2:], marked[-2:]  # addmm & co. put the bias first
            if len(a) == len(b) == 2 and a[1] == b[0]:
                return f"{ta[0]}x{tb[1]}x{ta[1]}"
            if len(a) == len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
                return f"{ta[0]}x{ta[1]}x{tb[2]}x{ta[2]}"
        return ",".join("x".join(s) or "scalar" for s in marked)


# ------------------------------------------------------------------------ entries

_REASONS = ("benchmark", "cache", "policy-only")


def _is_time(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def _check_family_config(winner: str, config: dict[str, Any]) -> None:
    """InvalidField unless a winner naming a template family holds a config that family allows
    field by field: its values go into generated kernel source. Other winners ("aten", names
    no family has) hold nothing that is compiled: a lookup falls back for them."""
    family = registry.families().get(winner)
    if family is not None:
        registry.config_from_dict(family, config)


@dataclass
class Entry:
    """The outcome of tuning one problem.

    ``config`` must be JSON-native (dicts, lists, str, numbers, bool, None) to read back
    equal: tuples come back as lists. ``winner_time_us`` is 0.0 when nothing was timed
    (reason "policy-only"). ``device_name`` defaults to the key's.
    """

    key: ProblemKey
    winner: str  # "aten" or a template choice name
    config: dict[str, Any] = field(default_factory=dict)
    winner_time_us: float = 0.0
    aten_time_us: float | None = None
    # each {"name": str, "time_us": float | None, "policy": str | None, "error": str | None}
    candidates: list[dict[str, Any]] = field(default_factory=list)
    reason: str = "benchmark"  # "benchmark" | "cache" | "policy-only" | "fallback: <why>"
    device_name: str = ""
    created: float = field(default_factory=time.time)  # unix time; newer wins in merges

    def __post_init__(self) -> None:
        if not self.device_name:
            self.device_name = self.key.device_name

    @property
    def speedup_vs_aten(self) -> float | None:
        """aten time / winner time, or None when either was not measured."""
        if self.aten_time_us is None or not self.winner_time_us > 0:
            return None
        return self.aten_time_us / self.winner_time_us

    def validate(self) -> None:
        """Raise ValueError when this entry could not round-trip through the cache."""
        problems = []
        if not isinstance(self.key, ProblemKey):
            problems.append("key is not a ProblemKey")
        if not isinstance(self.winner, str) or not self.winner:
            problems.append("winner must be a non-empty str")
        if not isinstance(self.config, dict) or not all(isinstance(k, str) for k in self.config):
            problems.append("config must be a dict with str keys")
        if not _is_time(self.winner_time_us):
            problems.append(f"winner_time_us must be a finite number >= 0, got {self.winner_time_us!r}")
        if self.aten_time_us is not None and not _is_time(self.aten_time_us):
            problems.append(f"aten_time_us must be None or a finite number >= 0, got {self.aten_time_us!r}")
        if not isinstance(self.candidates, list):
            problems.append("candidates must be a list")
        else:
            for i, c in enumerate(self.candidates):
                if (
                    not isinstance(c, dict)
                    or not isinstance(c.get("name"), str)
                    or not (c.get("time_us") is None or _is_time(c.get("time_us")))
                    or not all(c.get(k) is None or isinstance(c[k], str) for k in ("policy", "error"))
                ):
                    problems.append(f"candidates[{i}] must be {{name: str, time_us: float|None, policy, error}}")
        if not isinstance(self.reason, str) or not (
            self.reason in _REASONS or self.reason.startswith("fallback:")
        ):
            problems.append(f"reason must be one of {_REASONS} or 'fallback: ...', got {self.reason!r}")
        if not isinstance(self.device_name, str):
            problems.append("device_name must be a str")
        if not (isinstance(self.created, (int, float)) and math.isfinite(self.created)):
            problems.append("created must be a finite unix time")
        if problems:
            raise ValueError("invalid autotune Entry: " + "; ".join(problems))
        try:
            json.dumps([self.config, self.candidates], allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"invalid autotune Entry: config/candidates not JSON-serialisable: {e}") from None
        _check_family_config(self.winner, self.config)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key.to_dict(),
            "winner": self.winner,
            "config": self.config,
            "winner_time_us": self.winner_time_us,
            "aten_time_us": self.aten_time_us,
            "candidates": self.candidates,
            "reason": self.reason,
            "device_name": self.device_name,
            "created": self.created,
        }

    @classmethod
    def from_dict(cls, d: Any) -> Entry:
        """Strict inverse of ``to_dict``; ValueError on anything else."""
        _require_fields(cls, d, "entry")
        entry = cls(**{**d, "key": ProblemKey.from_dict(d["key"])})
        entry.validate()
        return entry


# ------------------------------------------------------------------------ merging


@dataclass(frozen=True)
class MergeConflict:
    """Both sides had the key with different winners."""

    digest: str
    problem: str  # ProblemKey.describe()
    ours: str  # our winner
    theirs: str  # their winner
    kept: str  # "ours" | "theirs": the side with the newer ``created``


@dataclass
class MergeReport:
    source: str
    added: int = 0  # keys we did not have (or only had as an unusable row)
    replaced: int = 0  # theirs was newer
    kept: int = 0  # ours was newer or as new
    skipped_invalid: int = 0  # unusable rows in the source
    conflicts: list[MergeConflict] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"merged {self.source}: {self.added} added, {self.replaced} replaced, {self.kept} kept, "
            f"{self.skipped_invalid} invalid skipped, {len(self.conflicts)} conflicts"
        )


# -------------------------------------------------------------------------- cache

_DDL = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS entries ("
    " digest TEXT PRIMARY KEY, key_json TEXT NOT NULL, schema_version INTEGER NOT NULL,"
    " device_name TEXT NOT NULL, created REAL NOT NULL, entry_json TEXT NOT NULL)",
    # Facts about the machine a compile would otherwise measure again (e.g. Inductor's vector-ISA
    # probe), by a key that names everything the measurement depends on; not merged or exported.
    "CREATE TABLE IF NOT EXISTS facts (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
_UPSERT = (
    "INSERT OR REPLACE INTO entries (digest, key_json, schema_version, device_name, created, entry_json)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_SELECT = "SELECT digest, key_json, schema_version, entry_json FROM entries"


class _UnusableFile(Exception):
    """The file is SQLite but not ours (other schema version, another program's tables)."""


def _is_busy(e: sqlite3.Error) -> bool:
    msg = str(e).lower()
    return isinstance(e, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


def _is_damage(e: sqlite3.Error) -> bool:
    # Corruption, "file is not a database", I/O and permission errors are all
    # DatabaseError/OperationalError. Programming/Integrity/Interface errors are our bugs.
    return isinstance(e, sqlite3.DatabaseError) and not isinstance(
        e, (sqlite3.ProgrammingError, sqlite3.IntegrityError, sqlite3.InterfaceError)
    )


def _row_values(entry: Entry) -> tuple[Any, ...]:
    body = entry.to_dict()
    del body["key"]  # stored once, as key_json
    key_json = entry.key.canonical_json()
    return (
        _digest(key_json),
        key_json,
        SCHEMA_VERSION,
        entry.device_name,
        float(entry.created),
        json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False),
    )


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
        if self.mode == "read":
            self._conn = self._open_read_only(self.path)
            return
        conn = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
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

    @classmethod
    def _open_read_only(cls, path: Path) -> sqlite3.Connection:
        """``path`` opened so that nothing is written or created: read-only while a ``-wal`` beside
        it may hold recent entries (SQLite then reuses the files that are there), else immutable
        (a read-only open of a WAL database would create ``-wal`` and ``-shm`` files)."""
        live = path.with_name(path.name + "-wal").exists()
        uri = f"{path.resolve().as_uri()}?{'mode=ro' if live else 'immutable=1'}"
        conn = None
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
            check = conn.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                raise sqlite3.DatabaseError(f"corrupt: quick_check says {check[0][0]!r}")
            if cls._check_ours(conn):
                raise _UnusableFile("an empty file, not an autotune cache")
            return conn
        except (sqlite3.Error, _UnusableFile) as e:
            if conn is not None:
                conn.close()
            raise CacheFileError(path, f"not a usable autotune cache ({e})") from None

    @staticmethod
    def _memory_connection() -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        for stmt in _DDL:
            conn.execute(stmt)
        conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
        return conn

    @staticmethod
    def _check_ours(conn: sqlite3.Connection) -> bool:
        """True for a file with no tables yet; raises _UnusableFile for one that is not ours."""
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return True
        if "schema_version" not in tables:
            raise _UnusableFile(f"not an autotune cache (tables: {', '.join(sorted(tables))})")
        versions = conn.execute("SELECT version FROM schema_version").fetchall()
        if versions != [(SCHEMA_VERSION,)]:
            found = ", ".join(str(v[0]) for v in versions) or "none"
            raise _UnusableFile(f"schema version {found}, this inductor_ext reads {SCHEMA_VERSION}")
        return False

    @classmethod
    def _init_file(cls, conn: sqlite3.Connection) -> None:
        # Reading every page once on open catches truncation and bit rot before any row
        # can be misread; an autotune cache is small, so this stays in the milliseconds.
        check = conn.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise sqlite3.DatabaseError(f"corrupt: quick_check says {check[0][0]!r}")
        cls._check_ours(conn)  # before any write: a file that is not ours stays byte-identical
        # WAL lets readers proceed while one process writes; on filesystems without shared
        # memory it stays in rollback-journal mode, which is slower but just as safe.
        conn.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL never corrupts; a power cut may drop the last few puts, fine for a cache.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("BEGIN IMMEDIATE")  # two processes creating the same file: one waits
        try:
            if cls._check_ours(conn):  # again, now under the write lock
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
        """Row -> Entry, or None (reported once) when it cannot be trusted."""
        digest, key_json, version, entry_json = row
        try:
            if version != SCHEMA_VERSION:
                raise ValueError(f"schema version {version!r}, this inductor_ext reads {SCHEMA_VERSION}")
            key = ProblemKey.from_dict(json.loads(key_json))
            # The stored key must be canonical and hash to its digest: catches tampering and
            # rows written by a buggy/foreign writer; the caller's key check catches collisions.
            if key.canonical_json() != key_json or key.digest() != digest:
                raise ValueError("stored key does not match its digest")
            if want_key_json is not None and key_json != want_key_json:
                raise ValueError("stored key differs from the key looked up (digest collision?)")
            body = json.loads(entry_json)
            if not isinstance(body, dict) or "key" in body:
                raise ValueError("entry_json is not an entry object")
            return Entry.from_dict({**body, "key": key.to_dict()})
        except InvalidField as e:  # once per entry: each names its own bad value
            self.invalid += 1
            self._report(f"config {digest}", f"ignoring the entry for {key.describe()}: {e} (as if absent)")
            return None
        except (ValueError, TypeError) as e:  # JSONDecodeError is a ValueError
            self._report("row", f"ignoring row {str(digest)[:12]}: {e} (further bad rows are ignored silently)")
            return None

    def _all_rows(self) -> list[tuple[Any, ...]]:
        return self._run("read", lambda c: c.execute(_SELECT + " ORDER BY digest").fetchall(), [])

    # -- public API

    def get(self, key: ProblemKey) -> Entry | None:
        key_json = key.canonical_json()
        digest = _digest(key_json)
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
        values = _row_values(entry)
        stored = self._run("put", lambda c: self._write(c, lambda w: bool(w.execute(_UPSERT, values))), False)
        self.puts += stored  # a put skipped because the file stayed locked does not count

    def get_fact(self, key: str) -> str | None:
        """The value stored for machine fact ``key``, or None."""
        row = self._run("get fact", lambda c: c.execute("SELECT value FROM facts WHERE key = ?", (key,)).fetchone(),
                        None)
        return None if row is None else row[0]

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
        """Text that changes whenever an entry is added, replaced or removed: part of the key of
        every compiled graph whose decisions were read from this cache (Inductor's FX graph cache
        would otherwise hand back a graph built before the entries it should now use)."""
        # a replacing put deletes and inserts: a new `created` moves the total even if the
        # count and the largest rowid stay; a file locked past the retries matches nothing
        row = self._run("state", lambda c: c.execute(
            "SELECT count(*), total(created), max(rowid) FROM entries").fetchone(), None)
        return f"unknown:{time.time_ns()}" if row is None else ":".join(map(str, row))

    def merge_from(self, other_path: str | os.PathLike[str]) -> MergeReport:
        """Merge another cache file into this one: per key the newer ``created`` wins. The other
        file is only read: FileNotFoundError when missing, CacheFileError when unusable."""
        other_path = Path(other_path)
        if not other_path.exists():
            raise FileNotFoundError(other_path)
        if self.path is not None and self.path.exists() and other_path.samefile(self.path):
            return MergeReport(source=str(other_path))
        with AutotuneCache(other_path, mode="read") as other:
            rows = other._all_rows()
            incoming = [e for e in map(other._decode, rows) if e is not None]
        return self._merge(incoming, str(other_path), skipped=len(rows) - len(incoming))

    def _merge(self, incoming: list[Entry], source: str, skipped: int = 0) -> MergeReport:
        def apply(conn: sqlite3.Connection) -> MergeReport:
            report = MergeReport(source=source, skipped_invalid=skipped)  # fresh on every retry
            for new in incoming:
                values = _row_values(new)
                row = conn.execute(_SELECT + " WHERE digest = ?", (values[0],)).fetchone()
                old = self._decode(row, values[1]) if row is not None else None
                if old is None:
                    conn.execute(_UPSERT, values)
                    report.added += 1
                    continue
                # The device is part of the key, so both sides measured the same device:
                # the newer measurement (newer code, drivers) is the better one.
                theirs_newer = new.created > old.created
                if new.winner != old.winner:
                    report.conflicts.append(
                        MergeConflict(values[0], new.key.describe(), old.winner, new.winner,
                                      "theirs" if theirs_newer else "ours")
                    )
                if theirs_newer:
                    conn.execute(_UPSERT, values)
                    report.replaced += 1
                else:
                    report.kept += 1
            return report

        empty = MergeReport(source=source, skipped_invalid=skipped)
        return self._run("merge", lambda c: self._write(c, apply), empty)

    def export_json(self, path: str | os.PathLike[str]) -> None:
        """Write all entries as sorted, indented JSON: same contents -> same bytes."""
        # Grouped by op, then numerically by shape, so related problems sit together in a diff.
        entries = sorted(self.entries(), key=lambda e: (e.key.op, e.key.shapes, e.key.canonical_json()))
        doc = {
            "format": _EXPORT_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "entries": [e.to_dict() for e in entries],
        }
        text = json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n"
        path = Path(path)
        # Write a temp file then rename: a reader never sees half a file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    def import_json(self, path: str | os.PathLike[str]) -> MergeReport:
        """Merge an ``export_json`` file (newer wins). A malformed file or entry: ValueError and
        nothing imported. An entry whose template config holds a value its family does not allow
        is skipped, counted (``skipped_invalid``) and reported in one line."""
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except ValueError as e:
            raise ValueError(f"{path}: not JSON: {e}") from None
        if not isinstance(doc, dict) or set(doc) != {"format", "schema_version", "entries"}:
            raise ValueError(f"{path}: expected an object with format, schema_version, entries")
        if doc["format"] != _EXPORT_FORMAT or doc["schema_version"] != SCHEMA_VERSION:
            raise ValueError(
                f"{path}: format {doc['format']!r} v{doc['schema_version']!r}, "
                f"expected {_EXPORT_FORMAT!r} v{SCHEMA_VERSION}"
            )
        if not isinstance(doc["entries"], list):
            raise ValueError(f"{path}: entries must be a list")
        incoming: list[Entry] = []
        seen: set[str] = set()
        skipped = 0
        for i, d in enumerate(doc["entries"]):
            try:
                entry = Entry.from_dict(d)
            except InvalidField as e:
                skipped += 1
                self._report(f"import {path} {i}", f"skipping {path} entries[{i}] "
                             f"({ProblemKey.from_dict(d['key']).describe()}): {e}")
                continue
            except (ValueError, TypeError) as e:
                raise ValueError(f"{path}: entries[{i}]: {e}") from None
            digest = entry.key.digest()
            if digest in seen:
                raise ValueError(f"{path}: entries[{i}]: duplicate key {entry.key.describe()}")
            seen.add(digest)
            incoming.append(entry)
        return self._merge(incoming, str(path), skipped=skipped)

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
