"""Scheduling for the ``fsdp_overlap`` pass (``overlap.py``): the list scheduler that places the
(bucketed) collectives over the fixed compute order by the cost model (``_plan_and_order``,
``_schedule``), the FX rewrite to the chosen order (``_apply_order``) and ``pin_order``, which
keeps Inductor's scheduler from moving what was planned.

The rules ``_schedule`` follows: compute nodes keep their order; all-gathers are issued ahead of
their first use (prefetch, up to ``max_prefetch`` buckets and only where the memory budget
allows), their waits stay right before the first use; where a wait would still stall, the packing
work of later buckets runs first; reduce-scatters are issued as soon as their gradients exist
and waited where the model says they have finished (or earlier under memory pressure).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
import torch.fx as fx

from inductor_ext.comms_passes.cost_model import (
    CostModel, collective_info, is_view_like, is_wait, memory_profile, wait_collective,
)
from inductor_ext.comms_passes.fsdp.bucketing import (
    _arg, _Builder, _buckets, _Coll, _fake_mode, _find_collectives, _merge_all_gather, _merge_reduce_scatter,
    _nbytes, _val,
)
from inductor_ext.comms_passes.fsdp.settings import OverlapSettings

aten = torch.ops.aten


@dataclass
class _Unit:
    """One (possibly bucketed) collective with the nodes that travel with it."""

    kind: str
    group: str
    coll: fx.Node
    wait: fx.Node
    members: list[_Coll]
    pre: list[fx.Node] = field(default_factory=list)  # emitted right before ``coll``
    post: list[fx.Node] = field(default_factory=list)  # emitted right after ``wait``
    ready: int = 0  # earliest backbone anchor
    first_use: int = 0  # anchor of the first backbone user
    duration: float = 0.0
    bytes_in_flight: int = 0
    hold_bytes: int = 0  # extra live bytes while issued and not yet waited/used
    issued_at: int = -1
    waited_at: int = -1


@dataclass
class PlanSummary:
    """What one run decided (for reports and tests)."""

    buckets: dict[str, list[int]] = field(default_factory=dict)  # kind -> members per bucket
    mixed_dtype_buckets: int = 0  # all-gather buckets packed as bytes (several dtypes, one gather)
    prefetched: int = 0
    deferred_waits: int = 0
    bucket_cap_bytes: int = 0
    max_prefetch: int = 0
    memory_limit: int = 0
    input_peak: int = 0
    peak: int = 0
    exposed_before: float = 0.0
    exposed_after: float = 0.0
    rewrites: int = 0
    uneven_shards: str | None = None  # set when shards are uneven (planned on rank-invariant costs)
    pinned: int = 0  # nodes given ordering dependencies (pin_order)


def _kernel(node: fx.Node, model: CostModel, world: int) -> bool:
    """A compute node Inductor runs as a kernel of its own (matmul, reduction, attention, ...):
    an anchor that ordering dependencies can use without keeping a pointwise op from fusing."""
    return (node.op == "call_function" and collective_info(node, world) is None and not is_wait(node)
            and not is_view_like(node) and torch.Tag.pointwise not in getattr(node.target, "tags", ())
            and model.node_time(node) > 0)


def pin_order(graph: fx.Graph, model: CostModel, world: int) -> int:
    """Make Inductor's scheduler run each collective and its wait where the plan put them.

    Inductor's scheduler (``simple_overlap`` moves collectives earlier and waits later;
    ``reorder_for_peak_memory`` may move either) would otherwise change the exposure the plan
    was chosen for. With 2.15's ``control_deps`` (what its own overlap scheduler pins with),
    every collective follows the last kernel before it and precedes the first kernel after it,
    and every wait follows the last kernel before it and precedes the first kernel after it.
    Anchors are non-pointwise kernels only, so no fusion is lost. Returns the number of nodes
    that got ordering dependencies.
    """
    from torch._inductor.fx_passes.control_dependencies import preserve_node_ordering
    from torch.utils._ordered_set import OrderedSet

    nodes = list(graph.nodes)
    kernels = [i for i, n in enumerate(nodes) if _kernel(n, model, world)]
    pos = {n: i for i, n in enumerate(nodes)}
    deps: dict[fx.Node, OrderedSet[fx.Node]] = {}

    def before(i: int) -> fx.Node | None:
        k = next((k for k in reversed(kernels) if k < i), None)
        return None if k is None else nodes[k]

    def after(i: int) -> fx.Node | None:
        k = next((k for k in kernels if k > i), None)
        return None if k is None else nodes[k]

    for n in nodes:
        c = wait_collective(n)
        if c is None or c not in pos:
            continue
        for x in (c, n):
            prev, nxt = before(pos[x]), after(pos[x])
            if prev is not None:
                deps.setdefault(x, OrderedSet()).add(prev)
            if nxt is not None and nxt.op != "output":
                deps.setdefault(nxt, OrderedSet()).add(x)
    # outermost first: a node wrapped later keeps the name its dependants refer to
    preserve_node_ordering(graph, {k: deps[k] for k in sorted(deps, key=pos.__getitem__)})
    return len(deps)


def _compute_before_use(nodes: Sequence[fx.Node], model: CostModel, world: int) -> dict[fx.Node, float]:
    """For each wait: compute-stream time (no stalls) before its first user runs."""
    t = 0.0
    at: dict[fx.Node, float] = {}
    for n in nodes:
        if collective_info(n, world) is None and not is_wait(n):
            at[n] = t
            t += model.node_time(n)
    out: dict[fx.Node, float] = {}
    for n in nodes:
        if is_wait(n):
            users = [at[u] for u in n.users if u in at]
            out[n] = min(users) if users else t
    return out


def _tensors_of(n: fx.Node) -> list[torch.Tensor]:
    v = n.meta.get("val")
    vals = v if isinstance(v, (list, tuple)) else [v]
    return [x for x in vals if isinstance(x, torch.Tensor)]


def _aliases(n: fx.Node) -> bool:
    """A view-like node: allocates nothing."""
    schema = getattr(n.target, "_schema", None)
    return bool(schema is not None and schema.returns and schema.returns[0].alias_info is not None) \
        or n.target in (aten.reshape.default, aten.view.default, aten.view.dtype)


def _exclusive_input_chain(coll: fx.Node, pre: list[fx.Node], pure: set[fx.Node]) -> list[fx.Node]:
    """Input-only ancestors of ``coll``/``pre`` used by nothing else: they travel with the unit."""
    members = set(pre) | {coll}
    chain: set[fx.Node] = set()
    frontier = [a for n in [*pre, coll] for a in n.all_input_nodes]
    cand: list[fx.Node] = []
    seen: set[fx.Node] = set()
    while frontier:
        a = frontier.pop()
        if a in seen or a in members or a not in pure or a.op != "call_function":
            continue
        seen.add(a)
        cand.append(a)
        frontier.extend(a.all_input_nodes)
    changed = True
    while changed:
        changed = False
        for a in cand:
            if a not in chain and all(u in chain or u in members for u in a.users):
                chain.add(a)
                changed = True
    return [a for a in cand if a in chain]


def _plan_and_order(graph: fx.Graph, settings: OverlapSettings, model: CostModel, cap: int, prefetch: int,
                    limit: int) -> tuple[list[fx.Node], PlanSummary]:
    world = settings.default_world_size
    summary = PlanSummary()
    nodes = list(graph.nodes)
    colls = _find_collectives(nodes, settings)
    orig_pos = {n: i for i, n in enumerate(nodes)}
    pure: set[fx.Node] = set()
    for n in nodes:
        if n.op in ("placeholder", "get_attr"):
            pure.add(n)
        elif (n.op == "call_function" and collective_info(n) is None and not is_wait(n)
              and not n.is_impure() and all(a in pure for a in n.all_input_nodes)):
            pure.add(n)
    output = next(n for n in reversed(nodes) if n.op == "output")
    ready_time = _compute_before_use(nodes, model, world)
    builder = _Builder(graph, _fake_mode(nodes))
    units: list[_Unit] = []
    rewrites = 0
    for (kind, group), members in colls.items():
        do_bucket = settings.bucket_all_gathers if kind == "all_gather" else settings.bucket_reduce_scatters
        buckets = _buckets(members, cap if do_bucket else 0, kind, model, ready_time)
        summary.buckets.setdefault(kind, []).extend(len(bk) for bk in buckets)
        for bk in buckets:
            if len(bk) == 1:
                coll, wait, pre, post = bk[0].node, bk[0].wait, [], []
            else:
                merge = _merge_all_gather if kind == "all_gather" else _merge_reduce_scatter
                summary.mixed_dtype_buckets += kind == "all_gather" and len(
                    {_val(_arg(c.node, "input")).dtype for c in bk}) > 1
                coll, wait, pre, post = merge(graph, bk, builder, output)
                rewrites += len(bk) - 1
            if kind == "all_gather":
                pre = _exclusive_input_chain(coll, pre, pure) + pre
            else:
                post = post + _views_for_output(wait, post, output)
            units.append(_Unit(kind, group, coll, wait, bk, pre, post))
    # Nodes created by merging sit before the output for now; order them among themselves.
    created = set(builder.created)
    for k, n in enumerate(builder.created):
        orig_pos[n] = len(nodes) + k
    in_unit: set[fx.Node] = set()
    for u in units:
        in_unit.update(u.pre)
        in_unit.update(u.post)
        in_unit.update((u.coll, u.wait))
        u.pre.sort(key=lambda n: orig_pos[n])
    rest = [n for n in graph.nodes if n not in in_unit]
    assert not (set(rest) & created)
    # Input-only values that an all-gather needs but that other nodes use too stay in the
    # backbone; they move up to right after the placeholders, so no all-gather waits for them.
    hoist: set[fx.Node] = set()
    for u in units:
        if u.kind == "all_gather":
            stack = [a for m in [*u.pre, u.coll] for a in m.all_input_nodes]
            while stack:
                a = stack.pop()
                if a in hoist or a in in_unit or a.op != "call_function" or a not in pure:
                    continue
                hoist.add(a)
                stack.extend(a.all_input_nodes)
    lead = [n for n in rest if n.op == "placeholder"]
    backbone = lead + [n for n in rest if n in hoist] + [n for n in rest if n.op != "placeholder" and n not in hoist]
    n_lead = len(lead)
    bpos = {n: i for i, n in enumerate(backbone)}
    for u in units:
        u.ready = _unit_ready(u, bpos, n_lead)
        outs = set(u.post) | {u.wait}
        users = [bpos[x] for n in outs for x in n.users if x in bpos]
        u.first_use = min(users) if users else bpos[output]
        info = collective_info(u.coll, world)
        assert info is not None
        u.duration = model.collective_time(info.kind, info.nbytes, info.group_size)
        u.bytes_in_flight = info.in_bytes + info.out_bytes
        # While issued and not yet used (all-gather) or finished (reduce-scatter), the unit keeps
        # its packed input and its output alive.
        u.hold_bytes = info.in_bytes + info.out_bytes
        if u.ready > u.first_use:
            raise AssertionError(f"fsdp_overlap: {u.coll} is needed before its inputs exist")
    summary.rewrites = rewrites
    base_curve = _baseline_curve(backbone, units, world, getattr(model, "size_overrides", None))
    anchors = _schedule(backbone, units, model, settings, prefetch, limit, base_curve, world, summary)
    order = _emit(backbone, anchors)
    return order, summary


def _views_for_output(wait: fx.Node, post: list[fx.Node], output: fx.Node) -> list[fx.Node]:
    """Views of a reduce-scatter's result that only the graph output uses (ranks with a shorter
    shard slice the padded one): they go with the wait, so they do not make it due earlier."""
    found: list[fx.Node] = []
    frontier = [wait, *post]
    while frontier:
        n = frontier.pop()
        for u in n.users:
            if (u is not output and u not in found and u not in post and u.op == "call_function"
                    and is_view_like(u) and all(x is output or is_view_like(x) for x in u.users)):
                found.append(u)
                frontier.append(u)
    return found


def _unit_ready(u: _Unit, bpos: dict[fx.Node, int], n_lead: int) -> int:
    deps = [bpos[a] for n in [*u.pre, u.coll] for a in n.all_input_nodes if a in bpos]
    return max([n_lead, *(d + 1 for d in deps)])


def _emit(backbone: list[fx.Node], anchors: dict[int, list[fx.Node]]) -> list[fx.Node]:
    order: list[fx.Node] = []
    emitted: set[fx.Node] = set()
    for i, n in enumerate(backbone):
        for m in anchors.get(i, ()):
            if m not in emitted:
                emitted.add(m)
                order.append(m)
        order.append(n)
    return order


def _jit_anchors(units: list[_Unit]) -> dict[int, list[fx.Node]]:
    """No overlap: all-gathers right before their first use, reduce-scatters waited at once."""
    anchors: dict[int, list[fx.Node]] = {}
    for u in sorted(units, key=lambda u: (u.first_use if u.kind == "all_gather" else u.ready, u.members[0].order)):
        at = u.first_use if u.kind == "all_gather" else u.ready
        anchors.setdefault(at, []).extend([*u.pre, u.coll, u.wait, *u.post])
    return anchors


def _baseline_curve(backbone: list[fx.Node], units: list[_Unit], world: int,
                    size_overrides: dict[str, int] | None = None) -> list[int]:
    """Live bytes at each backbone anchor for the no-overlap placement of the units."""
    anchors = _jit_anchors(units)
    order = _emit(backbone, anchors)
    live, _ = memory_profile(order, world, size_overrides)
    curve = [0] * (len(backbone) + 1)
    i = 0
    cur_max = 0
    bset = {n: k for k, n in enumerate(backbone)}
    for n, v in zip(order, live):
        cur_max = max(cur_max, v)
        if n in bset:
            curve[bset[n]] = cur_max
            cur_max = 0
            i += 1
    curve[-1] = curve[-2] if len(curve) > 1 else 0
    return curve


def _schedule(backbone: list[fx.Node], units: list[_Unit], model: CostModel, settings: OverlapSettings,
              prefetch: int, limit: int, base: list[int], world: int, summary: PlanSummary) -> dict[int, list[fx.Node]]:
    """List scheduling over the fixed compute order; returns nodes to emit before each anchor."""
    n = len(backbone)
    base_arr = np.asarray(base, dtype=np.int64)
    extra = np.zeros(n + 1, dtype=np.int64)  # committed extra live bytes (prefetched all-gathers)
    needed_at: dict[int, list[_Unit]] = {}
    for u in units:
        if u.kind == "all_gather":
            needed_at.setdefault(u.first_use, []).append(u)
    queues: dict[tuple[str, str], list[_Unit]] = {}
    for u in sorted(units, key=lambda u: u.members[0].order):
        queues.setdefault((u.kind, u.group), []).append(u)
    heads = {k: 0 for k in queues}
    anchors: dict[int, list[fx.Node]] = {}
    stream_free: dict[str, float] = {}
    end: dict[fx.Node, float] = {}
    t = 0.0
    waiting_ag: list[_Unit] = []  # issued all-gathers, waited at their first use
    waiting_rs: list[_Unit] = []  # issued reduce-scatters, waited when done or under pressure
    in_flight = 0
    max_in_flight = settings.max_in_flight_bytes

    emitted: set[fx.Node] = set()

    def emit(at: int, nodes: Sequence[fx.Node]) -> None:
        nonlocal t
        for m in nodes:
            if m not in emitted:  # packing / unpacking runs on the compute stream
                emitted.add(m)
                t += model.node_time(m)
        anchors.setdefault(at, []).extend(nodes)

    overrides = getattr(model, "size_overrides", None) or {}

    def pre_bytes(u: _Unit) -> int:
        return sum(overrides[m.name] if m.name in overrides else sum(_nbytes(v) for v in _tensors_of(m))
                   for m in u.pre if m not in emitted and not _aliases(m))

    def issue(u: _Unit, at: int) -> None:
        nonlocal in_flight
        emit(at, u.pre)
        start = max(t, stream_free.get(u.group, 0.0))
        end[u.coll] = stream_free[u.group] = start + u.duration
        u.issued_at = at
        emit(at, [u.coll])
        in_flight += u.bytes_in_flight
        (waiting_ag if u.kind == "all_gather" else waiting_rs).append(u)

    def wait(u: _Unit, at: int) -> None:
        nonlocal t, in_flight
        t = max(t, end[u.coll])
        u.waited_at = at
        emit(at, [u.wait, *u.post])
        in_flight -= u.bytes_in_flight
        (waiting_ag if u.kind == "all_gather" else waiting_rs).remove(u)

    def fits(u: _Unit, at: int) -> bool:
        """Whether issuing all-gather ``u`` at ``at`` keeps within the in-flight and memory limits."""
        if max_in_flight is not None and in_flight + u.bytes_in_flight > max_in_flight:
            return False
        window = int((base_arr[at:u.first_use + 1] + extra[at:u.first_use + 1]).max())
        return window + rs_held() + u.hold_bytes <= limit

    def issue_ahead(key: tuple[str, str], u: _Unit, at: int) -> None:
        """Issue all-gather ``u`` (the head of its queue) at ``at``; it holds memory until used."""
        extra[at:u.first_use] += u.hold_bytes
        heads[key] += 1
        issue(u, at)

    def rs_held() -> int:
        return sum(u.hold_bytes for u in waiting_rs)

    def issue_through(key: tuple[str, str], target: _Unit, at: int) -> None:
        q = queues[key]
        while heads[key] < len(q) and q[heads[key]].issued_at < 0:
            u = q[heads[key]]
            heads[key] += 1
            issue(u, at)
            if u is target:
                break

    for i in range(n):
        node = backbone[i]
        # 1. finished reduce-scatters: wait now, free their buffers (no stall)
        for u in list(waiting_rs):
            if end[u.coll] <= t and u.first_use > i:
                wait(u, i)
                if u.first_use > i + 1:
                    summary.deferred_waits += 1
        # 2. memory pressure: wait for the oldest reduce-scatters
        while waiting_rs and int(base_arr[i] + extra[i]) + rs_held() > limit:
            wait(waiting_rs[0], i)
        # 3. all-gathers needed by this node (issue late if they were not prefetched)
        for u in needed_at.get(i, ()):
            if u.issued_at < 0:
                issue_through((u.kind, u.group), u, i)
        # 4. prefetch: issue following all-gathers while the window and the memory budget allow
        for key, q in queues.items():
            if key[0] != "all_gather" or prefetch <= 0:
                continue
            while heads[key] < len(q):
                u = q[heads[key]]
                if u.issued_at >= 0 or u.ready > i:
                    break
                ahead = sum(1 for w in waiting_ag if w.group == u.group and w.first_use > i)
                if ahead >= prefetch or not fits(u, i):
                    break
                issue_ahead(key, u, i)
                if u.first_use > i:
                    summary.prefetched += 1
        # 5. reduce-scatters whose gradients exist
        for key, q in queues.items():
            if key[0] != "reduce_scatter":
                continue
            while heads[key] < len(q) and q[heads[key]].ready <= i:
                u = q[heads[key]]
                heads[key] += 1
                issue(u, i)
        # 6. a stall is coming: use it. Issue the next all-gathers beyond the prefetch depth
        #    (their packing -- casts, copies -- runs now, their transfers queue behind), while
        #    the memory budget allows; past that, run only the packing of later buckets.
        needed = [u for u in waiting_ag + waiting_rs if u.first_use == i]
        stall_until = max((end[u.coll] for u in needed), default=t)
        if settings.reorder and stall_until > t:
            for key, q in queues.items():
                if key[0] != "all_gather":
                    continue
                while heads[key] < len(q) and t < stall_until:
                    u = q[heads[key]]
                    if u.issued_at >= 0 or u.ready > i or not fits(u, i):
                        break
                    issue_ahead(key, u, i)
                    summary.prefetched += 1
                for u in q[heads[key]:]:
                    if t >= stall_until:
                        break
                    # A bucket's packing is a kernel of its own here (the cat materialises it);
                    # a lone cast would only run where its collective does.
                    if u.issued_at >= 0 or u.ready > i or len(u.members) < 2 or all(m in emitted for m in u.pre):
                        continue
                    held = pre_bytes(u)
                    window = int((base_arr[i:u.first_use + 1] + extra[i:u.first_use + 1]).max())
                    if window + rs_held() + held > limit:
                        break
                    extra[i:u.first_use] += held
                    emit(i, u.pre)
        # 7. waits this node needs (in issue order)
        for u in sorted([u for u in waiting_ag + waiting_rs if u.first_use == i], key=lambda u: u.issued_at):
            if u in waiting_ag or u in waiting_rs:
                wait(u, i)
        if not settings.reorder:
            for u in list(waiting_rs):
                wait(u, i)
        # 8. the node itself
        info = collective_info(node, world)
        if info is not None:
            dur = model.collective_time(info.kind, info.nbytes, info.group_size)
            start = max(t, stream_free.get(info.group, 0.0))
            end[node] = stream_free[info.group] = start + dur
        elif (c := wait_collective(node)) is not None:
            t = max(t, end.get(c, t))
        else:
            t += model.node_time(node)
    leftover = [u for u in units if u.issued_at < 0 or u.waited_at < 0]
    if leftover:
        raise AssertionError(f"fsdp_overlap: unscheduled collectives {[u.coll.name for u in leftover]}")
    return anchors


def _apply_order(graph: fx.Graph, order: list[fx.Node]) -> None:
    """Move nodes so the graph's order is ``order`` (a permutation of its nodes)."""
    current = list(graph.nodes)
    if len(order) != len(current) or set(order) != set(current):
        raise AssertionError("fsdp_overlap: the new order is not a permutation of the graph")
    seen: set[fx.Node] = set()
    for n in order:
        for a in n.all_input_nodes:
            if a not in seen:
                raise AssertionError(f"fsdp_overlap: {n.name} would run before its input {a.name}")
        seen.add(n)
    prev = order[0]
    if current[0] is not prev:
        current[0].prepend(prev)
    for n in order[1:]:
        if prev.next is not n:
            prev.append(n)
        prev = n
