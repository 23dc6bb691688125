"""A lower bound on pipeline-buffer peaks that also counts the transfer latency of the timing
model, for plans within a step-time budget.

``lower_bound_bytes`` lets every buffer live only across the compute actions that produce or use
it. A real plan cannot always do that: a receive posted after compute action k lets its consumer
start no earlier than k's end plus the transfer latency, and a send's wait placed before compute
action k holds k back until the producer's end plus the latency. Within a step-time budget only
so many of those delays fit. ``timed_lower_bound_bytes`` finds, per rank, the smallest peak for
which some choice of "receive posted before compute j" / "wait before compute j" satisfies every
such delay, the compute order, the cross-rank data dependencies and the budget: a small
mixed-integer program (scipy's HiGHS) per candidate peak, binary-searched.

It is a relaxation of ``simulate``'s model (the peer's side of each transfer is left free, FIFO
order and deadlocks are ignored, and only compute positions count), so every plan that keeps the
compute order and ends within the budget has at least this peak on that rank.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence

from torch.distributed.pipelining.schedules import _Action, _ComputationType

from inductor_ext.comms_passes.pipeline.ir import (
    B, BufferKey, DEFAULT_COSTS, DEFAULT_P2P_LATENCY, F, I, _infer_topology, _key, OUT_ACT,
    OUT_GRAD, _parts, RECV_ACT, RECV_GRAD, _size_fn, SizeSpec, _Topology, W,
)

_EPS = 1e-9


def compute_windows(
    comps: Mapping[int, Sequence[_Action]],
    topo: _Topology,
    time_budget: float,
    costs: Mapping[_ComputationType, float] | None = None,
    latency: float = DEFAULT_P2P_LATENCY,
) -> dict[int, tuple[list[float], list[float], list[float]]]:
    """Per rank, (earliest start, latest start, cost) of every compute action, over all plans that
    keep the compute order ``comps`` and end within ``time_budget``: earliest when nothing waits
    for a receive or a send, latest so that the rank's later actions and every consumer of its
    sends (a latency later) still fit. Raises ValueError when nothing fits the budget."""
    cost_of = dict(DEFAULT_COSTS if costs is None else costs)
    cost = {r: [cost_of.get(p.computation_type, 0.0) for p in lst] for r, lst in comps.items()}
    deps = _remote_producers(comps, topo)
    users: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for c, p in deps.items():
        users[p].append(c)
    earliest = {r: [0.0] * len(lst) for r, lst in comps.items()}
    latest = {r: [0.0] * len(lst) for r, lst in comps.items()}
    ptr = dict.fromkeys(comps, 0)
    progressed = True
    while progressed:  # forward, ranks advance while their next action's input is timed
        progressed = False
        for r, lst in comps.items():
            while ptr[r] < len(lst):
                i = ptr[r]
                t0 = earliest[r][i - 1] + cost[r][i - 1] if i else 0.0
                if (r, i) in deps:
                    pr, pi = deps[(r, i)]
                    if pi >= ptr[pr]:
                        break
                    t0 = max(t0, earliest[pr][pi] + cost[pr][pi] + latency)
                earliest[r][i] = t0
                ptr[r] += 1
                progressed = True
    if any(ptr[r] < len(lst) for r, lst in comps.items()):
        raise ValueError("the compute order waits in a cycle between ranks")
    if any(lst and earliest[r][-1] + cost[r][-1] > time_budget + _EPS for r, lst in comps.items()):
        raise ValueError(f"no plan keeping this compute order ends within time {time_budget}")
    ptr = {r: len(lst) - 1 for r, lst in comps.items()}
    progressed = True
    while progressed:  # backward, once every consumer's latest start is known
        progressed = False
        for r, lst in comps.items():
            while ptr[r] >= 0:
                i = ptr[r]
                us = users.get((r, i), ())
                if any(ci <= ptr[cr] for cr, ci in us):
                    break
                end = latest[r][i + 1] if i + 1 < len(lst) else time_budget
                for cr, ci in us:
                    end = min(end, latest[cr][ci] - latency)
                latest[r][i] = end - cost[r][i]
                ptr[r] -= 1
                progressed = True
    return {r: (earliest[r], latest[r], cost[r]) for r in comps}


def _remote_producers(
    comps: Mapping[int, Sequence[_Action]], topo: _Topology
) -> dict[tuple[int, int], tuple[int, int]]:
    """(rank, index) of each compute action that consumes a transfer -> (rank, index) of the
    compute action producing it."""
    where: dict[tuple, tuple[int, int]] = {}
    for r, lst in comps.items():
        for i, p in enumerate(lst):
            where.setdefault(_key(p), (r, i))
    deps = {}
    for r, lst in comps.items():
        for i, p in enumerate(lst):
            t = topo.remote_input(p)
            if t is None:
                continue
            kind, s, m = t
            if kind == "act":
                deps[(r, i)] = where[(F, s - 1, m)]
            else:
                deps[(r, i)] = next(where[(ct, s + 1, m)] for ct in (B, I) if (ct, s + 1, m) in where)
    return deps


def timed_lower_bound_bytes(
    actions: Mapping[int, Sequence[_Action | None]],
    sizes: SizeSpec,
    time_budget: float,
    *,
    stage_to_rank: Mapping[int, int] | None = None,
    num_stages: int | None = None,
    costs: Mapping[_ComputationType, float] | None = None,
    p2p_latency: float = DEFAULT_P2P_LATENCY,
) -> dict[int, int]:
    """Per rank, the smallest peak any plan keeping the compute order of ``actions`` can have
    while its modelled step time (``simulate``) stays within ``time_budget`` (see module doc).
    At a budget no stall could exceed, it equals ``lower_bound_bytes``."""
    oracle = TimedBoundOracle(actions, sizes, time_budget, stage_to_rank=stage_to_rank,
                              num_stages=num_stages, costs=costs, p2p_latency=p2p_latency)
    out = {}
    for rank in oracle.ranks:
        program = oracle.program(rank)
        # peaks are sums of buffer sizes: search the multiples of their gcd
        step = program.size_gcd() or 1
        lo, hi = program.fixed_peak() // step, -(-program.total_bytes() // step)
        while lo < hi:  # feasibility is monotone in the peak
            mid = (lo + hi) // 2
            if program.feasible(mid * step):
                hi = mid
            else:
                lo = mid + 1
        out[rank] = lo * step
    return out


class TimedBoundOracle:
    """Answers "can this rank's peak go below ``peak`` within the budget?" one program at a time
    (the plan search asks it only for the peaks it reaches)."""

    def __init__(
        self,
        actions: Mapping[int, Sequence[_Action | None]],
        sizes: SizeSpec,
        time_budget: float,
        *,
        stage_to_rank: Mapping[int, int] | None = None,
        num_stages: int | None = None,
        costs: Mapping[_ComputationType, float] | None = None,
        p2p_latency: float = DEFAULT_P2P_LATENCY,
    ) -> None:
        acts = {r: [a for a in lst if a is not None] for r, lst in actions.items()}
        self.topo = _infer_topology(acts, stage_to_rank, num_stages)
        self.comps = {r: [p for a in lst for p in _parts(a) if p.computation_type in (F, B, I, W)]
                      for r, lst in acts.items()}
        self.windows = compute_windows(self.comps, self.topo, time_budget, costs, p2p_latency)
        self.size = _size_fn(sizes)
        self.latency = p2p_latency
        self.ranks = sorted(self.comps)
        self._programs: dict[int, _RankProgram] = {}
        self._answers: dict[tuple[int, int], bool] = {}

    def program(self, rank: int) -> _RankProgram:
        if rank not in self._programs:
            self._programs[rank] = _RankProgram(self.comps, self.topo, self.windows, rank,
                                                self.size, self.latency)
        return self._programs[rank]

    def lowerable(self, rank: int, peak: int) -> bool:
        """Whether some plan within the budget keeps ``rank`` below ``peak`` bytes."""
        if (rank, peak) not in self._answers:
            self._answers[(rank, peak)] = self.program(rank).feasible(peak - 1)
        return self._answers[(rank, peak)]


class _RankProgram:
    """The placement choices of one rank's buffers as a mixed-integer feasibility program."""

    def __init__(self, comps, topo: _Topology, windows, rank: int, size, latency: float) -> None:
        self.windows = windows
        self.index: dict[tuple[int, int], int] = {}  # (rank, compute index) -> its start time
        for r, lst in comps.items():
            for k in range(len(lst)):
                self.index[(r, k)] = len(self.index)
        self.nvars = len(self.index)
        self.rows: list[tuple[dict[int, float], float]] = []  # sum(coef * x) >= rhs
        self.binaries: list[int] = []
        cost = {r: w[2] for r, w in windows.items()}
        for r, lst in comps.items():
            for k in range(1, len(lst)):
                self._ge({self.index[(r, k)]: 1, self.index[(r, k - 1)]: -1}, cost[r][k - 1])
        for (r, i), (pr, pi) in _remote_producers(comps, topo).items():
            self._ge({self.index[(r, i)]: 1, self.index[(pr, pi)]: -1}, cost[pr][pi] + latency)
        self.big_m = max(max(w[1], default=0.0) for w in windows.values()) + 1.0
        comp = comps[rank]
        n = len(comp)
        self.fixed = [0] * n  # bytes live at each compute position whatever the placement
        self.choice: list[dict[int, int]] = [{} for _ in range(n)]  # binary -> bytes live there
        earliest, latest, c = windows[rank]
        pos: dict[tuple, int] = {}
        for i, p in enumerate(comp):
            pos.setdefault(_key(p), i)

        def release(s: int, m: int, at: int) -> int:
            return next((pos[(ct, s, m)] for ct in (W, B, I) if (ct, s, m) in pos), at)

        last = topo.num_stages - 1
        for i, p in enumerate(comp):
            ct, s, m = p.computation_type, p.stage_index, p.microbatch_index
            if ct == F and s > 0 and topo.rank(s - 1) != rank:
                self._receive(rank, i, release(s, m, i), size(BufferKey(RECV_ACT, s, m)), latency)
            if ct in (B, I) and s < last and topo.rank(s + 1) != rank:
                self._receive(rank, i, release(s, m, i), size(BufferKey(RECV_GRAD, s, m)), latency)
            if (ct == F and s < last) or (ct in (B, I) and s > 0):
                nxt = s + 1 if ct == F else s - 1
                nbytes = size(BufferKey(OUT_ACT if ct == F else OUT_GRAD, s, m))
                if topo.rank(nxt) == rank:  # same-rank hand-off: the next stage's input
                    for k in range(i, release(nxt, m, i) + 1):
                        self.fixed[k] += nbytes
                else:
                    self._send(rank, i, n, nbytes, latency)

    def _ge(self, coefs: dict[int, float], rhs: float) -> None:
        self.rows.append((coefs, rhs))

    def _binaries(self, k: int) -> list[int]:
        out = list(range(self.nvars, self.nvars + k))
        self.nvars += k
        self.binaries.extend(out)
        self.rows.append(({b: 1 for b in out}, 1.0))
        self.rows.append(({b: -1 for b in out}, -1.0))  # exactly one option
        return out

    def _receive(self, rank: int, c: int, end: int, nbytes: int, latency: float) -> None:
        """Received at ``c``, live to ``end``; posted before compute j <= c, which makes c start
        at least a latency after j - 1 ends. Earlier than the first j whose delay can never bind
        is no better, so the options stop there."""
        earliest, latest, cost = self.windows[rank]
        for k in range(c, end + 1):
            self.fixed[k] += nbytes
        options = []
        for j in range(c, -1, -1):
            options.append(j)
            if j == 0 or latest[j - 1] + cost[j - 1] + latency <= earliest[c] + _EPS:
                break
        for y, j in zip(self._binaries(len(options)), options):
            if j > 0:  # y -> start(c) >= start(j-1) + cost + latency
                self._ge({self.index[(rank, c)]: 1, self.index[(rank, j - 1)]: -1, y: -self.big_m},
                         cost[j - 1] + latency - self.big_m)
            for k in range(j, c):
                self.choice[k][y] = nbytes

    def _send(self, rank: int, i: int, n: int, nbytes: int, latency: float) -> None:
        """Produced at ``i`` and sent; its wait goes before compute j > i (or after the last),
        which makes j start at least a latency after i ends."""
        earliest, latest, cost = self.windows[rank]
        self.fixed[i] += nbytes
        options = []
        for j in range(i + 1, n + 1):
            options.append(j)
            if j == n or earliest[j] + _EPS >= latest[i] + cost[i] + latency:
                break
        for z, j in zip(self._binaries(len(options)), options):
            if j < n:
                self._ge({self.index[(rank, j)]: 1, self.index[(rank, i)]: -1, z: -self.big_m},
                         cost[i] + latency - self.big_m)
            for k in range(i + 1, j):
                self.choice[k][z] = nbytes

    def size_gcd(self) -> int:
        return math.gcd(*self.fixed, *(v for ch in self.choice for v in ch.values()))

    def fixed_peak(self) -> int:
        return max(self.fixed, default=0)

    def total_bytes(self) -> int:
        return max((f + sum(ch.values()) for f, ch in zip(self.fixed, self.choice)), default=0)

    def feasible(self, peak: int) -> bool:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp

        if self.fixed_peak() > peak:
            return False
        # bytes in units of the sizes' gcd: small integer rows (HiGHS' presolve mis-rounded
        # 2**20-byte coefficients against a right-hand side that was not a multiple of them)
        unit = self.size_gcd() or 1
        cap = peak // unit
        rows = list(self.rows)
        for f, ch in zip(self.fixed, self.choice):
            if ch and f + sum(ch.values()) > peak:
                rows.append(({b: -(v // unit) for b, v in ch.items()}, f // unit - cap))
        a = np.zeros((len(rows), self.nvars))
        for row, (coefs, _) in enumerate(rows):
            for col, v in coefs.items():
                a[row, col] += v
        lb, ub = np.zeros(self.nvars), np.ones(self.nvars)
        for (r, k), col in self.index.items():
            lb[col], ub[col] = self.windows[r][0][k], self.windows[r][1][k]
        integrality = np.zeros(self.nvars)
        integrality[self.binaries] = 1
        if np.any(lb > ub + _EPS):
            return False
        with _quiet_stdout():  # HiGHS' MIP solver prints stray debug lines (breaks --json)
            res = milp(np.zeros(self.nvars), integrality=integrality,
                       bounds=Bounds(lb, np.maximum(lb, ub)),
                       constraints=LinearConstraint(a, [rhs for _, rhs in rows], np.inf))
        if res.status not in (0, 2):
            raise RuntimeError(f"HiGHS could not decide the buffer program: {res.message}")
        return res.status == 0


@contextlib.contextmanager
def _quiet_stdout():
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
