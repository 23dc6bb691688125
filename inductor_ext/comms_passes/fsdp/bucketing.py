"""Bucketing for the ``fsdp_overlap`` pass (``overlap.py``): which collectives may move
(``_find_collectives``), whether shards are uneven (``_uneven_shard``, ``_RankInvariantModel``),
how consecutive ones group up to a byte cap (``_buckets``, ``auto_bucket_cap``) and the graph
rewrite that merges a bucket into one collective (``_merge_all_gather``: shards of mixed dtypes
packed as bytes, 16-byte aligned, gathered once and viewed back; ``_merge_reduce_scatter``: one
dtype and reduce op, rank-major packing). Where the merged collectives go is ``scheduling.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.fx as fx

from inductor_ext.comms_passes.cost_model import (
    AnalyticalCostModel, CostModel, collective_info, is_view_like, is_wait,
)
from inductor_ext.comms_passes.fsdp.settings import OverlapSettings

aten = torch.ops.aten
c10d = torch.ops._c10d_functional

_ALIGN = 16  # bytes: every segment of a packed all-gather buffer starts 16-byte aligned



@dataclass
class _Coll:
    node: fx.Node
    wait: fx.Node
    kind: str
    group: str
    group_size: int
    order: int  # index in the input graph


def auto_bucket_cap(model: AnalyticalCostModel, group_size: int = 8) -> int:
    """Smallest size whose fixed latency is <= 5% of the collective's time, clamped to [16, 256] MB."""
    lat = model.collective_time("all_gather", 1, group_size)
    per_byte = (model.collective_time("all_gather", 1 << 30, group_size) - lat) / (1 << 30)
    size = int(lat / 0.05 / per_byte) if per_byte > 0 else 64 << 20
    return max(16 << 20, min(256 << 20, size))


def _has_vals(nodes: Sequence[fx.Node]) -> bool:
    return all("val" in n.meta for n in nodes if n.op == "call_function" and collective_info(n) is not None)


def _find_collectives(nodes: Sequence[fx.Node], settings: OverlapSettings) -> dict[tuple[str, str], list[_Coll]]:
    """Movable all-gathers / reduce-scatters by (kind, group), in graph order.

    A class (kind, group) is movable only when every member is a plain single-tensor collective
    with exactly one wait, and (all-gathers) gathers a value computed from graph inputs alone,
    so moving members never reorders them against an unmovable one.
    """
    pos = {n: i for i, n in enumerate(nodes)}
    from_inputs: set[fx.Node] = set()
    for n in nodes:
        if n.op in ("placeholder", "get_attr"):
            from_inputs.add(n)
        elif (n.op == "call_function" and collective_info(n) is None and not is_wait(n)
              and not n.is_impure() and all(a in from_inputs for a in n.all_input_nodes)):
            from_inputs.add(n)
    classes: dict[tuple[str, str], list[_Coll]] = {}
    fixed: set[tuple[str, str]] = set()
    for n in nodes:
        info = collective_info(n, settings.default_world_size)
        if info is None:
            continue
        key = (info.kind, info.group)
        plain = n.target in (c10d.all_gather_into_tensor.default, c10d.reduce_scatter_tensor.default)
        users = list(n.users)
        ok = plain and len(users) == 1 and is_wait(users[0])
        if ok and info.kind == "all_gather":
            ok = all(a in from_inputs for a in n.all_input_nodes)
        if not ok:
            fixed.add(key)
            continue
        classes.setdefault(key, []).append(_Coll(n, users[0], info.kind, info.group, info.group_size, pos[n]))
    return {k: v for k, v in classes.items() if k not in fixed and k[0] in ("all_gather", "reduce_scatter")}


def _uneven_shard(colls: dict[tuple[str, str], list[_Coll]]) -> str | None:
    """A collective of a parameter whose dim 0 does not divide by the group, found by what every
    rank's graph has: the gathered tensor sliced back to fewer rows, or a gradient padded with
    zero rows before its reduce-scatter. None when all shards are even."""
    for members in colls.values():
        for c in members:
            if c.kind == "all_gather":
                rows = _val(c.wait).shape[0] if _val(c.wait).dim() else 0
                for u in c.wait.users:
                    if (u.op == "call_function" and u.target is torch.ops.aten.slice.Tensor
                            and (u.args[1] if len(u.args) > 1 else 0) == 0
                            and _val(u).shape[0] < rows):
                        return f"{c.node.name} ({_val(u).shape[0]} rows over {c.group_size} ranks)"
            else:
                src = _arg(c.node, "input")
                parts = src.args[0] if src.target is torch.ops.aten.cat.default else [src]
                if any(isinstance(p, fx.Node) and p.target is torch.ops.aten.constant_pad_nd.default
                       for p in parts):
                    return f"{c.node.name} (gradient padded to {_val(src).shape[0]} rows over {c.group_size} ranks)"
    return None


class _RankInvariantModel:
    """A cost model whose answers are equal on every rank of an unevenly sharded graph.

    What differs between ranks is upstream of each all-gather's input: the shard (a row more
    or less) and its cast, plus a pad on the ranks with the shorter shard. The gather input
    itself is padded to one size everywhere; the reduce-scatters' outputs are sliced to the
    shard on some ranks only, but slices are views. So this model charges nothing for the nodes
    that compute a gather's input from the shards (a cast of 1/world of a parameter) and gives
    graph inputs, those intermediates and the gather input itself no size (the gather input is
    a graph input on some ranks and a pad on others; the collective's own in-flight bytes still
    count it); every other node keeps its own time and size. Plans are made with it; nodes are matched by name,
    which graph copies keep.
    """

    def __init__(self, model: CostModel, colls: dict[tuple[str, str], list[_Coll]],
                 placeholders: Sequence[fx.Node] = ()) -> None:
        self.model = model
        self.free: set[str] = set()  # computed from the shards only: no time
        # what feeds a gather input, and every graph input (shards of other parameters come in
        # too, unused or not): no size. Inputs live throughout, so this only moves the baseline.
        self.size_overrides: dict[str, int] = {n.name: 0 for n in placeholders}
        self.gather_inputs: set[str] = set()
        # A bucket's packing copy is modelled as fused with the cast that made a gather input on
        # some ranks and not behind the pad on others: cost it unfused everywhere.
        self.unfused = (dataclasses.replace(model, model_fusion=False)
                        if isinstance(model, AnalyticalCostModel) and model.model_fusion else model)
        for members in colls.values():
            for c in members:
                if c.kind != "all_gather":
                    continue
                gather_input = _arg(c.node, "input")
                self.gather_inputs.add(gather_input.name)
                stack = [gather_input]
                while stack:
                    n = stack.pop()
                    if n.name in self.free or n.name in self.size_overrides:
                        continue
                    if n.op == "placeholder":
                        self.size_overrides[n.name] = 0
                        continue
                    self.free.add(n.name)
                    self.size_overrides[n.name] = 0
                    stack.extend(n.all_input_nodes)

    def collective_time(self, kind: str, nbytes: int, group_size: int) -> float:
        return self.model.collective_time(kind, nbytes, group_size)

    def node_time(self, node: fx.Node) -> float:
        if node.name in self.free:
            return 0.0
        if node.target is aten.cat.default and any(self._reads_gather_input(a) for a in node.all_input_nodes):
            return self.unfused.node_time(node)
        return self.model.node_time(node)

    def _reads_gather_input(self, node: fx.Node) -> bool:
        while node.name not in self.gather_inputs:
            if node.op != "call_function" or not is_view_like(node) or not node.all_input_nodes:
                return False
            node = node.all_input_nodes[0]
        return True


def _val(n: fx.Node) -> torch.Tensor:
    return n.meta["val"]


def _arg(node: fx.Node, name: str) -> Any:
    """An argument of an op node by its schema name, positional or keyword."""
    for i, a in enumerate(node.target._schema.arguments):  # type: ignore[union-attr]
        if a.name == name:
            return node.args[i] if i < len(node.args) else node.kwargs[name]
    raise KeyError(name)


def _rs_key(c: _Coll) -> tuple:
    return (_val(_arg(c.node, "input")).dtype, _arg(c.node, "reduce_op"))


def _fake_mode(nodes: Sequence[fx.Node]):
    for n in nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and hasattr(v, "fake_mode"):
            return v.fake_mode
    return None


def _nbytes(t: torch.Tensor) -> int:
    return int(t.numel()) * t.element_size()


def _buckets(colls: list[_Coll], cap: int, kind: str, model: CostModel | None = None,
             ready_time: dict[fx.Node, float] | None = None) -> list[list[_Coll]]:
    """Consecutive members (class order) grouped up to ``cap`` bytes.

    Reduce-scatter buckets hold one dtype and reduce op. All-gather buckets also close early
    when growing this bucket would make it the latest to arrive: with every bucket gathered back
    to back, its lateness (arrival minus ``ready_time`` of its first member, the compute before
    that use) would exceed the stall already unavoidable, the lateness the remaining members
    will have anyway (a lower bound: all of them gathered at ``cap``) and the lateness of
    starting a new bucket instead (one more latency). That keeps the first buckets of a graph
    small, so compute starts as soon as its first parameters arrive, without splitting buckets
    where that only adds latency.
    """
    out: list[list[_Coll]] = []
    cur: list[_Coll] = []
    cur_bytes = 0
    done = 0.0  # when the buckets already closed would finish, gathered back to back
    slack = 0.0  # stall that no bucketing avoids (the first gather has nothing to hide under)

    def comm(nbytes: int) -> float:
        assert model is not None
        return model.collective_time("all_gather", nbytes, colls[0].group_size)

    def close() -> None:
        nonlocal cur, cur_bytes, done, slack
        if kind == "all_gather" and model is not None and ready_time is not None:
            done += comm(cur_bytes)
            slack = max(slack, done - ready_time.get(cur[0].wait, 0.0))
        out.append(cur)
        cur, cur_bytes = [], 0

    sizes = [_nbytes(_val(c.node)) if kind == "all_gather" else 0 for c in colls]
    remaining = sum(sizes)
    last_need = ready_time.get(colls[-1].wait, 0.0) if ready_time and colls else 0.0

    def projected(nbytes: int) -> float:
        # everything still to gather, in buckets of ``cap``: one latency per bucket
        n_buckets = max(1, -(-nbytes // cap)) if cap > 0 else 1
        one = comm(nbytes)
        return one + (n_buckets - 1) * comm(0)

    for k, c in enumerate(colls):
        if kind == "all_gather":
            size = sizes[k]
            same = True
        else:
            size = _nbytes(_val(_arg(c.node, "input")))
            same = not cur or _rs_key(cur[0]) == _rs_key(c)
        if cur:
            late = False
            if kind == "all_gather" and model is not None and ready_time is not None:
                need_cur, need_new = ready_time.get(cur[0].wait, 0.0), ready_time.get(c.wait, 0.0)
                grown = done + comm(cur_bytes + size) - need_cur  # lateness if ``c`` joins
                split = max(done + comm(cur_bytes) - need_cur,  # ... if it starts the next bucket
                            done + comm(cur_bytes) + comm(size) - need_new)
                bound = done + projected(cur_bytes + remaining) - last_need
                late = grown > max(slack, bound, split)
            if cap <= 0 or cur_bytes + size > cap or not same or late:
                close()
        cur.append(c)
        cur_bytes += size
        remaining -= size
    if cur:
        close()
    return out


class _Builder:
    """Creates nodes with fake-tensor metadata (computed by running the op on the fake values)."""

    def __init__(self, graph: fx.Graph, fake_mode) -> None:  # noqa: ANN001
        self.graph = graph
        self.fake_mode = fake_mode
        self.created: list[fx.Node] = []

    def __call__(self, target, args: tuple, anchor: fx.Node) -> fx.Node:  # noqa: ANN001
        with self.graph.inserting_before(anchor):
            node = self.graph.call_function(target, args)
        fake_args = tuple(_val(a) if isinstance(a, fx.Node) else
                          [(_val(x) if isinstance(x, fx.Node) else x) for x in a] if isinstance(a, list) else a
                          for a in args)
        ctx = self.fake_mode if self.fake_mode is not None else contextlib.nullcontext()
        with ctx:
            node.meta["val"] = target(*fake_args)
        self.created.append(node)
        return node


def _keep_provenance(coll: fx.Node, bucket: list[_Coll]) -> None:
    """A bucket's collective names what it merged and where the first member came from (the
    collective check and flight-recorder annotations show them)."""
    coll.meta["ext_bucket_of"] = [c.node.name for c in bucket]
    trace = next((c.node.meta["stack_trace"] for c in bucket if c.node.meta.get("stack_trace")), None)
    if trace is not None:
        coll.meta["stack_trace"] = trace


def _merge_all_gather(graph: fx.Graph, bucket: list[_Coll], b: _Builder, anchor: fx.Node) -> tuple[fx.Node, fx.Node, list, list]:
    """One all-gather for ``bucket``: pack shards as bytes (mixed dtypes) or elements, gather, unpack."""
    w, group = bucket[0].group_size, bucket[0].group
    ins = [_arg(c.node, "input") for c in bucket]
    dtypes = {_val(x).dtype for x in ins}
    as_bytes = len(dtypes) > 1
    pre: list[fx.Node] = []
    segs: list[tuple[int, int]] = []  # (offset, length) in buffer units
    parts = []
    off = 0
    for x in ins:
        flat = b(aten.reshape.default, (x, [-1]), anchor)
        pre.append(flat)
        if as_bytes:
            flat = b(aten.view.dtype, (flat, torch.uint8), anchor)
            pre.append(flat)
            n = _val(flat).numel()
            pad = (-n) % _ALIGN
            if pad:
                flat = b(aten.constant_pad_nd.default, (flat, [0, pad], 0.0), anchor)
                pre.append(flat)
            segs.append((off, n))
            off += n + pad
        else:
            n = _val(flat).numel()
            segs.append((off, n))
            off += n
        parts.append(flat)
    buf = b(aten.cat.default, (parts,), anchor)
    pre.append(buf)
    coll = b(c10d.all_gather_into_tensor.default, (buf, w, group), anchor)
    _keep_provenance(coll, bucket)
    wait = b(c10d.wait_tensor.default, (coll,), anchor)
    post: list[fx.Node] = []
    rows = b(aten.reshape.default, (wait, [w, off]), anchor)
    post.append(rows)
    for c, x, (o, n) in zip(bucket, ins, segs):
        seg = b(aten.slice.Tensor, (rows, 1, o, o + n), anchor)
        post.append(seg)
        if as_bytes:
            seg = b(aten.view.dtype, (seg, _val(x).dtype), anchor)
            post.append(seg)
        out_shape = list(_val(c.wait).shape)
        res = b(aten.reshape.default, (seg, out_shape), anchor)
        post.append(res)
        c.wait.replace_all_uses_with(res)
    for c in bucket:
        graph.erase_node(c.wait)
        graph.erase_node(c.node)
    return coll, wait, pre, post


def _merge_reduce_scatter(graph: fx.Graph, bucket: list[_Coll], b: _Builder, anchor: fx.Node) -> tuple[fx.Node, fx.Node, list, list]:
    """One reduce-scatter for ``bucket``: rank-major [W, sum(n_i)] packing, scatter, slice out."""
    w, group = bucket[0].group_size, bucket[0].group
    op = _arg(bucket[0].node, "reduce_op")
    pre: list[fx.Node] = []
    parts, sizes = [], []
    for c in bucket:
        x = _arg(c.node, "input")
        r = b(aten.reshape.default, (x, [w, -1]), anchor)
        pre.append(r)
        parts.append(r)
        sizes.append(_val(r).shape[1])
    cat = b(aten.cat.default, (parts, 1), anchor)
    flat = b(aten.reshape.default, (cat, [-1]), anchor)
    pre += [cat, flat]
    coll = b(c10d.reduce_scatter_tensor.default, (flat, op, w, group), anchor)
    _keep_provenance(coll, bucket)
    wait = b(c10d.wait_tensor.default, (coll,), anchor)
    post: list[fx.Node] = []
    off = 0
    for c, n in zip(bucket, sizes):
        seg = b(aten.slice.Tensor, (wait, 0, off, off + n), anchor)
        res = b(aten.reshape.default, (seg, list(_val(c.wait).shape)), anchor)
        post += [seg, res]
        c.wait.replace_all_uses_with(res)
        off += n
    for c in bucket:
        graph.erase_node(c.wait)
        graph.erase_node(c.node)
    return coll, wait, pre, post
