"""Per-call GPU time of a function, replayed from a CUDA graph (so neither arm's Python launch
overhead counts), measured with CUDA events after warm-up. Shared by the GPU bench scripts."""

from __future__ import annotations

from typing import Any, Callable

import torch


def graph_samples(fn: Callable[[], Any], reps: int, calls_per_graph: int = 10) -> list[float]:
    """``reps`` samples of microseconds per call of ``fn``, each one replay of a graph holding
    ``calls_per_graph`` calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls_per_graph):
            fn()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1000 / calls_per_graph)
    return samples
