"""Offline autotune builds: ``inductor-ext tune build|show|merge|export|import``.

A build compiles the model for each input shape with full autotuning and stores every winner
in the cache file; shipped with the model, that file lets ``autotune="cache-only"`` compiles
use the winners with no benchmarking at all.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Sequence

import torch

from inductor_ext.autotune.cache import AutotuneCache


class NothingTuned(RuntimeError):
    """A build that cached no decision: the message says why and what to do."""


def load_callable(spec: str) -> Callable[..., Any]:
    """``module:attr`` (importable, or a module in the working directory, as uvicorn and flask
    take it) or ``path/to/file.py:attr`` -> the attribute."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"{spec!r} is not MODULE:FUNCTION or path/to/file.py:FUNCTION "
                         "(e.g. inductor_ext.demo:tune_model, mymodel:make, models/llama.py:make)")
    if target.endswith(".py") or os.sep in target or "/" in target:
        module = _module_from_file(Path(target))
    else:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())  # console scripts do not put the working directory on the path
        module = importlib.import_module(target)
    if not hasattr(module, attr):
        raise ValueError(f"{target} has no {attr!r} (it defines: {', '.join(n for n in vars(module) if not n.startswith('_'))})")
    return getattr(module, attr)


def _module_from_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise ValueError(f"no Python file {str(path)!r} (from {os.getcwd()})")
    path = path.resolve()
    sys.path.insert(0, str(path.parent))  # the file's own imports of its neighbours work
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


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

    first = len(ext_choices.decisions)
    ext_choices.listeners.append(advance)
    try:
        for inputs in input_sets:
            _compile_and_run(model, inputs, {**base, "autotune": "full", "autotune_cache": str(out)}, train)
    finally:
        ext_choices.listeners.remove(advance)
        bar.close()
    cache = AutotuneCache(out)
    if len(cache) == 0:
        raise NothingTuned(_why_nothing(ext_choices.decisions[first:], base, out))
    cache.checkpoint()  # the file alone is the whole cache, ready to copy
    return cache


def _why_nothing(decisions: Sequence[Any], base: dict[str, Any], out: str | os.PathLike) -> str:
    """Why a build cached nothing, and what to do about it."""
    if not decisions:
        return (f"{out}: nothing cached: the model has no GEMM that ext's template families serve "
                "(no mm/addmm/nvfp4_gemm reached ext's choices)")
    reasons = collections.Counter(d.reason for d in decisions)
    lines = [f"{out}: nothing cached: none of the model's {len(decisions)} GEMM problems was benchmarked:"]
    lines += [f"  {n} x {reason}" for reason, n in reasons.most_common()]
    if any("interpret" in r for r in reasons) and not base.get("interpret"):
        lines.append("  on a machine without the preset's GPU, add --interpret (its Triton templates then run in "
                     "Triton's interpreter), or build on the GPU the cache is for")
    elif any("not target" in r or "not offered" in r for r in reasons):
        lines.append("  pick a --preset whose templates claim this device (inductor-ext presets)")
    return "\n".join(lines)


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
