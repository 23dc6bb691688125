"""Offline autotune builds: ``inductor-ext tune build|show|merge|export|import``.

A build compiles the model for each input shape with full autotuning and stores every winner
in the cache file; shipped with the model, that file lets ``autotune="cache-only"`` compiles
use the winners with no benchmarking at all.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from inductor_ext.autotune.cache import AutotuneCache


def load_callable(spec: str) -> Callable[..., Any]:
    """``package.module:function`` -> the function."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not attr:
        raise ValueError(f"{spec!r} is not MODULE:FUNCTION (e.g. inductor_ext.demo:tune_model)")
    return getattr(importlib.import_module(module_name), attr)


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"shape {text!r} is not like 4x64x256") from None


@contextlib.contextmanager
def fresh_inductor_caches() -> Iterator[None]:
    """Cold Inductor caches: a cache hit would skip lowering, and with it the autotuning."""
    with tempfile.TemporaryDirectory(prefix="inductor_ext_tune_") as tmp, \
            torch._inductor.config.patch(fx_graph_cache=False, autotune_local_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tmp
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = old


def _compile_and_run(model: torch.nn.Module, inputs: Sequence[Any], options: dict[str, Any], train: bool) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="ext", options=options)
    with fresh_inductor_caches(), (contextlib.nullcontext() if train else torch.no_grad()):
        out = compiled(*inputs)
        if train:
            (out if isinstance(out, torch.Tensor) else out[0]).float().sum().backward()


def build(model_spec: str, out: str | os.PathLike, *, inputs_spec: str | None = None,
          shapes: Sequence[str] = (), preset: str | None = None, interpret: bool = False,
          train: bool = False, progress: bool = True) -> AutotuneCache:
    """Autotune every GEMM problem of the model for each input set; winners go into ``out``."""
    from tqdm import tqdm

    from inductor_ext.lowering import ext_choices

    if interpret and preset in (None, "auto", "cpu"):
        raise ValueError("interpret mode runs a GPU preset's kernels on CPU tensors: give that preset, "
                         "e.g. --preset hopper (the cpu preset's own kernels need no interpreter)")
    model = load_callable(model_spec)()
    if inputs_spec:
        input_sets = [tuple(load_callable(inputs_spec)())]
    elif shapes:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        input_sets = [(torch.randn(parse_shape(s), device=device),) for s in shapes]
    else:
        raise ValueError("give --inputs MODULE:FN or --shapes, e.g. --shapes 1x16x64 8x16x64")
    base: dict[str, Any] = {"interpret": interpret} if interpret else {}
    if preset:
        base["preset"] = preset

    # Pass 1: list the problems without benchmarking (cache-only against an empty cache).
    with tempfile.TemporaryDirectory() as tmp:
        first = len(ext_choices.decisions)
        for inputs in input_sets:
            _compile_and_run(model, inputs, {**base, "autotune": "cache-only",
                                             "autotune_cache": os.path.join(tmp, "empty.db")}, train)
        total = len(ext_choices.decisions) - first
    # Pass 2: full autotuning, one progress step per decided problem.
    bar = tqdm(total=total, unit="problem", desc="tune", disable=not progress)

    def advance(decision: Any) -> None:
        bar.set_postfix_str(f"{decision.op} {decision.problem.get('shapes')}")
        bar.update(1)

    ext_choices.listeners.append(advance)
    try:
        for inputs in input_sets:
            _compile_and_run(model, inputs, {**base, "autotune": "full", "autotune_cache": str(out)}, train)
    finally:
        ext_choices.listeners.remove(advance)
        bar.close()
    return AutotuneCache(out)


def format_entries(cache: AutotuneCache) -> str:
    """The cache as a table: problem, winner, its time vs ATen, speedup."""
    rows = [("problem", "device", "winner", "config", "winner us", "aten us", "speedup", "why")]
    for e in sorted(cache.entries(), key=lambda e: (e.key.op, e.key.describe())):
        speedup = e.speedup_vs_aten
        config = e.config.get("name") if e.winner == "aten" else ",".join(f"{k}={v}" for k, v in e.config.items())
        rows.append((e.key.describe(), e.device_name or e.key.device_name, e.winner, str(config),
                     f"{e.winner_time_us:.1f}", "-" if e.aten_time_us is None else f"{e.aten_time_us:.1f}",
                     "-" if speedup is None else f"{speedup:.2f}x", e.reason))
    widths = [min(60, max(len(r[i]) for r in rows)) for i in range(len(rows[0]))]
    lines = ["  ".join(c[:w].ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append(f"{len(rows) - 1} entries in {cache.path}")
    return "\n".join(lines)


def merge(a: str, b: str, out: str) -> str:
    """Merge caches A and B into OUT (newer timing wins on the same key); returns the report."""
    if Path(out).exists():
        raise FileExistsError(f"{out} exists; merge writes a new file")
    merged = AutotuneCache(out)
    reports = [merged.merge_from(a), merged.merge_from(b)]
    return "\n".join(str(r) for r in reports)
