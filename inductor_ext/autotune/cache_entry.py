"""An autotune cache's data: the problem key, the entry, and the one validator every row passes.

A cache file may come from anywhere (built on another machine, shipped in an image, edited by
hand), so each field of each row is checked before it is used, and nothing in a row can crash the
reader: text is bounded in size and JSON in nesting depth *before* it is parsed (no
RecursionError, no huge allocation), numbers are range-checked (no OverflowError later), names
must be ones that exist (an op some family serves, a winner that is ``"aten"`` or a template
family, whose config each family checks field by field: ``templates/allowed.py``), ``created``
is not in the future, and identifiers are printable. A row that fails is a ``BadRow`` (a
``ValueError`` naming the field and what is allowed): the store skips it with one line.

This module must work on torch 2.11 too: the standard library and the families' plain-data
field declarations only.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import time
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Mapping

from inductor_ext.templates import registry
from inductor_ext.templates.allowed import InvalidField

__all__ = ["SCHEMA_VERSION", "BadRow", "Entry", "MergeConflict", "MergeReport", "ProblemKey", "bounded_json",
           "decode_row", "merge", "printable", "row_values", "shown"]

# Bump when the table layout, the key's canonical JSON or the Entry fields change.
SCHEMA_VERSION = 1

# Bounds on what one row may hold: far above anything ext writes (a key is ~400 bytes, an entry
# with 40 candidates ~6 KB), far below what would hurt a compile that reads it.
MAX_KEY_JSON = 16 * 1024
MAX_ENTRY_JSON = 256 * 1024
MAX_JSON_DEPTH = 8  # an entry is 4 deep: {"config": {...}}, {"candidates": [{...}]}
MAX_DIM = 2**40  # a size or stride beyond this is no tensor's
MAX_INPUTS = 16
MAX_RANK = 8
MAX_TIME_US = 1e12  # ~11 days for one call
MAX_CANDIDATES = 1024
MAX_NAME = 256  # identifiers: op, dtype, arch, preset, a choice's name
MAX_TEXT = 4096  # free text: a reason, a candidate's error
FUTURE_SLACK_S = 24 * 3600  # clocks of two machines disagree; a day ahead is not "the future"


class BadRow(ValueError):
    """A cache row (or an exported entry) that cannot be trusted; the message names the field."""


def printable(text: str) -> str:
    """``text`` with every control or otherwise unprintable character escaped (``\\x1b``), so a
    value from a file never moves a terminal's cursor or colours its output."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _depth_within(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests no deeper than ``limit``, scanned without parsing it."""
    depth = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > limit:
                return False
        elif c in "]}":
            depth -= 1
    return True


def bounded_json(text: Any, what: str, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)`` for text from a file ext did not write: ``BadRow`` when it is not a
    str, is longer than ``max_bytes``, nests deeper than ``max_depth`` (checked before parsing),
    or is not JSON. Numbers that JSON cannot hold (NaN, Infinity) are refused too."""
    if not isinstance(text, str):
        raise BadRow(f"{what} is a {type(text).__name__}, not JSON text")
    if len(text) > max_bytes:
        raise BadRow(f"{what} is {len(text)} characters long; at most {max_bytes} are read")
    if not _depth_within(text, max_depth):
        raise BadRow(f"{what} nests deeper than {max_depth} levels")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise BadRow(f"{what} is not JSON: {e}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _name(value: Any, what: str, allow_empty: bool = False) -> str:
    """An identifier-like string from a row: printable, bounded."""
    if not isinstance(value, str) or (not value and not allow_empty):
        raise BadRow(f"{what} must be a non-empty string, got {shown(value)}")
    if len(value) > MAX_NAME or not value.isprintable():
        raise BadRow(f"{what} {shown(value)} is not a printable name of at most {MAX_NAME} characters")
    return value


def _text(value: Any, what: str) -> None:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise BadRow(f"{what} must be a string of at most {MAX_TEXT} characters, got {shown(value)}")


def shown(value: Any) -> str:
    text = repr(value)
    return printable(text if len(text) <= 60 else text[:57] + "...")


def known_winner(name: str) -> bool:
    """Whether ``name`` can win a decision: ATen's, or a template family of this inductor_ext."""
    return name == "aten" or name in registry.families()


def known_ops() -> frozenset[str]:
    """Every op some template family serves: the only ops a cache entry can be about."""
    return frozenset(op for family in registry.families().values() for op in family.ops)


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
        raise BadRow(f"{what} must have exactly the fields {sorted(names)}, got {shown(got)}")


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
        if len(self.shapes) > MAX_INPUTS or len(self.strides) > MAX_INPUTS or \
                any(len(row) > MAX_RANK for row in (*self.shapes, *self.strides)):
            raise ValueError(f"ProblemKey holds more than {MAX_INPUTS} inputs or {MAX_RANK} dims per input")
        if any(not 0 <= x < MAX_DIM for row in (*self.shapes, *self.strides) for x in row):
            raise ValueError(f"ProblemKey sizes and strides must lie in [0, 2**40), got shapes {self.shapes!r} "
                             f"strides {self.strides!r}")
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
            raise BadRow(f"invalid key: {e}") from None

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


def _is_number_within(x: Any, low: float, high: float) -> bool:
    """A real int or float in [low, high]; a 400-digit int is compared, never turned into a float."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    return (isinstance(x, int) or math.isfinite(x)) and low <= x <= high


def _is_time(x: Any) -> bool:
    return _is_number_within(x, 0, MAX_TIME_US)


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
            problems.append(f"winner_time_us must be a number in [0, {MAX_TIME_US:g}], got {shown(self.winner_time_us)}")
        if self.aten_time_us is not None and not _is_time(self.aten_time_us):
            problems.append(f"aten_time_us must be None or a number in [0, {MAX_TIME_US:g}], got {shown(self.aten_time_us)}")
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
            problems.append(f"reason must be one of {_REASONS} or 'fallback: ...', got {shown(self.reason)}")
        if not isinstance(self.device_name, str):
            problems.append("device_name must be a str")
        if not _is_number_within(self.created, 0, 2**40):
            problems.append(f"created must be a unix time, got {shown(self.created)}")
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
        """Strict inverse of ``to_dict`` for data from a file: ``BadRow`` (a ValueError) on
        anything else, ``InvalidField`` for a template config its family does not allow."""
        _require_fields(cls, d, "entry")
        entry = cls(**{**d, "key": ProblemKey.from_dict(d["key"])})
        try:
            entry.validate()
        except InvalidField:
            raise
        except ValueError as e:
            raise BadRow(str(e)) from None
        check_foreign(entry)
        return entry


def check_foreign(entry: Entry) -> None:
    """``BadRow`` unless an entry read from a file names only things that exist, within bounds:
    what ``validate`` (the shape of an entry) does not ask of ext's own entries."""
    key = entry.key
    if key.op not in known_ops():
        raise BadRow(f"op {shown(key.op)} is served by no template family (known: {', '.join(sorted(known_ops()))})")
    for name in ("arch", "preset", "template_hash"):
        _name(getattr(key, name), f"key.{name}", allow_empty=name == "template_hash")
    _name(key.device_name, "key.device_name")
    for dtype in key.dtypes:
        _name(dtype, "key.dtypes")
    for package, version in key.versions:
        _name(package, "key.versions package")
        _name(version, "key.versions version", allow_empty=True)
    if not known_winner(entry.winner):
        raise BadRow(f"winner {shown(entry.winner)} is neither 'aten' nor a template family of this inductor_ext")
    if entry.winner == "aten":
        if set(entry.config) - {"name"}:
            raise BadRow(f"an ATen winner's config holds only its choice's name, got {shown(entry.config)}")
        if "name" in entry.config:
            _name(entry.config["name"], "the ATen choice's name")
    _name(entry.device_name, "device_name")
    _text(entry.reason, "reason")
    if len(entry.candidates) > MAX_CANDIDATES:
        raise BadRow(f"{len(entry.candidates)} candidates; at most {MAX_CANDIDATES} are read")
    for i, candidate in enumerate(entry.candidates):
        if set(candidate) - {"name", "time_us", "policy", "error"}:
            raise BadRow(f"candidates[{i}] has fields {shown(sorted(candidate))}; "
                         "allowed: name, time_us, policy, error")
        _name(candidate["name"], f"candidates[{i}].name")
        for field_name in ("policy", "error"):
            if candidate.get(field_name) is not None:
                _text(candidate[field_name], f"candidates[{i}].{field_name}")
    if entry.created > time.time() + FUTURE_SLACK_S:
        raise BadRow(f"created {entry.created!r} lies in the future (newer-wins merges would keep it forever)")


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


# ------------------------------------------------------------------------- rows


def row_values(entry: Entry) -> tuple[Any, ...]:
    """``entry`` as the row the store writes: (digest, key_json, schema_version, device_name,
    created, entry_json)."""
    body = entry.to_dict()
    del body["key"]  # stored once, as key_json
    key_json = entry.key.canonical_json()
    return (
        entry.key.digest(),
        key_json,
        SCHEMA_VERSION,
        entry.device_name,
        float(entry.created),
        json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False),
    )


def decode_row(digest: Any, key_json: Any, version: Any, entry_json: Any, want_key_json: str | None = None) -> Entry:
    """A stored row -> Entry, every field checked (``BadRow``, or ``InvalidField`` for a template
    config its family does not allow). The stored key must be canonical and hash to its digest
    (tampering, a foreign writer), and equal the key looked up when one is given (a collision)."""
    if type(version) is not int or version != SCHEMA_VERSION:  # True == 1, but is no version
        raise BadRow(f"schema version {shown(version)}, this inductor_ext reads {SCHEMA_VERSION}")
    key = ProblemKey.from_dict(bounded_json(key_json, "key_json", MAX_KEY_JSON))
    if key.canonical_json() != key_json or key.digest() != digest:
        raise BadRow("stored key does not match its digest")
    if want_key_json is not None and key_json != want_key_json:
        raise BadRow("stored key differs from the key looked up (digest collision?)")
    body = bounded_json(entry_json, "entry_json", MAX_ENTRY_JSON)
    if not isinstance(body, dict) or "key" in body:
        raise BadRow("entry_json is not an entry object")
    try:
        return Entry.from_dict({**body, "key": key.to_dict()})
    except InvalidField as e:
        e.problem = key.describe()  # type: ignore[attr-defined]  # the reader's line names the problem
        raise
