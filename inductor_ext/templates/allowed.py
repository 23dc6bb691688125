"""What each field of a family's ``Problem`` and ``Config`` may hold, and the one check that every
such dataclass rebuilt from a dict (an autotune cache entry, an exported JSON, the problem JSON in
generated wrapper code, a command-line override) passes before any of its values can reach
generated kernel source.

A cache is data, never code: cache files are built offline and shipped between machines, and a
field's value is pasted into the source of a kernel (``num_stages=...``, a dtype name, an ISA
name). So every field is declared once, beside its dataclass, as plain data in the field's
metadata::

    @dataclass(frozen=True)
    class GemmConfig:
        block_m: int = integer(low=1, high=1024)
        num_stages: int = integer(default=3, low=1, high=16)
        path: str = one_of(("gemv", "tiled"))

and :func:`build` (what ``templates.registry.from_dict`` calls) refuses any value its declaration
does not allow with :class:`InvalidField`, naming the owner, the field, the value and what is
allowed. A field without a declaration allows nothing (``registry.check`` refuses such a family).
Standard library only: this runs wherever templates run.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

KEY = "allowed"  # the field metadata key holding the field's Allowed

# Largest tensor dimension a problem field may name (sizes are int64 in torch).
MAX_SIZE = 2**62


@dataclass(frozen=True)
class Allowed:
    """The values one field allows: its type, and a range (ints, floats) or a list of values."""

    kind: str  # "int", "float", "bool" or "choice"
    low: float | None = None  # "int" / "float": inclusive bounds (None: unbounded)
    high: float | None = None
    power_of_two: bool = False  # "int": only powers of two
    values: tuple[Any, ...] = ()  # "choice": the values allowed (str or None)

    def describe(self) -> str:
        """What is allowed, in words: ``an int in [1, 16]``, ``one of 'gemv', 'tiled'``."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(map(repr, self.values))
        what = {"int": "a power of two" if self.power_of_two else "an int", "float": "a finite number"}[self.kind]
        if self.low is None and self.high is None:
            return what
        low = "-inf" if self.low is None else _number(self.low)
        high = "inf" if self.high is None else _number(self.high)
        return f"{what} in [{low}, {high}]"

    def check(self, value: Any) -> Any:
        """``value`` as the field holds it (ints for a float field become floats); ValueError
        (the caller names the field) when not allowed."""
        ok = False
        if self.kind == "bool":
            ok = type(value) is bool
        elif self.kind == "choice":  # strings or None (one_of): no 1 for True, no str subclass
            ok = (value is None or type(value) is str) and value in self.values
        elif self.kind == "int":
            ok = type(value) is int and self._in_range(value) and (not self.power_of_two or _is_pow2(value))
        elif self.kind == "float":
            ok = type(value) in (int, float) and math.isfinite(value) and self._in_range(value)
            value = float(value) if ok else value
        if not ok:
            raise ValueError(self.describe())
        return value

    def _in_range(self, value: float) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


class InvalidField(ValueError):
    """A dict's value for a Problem or Config field that its declaration does not allow."""

    def __init__(self, owner: str, field: str, value: Any, allowed: str) -> None:
        self.owner, self.field, self.value, self.allowed = owner, field, value, allowed
        super().__init__(f"{owner}.{field} = {_shown(value)} is not allowed: {allowed}")


# ---------------------------------------------------------------------------- declarations


def _declare(allowed: Allowed, default: Any) -> Any:
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata={KEY: allowed})
    return dataclasses.field(default=default, metadata={KEY: allowed})


def integer(default: Any = dataclasses.MISSING, *, low: int | None = None, high: int | None = None,
            power_of_two: bool = False) -> Any:
    """A dataclass field holding an int in [low, high] (a power of two, if asked)."""
    return _declare(Allowed("int", low, high, power_of_two), default)


def size(default: Any = dataclasses.MISSING) -> Any:
    """A problem dimension: an int in [1, MAX_SIZE] (families refuse empty problems)."""
    return integer(default, low=1, high=MAX_SIZE)


def number(default: Any = dataclasses.MISSING, *, low: float | None = None, high: float | None = None) -> Any:
    """A dataclass field holding a finite float in [low, high]."""
    return _declare(Allowed("float", low, high), default)


def flag(default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field holding a bool."""
    return _declare(Allowed("bool"), default)


def one_of(values: tuple[Any, ...] | Mapping[Any, Any], default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field holding one of ``values`` (strings, or None; a mapping gives its keys)."""
    values = tuple(values)
    if not values or not all(v is None or isinstance(v, str) for v in values):
        raise TypeError(f"one_of takes strings (or None), got {values!r}")
    return _declare(Allowed("choice", values=values), default)


# ------------------------------------------------------------------------------- checking


@functools.lru_cache(maxsize=None)  # an extern kernel's call rebuilds its problem and config each time
def declared(cls: type) -> Mapping[str, Allowed | None]:
    """Field name -> its declaration (None where it has none), for dataclass ``cls``."""
    return MappingProxyType({f.name: f.metadata.get(KEY) for f in dataclasses.fields(cls)})


@functools.lru_cache(maxsize=None)
def _required(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls)
                 if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def undeclared(cls: type) -> list[str]:
    """The fields of ``cls`` that declare nothing: no value could ever pass for them."""
    return [name for name, allowed in declared(cls).items() if allowed is None]


def build(cls: type, data: Any, owner: str) -> Any:
    """``cls(**data)`` once every value of ``data`` is allowed by its field's declaration;
    :class:`InvalidField` for the first one that is not, or for an unknown or missing field.
    ``owner`` names the dataclass in messages (``"triton.gemm Config"``)."""
    if not isinstance(data, Mapping):
        raise InvalidField(owner, "*", data, f"an object with the fields {', '.join(declared(cls))}")
    rules = declared(cls)
    values = {}
    for name, value in data.items():
        if name not in rules:
            raise InvalidField(owner, str(name), value, f"no such field (fields: {', '.join(rules)})")
        allowed = rules[name]
        if allowed is None:
            raise InvalidField(owner, name, value, "nothing: the field declares no allowed values "
                               "(templates/allowed.py)")
        try:
            values[name] = allowed.check(value)
        except ValueError as e:
            raise InvalidField(owner, name, value, str(e)) from None
    for name in _required(cls):
        if name not in values:
            rule = rules[name]
            raise InvalidField(owner, name, _MISSING, rule.describe() if rule is not None else "nothing")
    return cls(**values)


class _Missing:
    def __repr__(self) -> str:
        return "(missing)"


_MISSING = _Missing()


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**63 else repr(x)


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def _shown(value: Any, limit: int = 120) -> str:
    """``repr(value)``, cut: a hostile value may be long."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
