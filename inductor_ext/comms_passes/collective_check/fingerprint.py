"""The collective sequence of a graph, as every rank must issue it: description, digest, diff.

A compiled graph's collectives are ``_c10d_functional`` nodes. Two ranks of one process group
that issue different sequences on it (another kind, dtype, size or count, or another order) hang
or exchange wrong data. This module describes the sequence of each group (plain data, JSON-able:
it travels inside the compiled graph as the argument of the check op), digests it, and names the
first difference between two ranks' sequences with the FX node and the user's source line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten

from inductor_ext.comms_passes.cost_model import collective_info, unwrap_control_deps

__all__ = ["KEY_FIELDS", "Collective", "GraphCollectives", "describe_graph", "first_difference", "user_frame"]

# Frames in these folders are library code, not the line a user wrote (torch's first).
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_EXT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.*)$')


# The fields of a Collective that every rank must agree on. In a real graph some follow from
# others (the kind from the op, the group size from the group; the digest is per group already),
# but each is compared, so a description that differs in any one of them is a mismatch.
KEY_FIELDS = ("kind", "op", "group", "group_size", "dtypes", "in_shapes", "out_shapes", "extra")


@dataclass(frozen=True)
class Collective:
    """One collective as issued: what must agree across ranks, and where it came from."""

    kind: str  # all_gather | reduce_scatter | all_reduce | all_to_all | broadcast
    op: str  # the _c10d_functional overload, e.g. "all_gather_into_tensor.default"
    group: str
    group_size: int
    dtypes: tuple[str, ...]
    in_shapes: tuple[str, ...]
    out_shapes: tuple[str, ...]
    extra: str  # reduce op or other scalar arguments
    # not part of the agreement: where it came from
    node: str = field(default="", compare=False)
    source: str = field(default="", compare=False)  # "file:line: code" of the user's line
    bucket_of: tuple[str, ...] = field(default=(), compare=False)  # nodes merged into this one

    def key(self) -> tuple:
        """What two ranks must agree on (the digest hashes it): every field of ``KEY_FIELDS``."""
        return tuple(getattr(self, name) for name in KEY_FIELDS)

    def differences(self, other: "Collective") -> list[str]:
        """The fields of the key in which ``other`` differs, each with both values."""
        return [f"{name} ({getattr(self, name)!r} vs {getattr(other, name)!r})" for name in KEY_FIELDS
                if getattr(self, name) != getattr(other, name)]

    def what(self) -> str:
        ins = ", ".join(f"{d}{s}" for d, s in zip(self.dtypes, self.in_shapes))
        outs = ", ".join(self.out_shapes)
        extra = f" {self.extra}" if self.extra else ""
        return f"{self.kind}{extra} of {ins} -> {outs} over {self.group_size} ranks"

    def where(self) -> str:
        parts = [f"FX node {self.node}" if self.node else "FX node unknown"]
        if self.bucket_of:
            shown = ", ".join(self.bucket_of[:4]) + (", ..." if len(self.bucket_of) > 4 else "")
            parts.append(f"a bucket of {len(self.bucket_of)} ({shown})")
        parts.append(f"from {self.source}" if self.source else "source line unknown")
        return "; ".join(parts)


@dataclass(frozen=True)
class GraphCollectives:
    """Every collective of one graph in issue order, and where the graph came from."""

    label: str
    collectives: tuple[Collective, ...]

    def groups(self) -> list[str]:
        return sorted({c.group for c in self.collectives})

    def on(self, group: str) -> list[Collective]:
        return [c for c in self.collectives if c.group == group]

    def digest(self, group: str) -> bytes:
        """16 bytes naming the sequence on ``group``: equal on two ranks iff the sequences are."""
        text = json.dumps([list(c.key()) for c in self.on(group)], separators=(",", ":"))
        return hashlib.sha256(text.encode()).digest()[:16]

    def to_json(self) -> str:
        return json.dumps({"label": self.label, "collectives": [asdict(c) for c in self.collectives]},
                          separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> "GraphCollectives":
        data = json.loads(text)
        colls = []
        for c in data["collectives"]:
            colls.append(Collective(**{k: tuple(v) if isinstance(v, list) else v for k, v in c.items()}))
        return GraphCollectives(data["label"], tuple(colls))


def user_frame(stack_trace: str | None) -> str:
    """``file:line: code`` of the innermost frame of ``stack_trace`` outside torch and ext (the
    line the user wrote); failing that, outside torch; failing that, the innermost frame."""
    if not stack_trace:
        return ""
    lines = stack_trace.splitlines()
    frames: list[tuple[str, str, str]] = []
    for i, text in enumerate(lines):
        m = _FRAME.match(text)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) else ""
            frames.append((m["file"], m["line"], code))
    if not frames:
        return ""
    path = [os.path.abspath(f[0]) for f in frames]
    user = [f for f, p in zip(frames, path) if not p.startswith((_TORCH_DIR, _EXT_DIR))]
    not_torch = [f for f, p in zip(frames, path) if not p.startswith(_TORCH_DIR)]
    file, line, code = (user or not_torch or frames)[-1]
    return f"{file}:{line}: {code}" if code else f"{file}:{line}"


def _shape(t: Any) -> str:
    return str(list(t.shape)) if isinstance(t, torch.Tensor) else repr(t)


def _tensors(x: Any) -> list[torch.Tensor]:
    flat, _ = tree_flatten(x)
    return [t for t in flat if isinstance(t, torch.Tensor)]


def _val(x: Any) -> Any:
    return x.meta.get("val") if isinstance(x, fx.Node) else x


def _describe(outer: fx.Node) -> Collective | None:
    node = unwrap_control_deps(outer)  # a collective pinned in place by control_deps
    info = collective_info(node)
    if info is None:
        return None
    first = node.args[0] if node.args else None
    ins = _tensors([_val(a) for a in (first if isinstance(first, (list, tuple)) else [first])])
    outs = _tensors(_val(node))
    schema = node.target._schema  # type: ignore[union-attr]
    scalars = []
    for i, arg in enumerate(schema.arguments):
        v = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        if arg.name in ("group_name", "group_size", "tag") or isinstance(v, (fx.Node, list, tuple)):
            continue
        if v is not None:
            scalars.append(f"{arg.name}={v}")
    op = f"{node.target._schema.name.split('::')[-1]}.{node.target._overloadname}"  # type: ignore[union-attr]
    return Collective(
        kind=info.kind, op=op, group=info.group, group_size=info.group_size,
        dtypes=tuple(str(t.dtype).removeprefix("torch.") for t in ins),
        in_shapes=tuple(_shape(t) for t in ins), out_shapes=tuple(_shape(t) for t in outs),
        extra=" ".join(scalars), node=outer.name, source=user_frame(node.meta.get("stack_trace")),
        bucket_of=tuple(node.meta.get("ext_bucket_of", ())))


def describe_graph(nodes: Iterable[fx.Node], label: str = "") -> GraphCollectives:
    """The collectives among ``nodes`` (an execution order), described."""
    return GraphCollectives(label, tuple(c for n in nodes if (c := _describe(n)) is not None))


def first_difference(a: Sequence[Collective], b: Sequence[Collective]) -> int | None:
    """Index of the first collective where two sequences differ (one may be a prefix of the
    other: then the length of the shorter); None when they agree."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x.key() != y.key():
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
