"""The worker of ``autotune="background"``: times queued GEMM and attention problems off the
critical path.

A compile with ``autotune="background"`` serves every decision untimed (the user's cache, decision
tables, the cost model, ATen's default: as ``"model"``) and queues the GEMM and attention problems
nothing tuned (``autotune/tune_queue.py``). One worker per machine (a file lock) takes them oldest
first, at the lowest CPU priority, with the threads the compile ran with: each problem is rebuilt
from its key (tensors of its sizes and strides, a frozen weight for an input that was a graph
constant, a mask that attends everywhere) and compiled with ``autotune="full"``, so ext itself
times it and writes the winner into the user's cache under the same key. The next process, or the
next compile of that graph, is served the tuned choice; a running compiled graph is never swapped.
A problem the worker cannot rebuild exactly (its compile decides another key) is marked failed
with what it decided instead.

    inductor-ext tune status        # the queue
    inductor-ext tune work          # run the worker here, in the foreground, until the queue is empty
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sys
from typing import Iterator

import torch

from inductor_ext.autotune.cache_entry import ProblemKey
from inductor_ext.autotune.tune_queue import GEMM_OPS, Job, TuneQueue

log = logging.getLogger("inductor_ext.autotune")

__all__ = ["rebuild", "run", "tune_one"]


@contextlib.contextmanager
def worker_lock(queue: TuneQueue) -> Iterator[bool]:
    """Whether this process is the machine's one worker (another holds the lock: False)."""
    with open(queue.path.with_name("background.lock"), "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run(queue: TuneQueue | None = None) -> list[tuple[str, str, str]]:
    """Time every queued problem, oldest first: (problem, state, note) for each. Nothing when
    another worker runs."""
    queue = queue or TuneQueue()
    if queue.usable() is not None:
        return []
    done = []
    with worker_lock(queue) as mine:
        if not mine:
            log.info("ext: another background tuning worker runs on this machine")
            return []
        queue.requeue_running()  # left by a worker that died
        while (taken := queue.take()) is not None:
            digest, job = taken
            try:
                state, note = tune_one(job)
            except Exception as e:  # one problem failing never stops the queue
                state, note = "failed", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            queue.finish(digest, state, note)
            done.append((job.key.describe(), state, note))
            log.info("ext: background tuning %s: %s %s", job.key.describe(), state, note)
    return done


def _dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[tuple[int, ...], list[int]] | None:
    """The contiguous base shape and the permutation that views it with ``strides`` (stride-0
    dims broadcast from size 1), or None for a layout that is no permuted dense tensor."""
    order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
    expected = 1
    for d in reversed(order):
        if strides[d] == 0 or shape[d] == 1:
            continue
        if strides[d] != expected:
            return None
        expected *= shape[d]
    base = tuple(1 if strides[d] == 0 else shape[d] for d in order)
    return base, [order.index(d) for d in range(len(shape))]


def _tensor(base: tuple[int, ...], dtype: str) -> torch.Tensor:
    """Values of ``dtype`` for an input of that shape: a bool mask attends everywhere."""
    if dtype == "bool":
        return torch.ones(base, dtype=torch.bool)
    return torch.randn(base, dtype=getattr(torch, dtype))


def _call(op: str, args: list[torch.Tensor]) -> torch.Tensor:
    """The key's op on its inputs: ATen's GEMM, or ext's attention op (q, k, v, mask|None) with
    SDPA's default scale (the scale decides no kernel: no key holds it)."""
    if op in GEMM_OPS:
        return getattr(torch, op)(*args)
    q, k, v, mask = (*args, None)[:4]
    scale = q.shape[-1] ** -0.5
    if op == "decode_attention":
        return torch.ops.inductor_ext.decode_attention(q, k, v, mask, scale)
    return torch.ops.inductor_ext.prefill_attention(q, k, v, mask, scale, is_causal=op == "prefill_attention_causal")


class _Problem(torch.nn.Module):
    """One call of the key's op over its inputs: constants as frozen buffers, the rest as inputs."""

    def __init__(self, job: Job, layouts: list[tuple[tuple[int, ...], list[int]]]) -> None:
        super().__init__()
        self.op, self.shapes, self.returned = job.key.op, job.key.shapes, job.key.returned
        self.layouts, self.constants = layouts, job.constants
        for i, ((base, _), const, dtype) in enumerate(zip(layouts, job.constants, job.key.dtypes)):
            if const:
                self.register_buffer(f"c{i}", _tensor(base, dtype))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        given = iter(inputs)
        args = []
        for i, ((_, perm), const) in enumerate(zip(self.layouts, self.constants)):
            base = getattr(self, f"c{i}") if const else next(given)
            args.append(base.permute(perm).expand(self.shapes[i]))
        out = _call(self.op, args)
        return out if self.returned else out + 1  # a consumer: the op's own output stays inside


def rebuild(job: Job) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]] | str:
    """The problem as a module and its inputs, or why it cannot be rebuilt."""
    key = job.key
    layouts = []
    for shape, strides in zip(key.shapes, key.strides):
        layout = _dense(shape, strides)
        if layout is None:
            return f"input layout {shape} strides {strides} is no permuted dense tensor"
        layouts.append(layout)
    if key.dynamic:
        return "dynamic shapes are tuned in the compile that meets them"
    module = _Problem(job, layouts).eval()
    inputs = tuple(_tensor(base, dtype) for (base, _), const, dtype in zip(layouts, job.constants, key.dtypes)
                   if not const)
    return module, inputs


def tune_one(job: Job) -> tuple[str, str]:
    """Time ``job``'s problem with ``autotune="full"``; ("done" | "failed", what happened)."""
    from inductor_ext.lowering import decision_record

    made = rebuild(job)
    if isinstance(made, str):
        return "failed", made
    module, inputs = made
    threads = torch.get_num_threads()
    torch.set_num_threads(job.threads)
    first = len(decision_record.decisions)
    try:
        torch._dynamo.reset()
        compiled = torch.compile(module, backend="ext", options={**job.options, "autotune": "full"}, dynamic=False)
        with torch.no_grad():
            compiled(*inputs)
    finally:
        torch.set_num_threads(threads)
    decided = decision_record.decisions[first:]
    for d in decided:
        if d.key == job.key:
            return "done", f"{d.winner} ({d.reason})"
        if d.cached_under == job.key:
            return "done", "already in the cache"
    seen = "; ".join(_describe(d.key or d.cached_under) for d in decided) or "nothing"
    return "failed", f"rebuilt, but the worker's compile decided {seen}, not this problem"


def _describe(key: ProblemKey | None) -> str:
    return "an untimed problem" if key is None else key.describe()


def main(argv: list[str] | None = None) -> int:
    """The detached worker a compile starts: lowest priority, then ``run``."""
    with contextlib.suppress(OSError):
        os.nice(19)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
