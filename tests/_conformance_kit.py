"""What a conformance builder is made of (``tests/test_conformance.py``): the drawn ``Case``, the
``Built`` callable it returns, the helpers that describe its inputs as the lowering will
(``spec``) and draw inputs in the case's layout; and the builders of ops that live in their own
files, ``tests/conformance_ops/<op>.py``, found by listing that folder.

A new op's builder is one new file there, named as the op (``OpSpec.op``), defining
``build(case: Case, freezing: bool) -> Built`` and, optionally, ``DTYPES`` (the dtypes drawn for
it; default fp32, bf16, fp16) and ``TILED`` (which Case sizes a family's config fields tile, e.g.
``{"m": TILE_FIELDS["m"]}``: those are drawn at the tiles' boundaries), importing what it needs
from this module (``_rms_norm`` in ``test_conformance.py`` shows the shape of one). The grid
(every preset x op x family) then covers the op with no edit of ``test_conformance.py``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch

from inductor_ext.templates.family import OpSpec, TensorSpec

OPS_FOLDER = Path(__file__).parent / "conformance_ops"


@dataclass(frozen=True)
class Case:
    """One drawn shape; each op's builder reads the fields it needs."""

    m: int  # rows (GEMM M, softmax/norm/topk rows, attention batch)
    n: int
    k: int
    dtype: torch.dtype
    layout: str  # "contiguous", "sliced" (rows with padding), "transposed", "3d"
    bias: bool
    variant: int  # an op's own choice (scaling, out dtype, query tokens, ...)


@dataclass
class Built:
    """A callable with its inputs, the eager result to match, and the op's inputs as the lowering
    will describe them (to ask a family beforehand whether it accepts them)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    want: Any
    spec: OpSpec
    compare: Callable[[Any, Any], None] | None = None  # default: allclose by the output dtype


def tensor_spec(t: torch.Tensor, constant: bool = False) -> TensorSpec:
    return TensorSpec(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."), constant)


def spec(op: str, inputs: tuple[torch.Tensor | None, ...], out: torch.Tensor, scalars: dict[str, Any],
         constants: tuple[int, ...] = ()) -> OpSpec:
    """The op's ``OpSpec`` as the lowering describes it (None where an optional input is absent)."""
    return OpSpec(op, tuple(None if t is None else tensor_spec(t, i in constants) for i, t in enumerate(inputs)),
                  tensor_spec(out.contiguous()), scalars, "cpu")


def rows(case: Case, k: int, dtype: torch.dtype) -> torch.Tensor:
    """An [M, K] input in the case's layout ("3d": [1, M, K])."""
    if case.layout == "sliced":
        return torch.randn(case.m, k + 8).to(dtype)[:, :k]
    if case.layout == "transposed":
        return torch.randn(k, case.m).to(dtype).t()
    if case.layout == "3d":
        return torch.randn(1, case.m, k).to(dtype)
    return torch.randn(case.m, k).to(dtype)


def last_dim_input(case: Case, n: int) -> torch.Tensor:
    """[M, N] rows for an op over the last dim, in the case's layout (sliced rows, or [1, M, N])."""
    x = torch.randn(case.m, n) * 3
    if case.layout == "sliced":
        x = (torch.randn(case.m, n + 8) * 3)[:, :n]
    elif case.layout == "3d":
        x = torch.randn(1, case.m, n) * 3
    return x.to(case.dtype)


# ------------------------------------------------------------------ sizes at the tiles' boundaries

# The largest size drawn at a tile boundary: shapes stay small (the grid runs on two cores, some
# families in an interpreter), so 2 * block + 1 is left out where it passes this.
LARGEST_BOUNDARY = 257

# Config fields that tile a drawn size (Case field -> field names): a GEMM family's block or
# work-group tile along M, N and K.
TILE_FIELDS = {"m": ("block_m", "tile_m"), "n": ("block_n", "tile_n"), "k": ("block_k", "tile_k")}


def config_tiles(configs: Iterable[Any], fields: dict[str, tuple[str, ...]]) -> dict[str, set[int]]:
    """The tile sizes ``configs`` use along each drawn size named in ``fields`` (Case field ->
    config field names; a field a config lacks, or 0 there, tiles nothing)."""
    tiles: dict[str, set[int]] = {dim: set() for dim in fields}
    for config in configs:
        names = {f.name for f in dataclasses.fields(config)}
        for dim, wanted in fields.items():
            tiles[dim] |= {getattr(config, name) for name in wanted if name in names and getattr(config, name) > 0}
    return tiles


def kernel_blocks(kernel: str) -> tuple[int, int]:
    """The query and key block sizes (``QB``, ``KB``) of a C++ attention kernel's source, the same
    in each of its forms; a kernel that no longer spells them fails here, loudly."""
    found = set(re.findall(r"\bQB = (\d+), KB = (\d+)\b", kernel))
    if len(found) != 1:
        raise AssertionError(f"expected one 'QB = <n>, KB = <n>' in the kernel's source, found {sorted(found)}")
    (query, key), = found
    return int(query), int(key)


def boundary_sizes(blocks: Iterable[int], plain: tuple[int, ...], largest: int = LARGEST_BOUNDARY) -> tuple[int, ...]:
    """The sizes to draw for a dimension tiled by ``blocks``: 1, b - 1, b, b + 1 and 2b + 1 for
    each (up to ``largest``), then ``plain`` (the sizes drawn without tiles). First, which
    hypothesis draws first (its simplest example), comes lcm(blocks) + 1: whole tiles of every
    block and a one-element tail (the largest boundary, if that passes ``largest``). Without
    blocks: ``plain`` as it is."""
    blocks = tuple(blocks)
    edges = {s for b in blocks for s in (1, b - 1, b, b + 1, 2 * b + 1) if 1 <= s <= largest}
    if not edges:
        return plain
    first = math.lcm(*blocks) + 1
    first = first if first <= largest else max(edges)
    return (first, *sorted(edges - {first}), *(s for s in plain if s not in edges | {first}))


def op_modules() -> dict[str, ModuleType]:
    """``tests/conformance_ops/<op>.py`` by op name, each loaded once (each must define ``build``)."""
    found = {}
    for path in sorted(OPS_FOLDER.glob("*.py")):
        if path.name.startswith("_"):
            continue
        module_spec = importlib.util.spec_from_file_location(f"_conformance_op_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        if not callable(getattr(module, "build", None)):
            raise AssertionError(f"{path} defines no build(case, freezing) -> Built")
        found[path.stem] = module
    return found
