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
import pkgutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Sequence

import torch

from inductor_ext import tables
from inductor_ext.autotune import cache as cache_store
from inductor_ext.autotune import cache_transfer
from inductor_ext.autotune.cache import AutotuneCache, Entry
from inductor_ext.autotune.cache_entry import printable


class NothingTuned(RuntimeError):
    """A build that cached no decision: the message says why and what to do."""


class BadValue(ValueError):
    """An argument no build accepts (a dtype, a shape, a preset, a mix of flags): a usage
    mistake, where other ValueErrors here are a model or file that could not be used."""


class ModelFailed(RuntimeError):
    """The user's code raised (importing the model's file, its factory, its inputs function, or
    the model run eagerly on the inputs): one line naming what raised and the exception."""


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or "(no message)"
    return f"{type(e).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"


def _user_call(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``: the user's code, whose exception becomes one line naming ``what`` ran."""
    try:
        return fn(*args)
    except Exception as e:  # anything the user's code raises is theirs to read, in one line
        raise ModelFailed(f"{what} raised {_one_line(e)}") from e


def load_callable(spec: str) -> Callable[..., Any]:
    """``module:attr`` (importable, or a module in the working directory, as uvicorn and flask
    take it) or ``path/to/file.py:attr`` -> the attribute; ValueError with one line otherwise."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"{spec!r} is not MODULE:FUNCTION or path/to/file.py:FUNCTION "
                         "(e.g. inductor_ext.demo:tune_model, mymodel:make, models/llama.py:make)")
    if target.endswith(".py") or os.sep in target or "/" in target:
        module = _module_from_file(Path(target))
        if not hasattr(module, attr):
            raise ValueError(f"{target} has no {attr!r} (it defines: {_public_names(module)})")
        found = getattr(module, attr)
    else:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())  # console scripts do not put the working directory on the path
        try:
            found = pkgutil.resolve_name(spec)
        except ModuleNotFoundError as e:
            raise ValueError(f"{spec}: no module named {e.name!r} (from {os.getcwd()}; is it installed, "
                             "or a .py file in this folder?)") from None
        except SyntaxError as e:
            raise ModelFailed(f"{target}: {_syntax(e)}") from None
        except AttributeError:
            module = importlib.import_module(target)
            raise ValueError(f"{target} has no {attr!r} (it defines: {_public_names(module)})") from None
    if not callable(found):
        raise ValueError(f"{spec} is a {type(found).__name__}, not a function to call")
    return found


def _module_from_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise ValueError(f"no Python file {str(path)!r} (from {os.getcwd()})")
    path = path.resolve()
    sys.path.insert(0, str(path.parent))  # the file's own imports of its neighbours work
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise ModelFailed(f"{path}: {_syntax(e)}") from None
    except Exception as e:  # the file's own top-level code raised
        raise ModelFailed(f"importing {path} raised {_one_line(e)}") from e
    return module


def _syntax(e: SyntaxError) -> str:
    where = f"{Path(e.filename).name}:{e.lineno}" if e.filename else f"line {e.lineno}"
    return f"syntax error at {where}: {e.msg}"


def _public_names(module: ModuleType) -> str:
    return ", ".join(n for n in vars(module) if not n.startswith("_")) or "nothing public"


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise BadValue(f"shape {text!r} is not like 4x64x256") from None


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
          shapes: Sequence[str] = (), dtype: str | None = None, preset: str | None = None,
          interpret: bool = False, train: bool = False, progress: bool = True, update: bool = False) -> AutotuneCache:
    """Autotune every GEMM problem of the model for each input set; winners go into the new cache
    file ``out`` (with ``update``, added to the existing one). ``shapes`` make random inputs of
    ``dtype`` (default: the dtype of the model's parameters). Tuning writes a private scratch
    cache; ``out`` is written only at the end, whole (``cache_transfer.write_cache``), so a failed
    build leaves nothing behind. Returns ``out`` opened read-only."""
    from inductor_ext import progress as autotune_progress
    from inductor_ext.lowering import decision_record

    out = Path(out)
    cache_transfer.check_output(out, update)
    if dtype is not None and dtype not in DTYPES:
        raise BadValue(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if preset not in (None, "auto"):
        from inductor_ext import presets

        if preset not in presets.PRESETS:
            raise BadValue(f"unknown preset {preset!r}; valid presets: auto, {', '.join(presets.PRESETS)}")
    if interpret and preset in (None, "auto", "cpu"):
        raise BadValue("interpret mode runs a GPU preset's kernels on CPU tensors: give that preset, "
                         "e.g. --preset hopper (the cpu preset's own kernels need no interpreter)")
    if not inputs_spec and not shapes:
        raise BadValue("give --inputs MODULE:FN or --shapes, e.g. --shapes 1x16x64 8x16x64")
    make_model = load_callable(model_spec)
    make_inputs = load_callable(inputs_spec) if inputs_spec else None
    sizes = [parse_shape(s) for s in shapes]
    model = _user_call(model_spec, make_model)
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"{model_spec} returned a {type(model).__name__}, not a torch.nn.Module")
    if make_inputs is not None:
        input_sets = [_input_set(inputs_spec, _user_call(inputs_spec, make_inputs))]
    else:
        param = next((p for p in model.parameters() if p.is_floating_point()), None)
        device = param.device if param is not None else torch.device("cpu")
        # inputs of the parameters' dtype: fp32 inputs to a bf16 model would fail in its first GEMM
        kind = DTYPES[dtype] if dtype else (param.dtype if param is not None else torch.float32)
        input_sets = [(torch.randn(size, device=device, dtype=kind),) for size in sizes]
    for inputs in input_sets:  # eagerly first: a shape the model refuses is one line, not a compile's traceback
        _runs_eagerly(model, inputs, from_shapes=make_inputs is None)
    base: dict[str, Any] = {"interpret": interpret} if interpret else {}
    if preset:
        base["preset"] = preset

    with tempfile.TemporaryDirectory(prefix="inductor_ext_build_") as scratch, \
            cache_store.user_cache_at(Path(scratch) / "autotune.db"):  # 0700: tuning writes only here
        tuned = cache_store.AutotuneCache(Path(scratch) / "autotune.db")
        if update and out.exists():  # its entries are reused, not tuned again
            tuned.merge_from(out)
        # Pass 1: list the problems without benchmarking (cache-only: the scratch cache is only read).
        first = len(decision_record.decisions)
        for inputs in input_sets:
            _compile_and_run(model, inputs, {**base, "autotune": "cache-only"}, train)
        total = len(decision_record.decisions) - first
        # Pass 2: full autotuning, one progress step per decided problem (Inductor's stats kept off the line).
        first = len(decision_record.decisions)
        with autotune_progress.autotune_progress(total, desc="tune", enabled=progress):
            for inputs in input_sets:
                _compile_and_run(model, inputs, {**base, "autotune": "full"}, train)
        entries = tuned.entries()
        tuned.close()
        if not entries:
            raise NothingTuned(_why_nothing(decision_record.decisions[first:], base, out))
        cache_transfer.write_cache(entries, out)  # the file alone is the whole cache, ready to copy
    return AutotuneCache(out, mode="read")


def _input_set(spec: str, made: Any) -> tuple[Any, ...]:
    """What ``--inputs`` returned as the model's positional arguments: a tuple or list of them,
    or one tensor (the model's only input)."""
    if isinstance(made, torch.Tensor):
        return (made,)
    if isinstance(made, (tuple, list)):
        return tuple(made)
    raise ValueError(f"{spec} returned a {type(made).__name__}; return the model's inputs as a tuple "
                     "(or one tensor)")


def _runs_eagerly(model: torch.nn.Module, inputs: tuple[Any, ...], from_shapes: bool) -> None:
    shapes = ", ".join("x".join(map(str, t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__
                       for t in inputs)
    try:
        with torch.no_grad():
            model(*inputs)
    except Exception as e:  # the user's model refused these inputs: say which, in one line
        message = f"the model does not run on inputs of shape {shapes}: {_one_line(e)}"
        raise (BadValue(f"--shapes: {message}") if from_shapes else ModelFailed(message)) from e


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


def entry_row(e: Entry) -> dict[str, Any]:
    """One cache entry as the table and ``--json`` show it: the winner as its config."""
    speedup = e.speedup_vs_aten
    if e.winner == "aten":
        config = str(e.config.get("name") or "")
    else:
        config = " ".join(f"{k}={v}" for k, v in e.config.items())
    # every text from the file escaped: a control sequence in it never reaches the terminal
    return {"problem": printable(e.key.describe()), "device": printable(e.device_name or e.key.device_name),
            "winner": printable(e.winner), "config": printable(config), "winner_us": round(e.winner_time_us, 3),
            "aten_us": e.aten_time_us, "speedup": None if speedup is None else round(speedup, 3),
            "reason": printable(e.reason), "preset": printable(e.key.preset), "arch": printable(e.key.arch)}


def entry_rows(cache: AutotuneCache) -> list[dict[str, Any]]:
    return [entry_row(e) for e in sorted(cache.entries(), key=lambda e: (e.key.op, e.key.describe()))]


def format_entries(cache: AutotuneCache) -> str:
    """The cache as a table: problem, winner and its config, its time vs ATen, speedup."""
    rows = [(r["problem"], r["device"], r["winner"], r["config"], f"{r['winner_us']:.1f}",
             None if r["aten_us"] is None else f"{r['aten_us']:.1f}",
             None if r["speedup"] is None else f"{r['speedup']:.2f}x", r["reason"]) for r in entry_rows(cache)]
    table = tables.render(("problem", "device", "winner", "config", "winner us", "aten us", "speedup", "why"), rows,
                          right=("winner us", "aten us", "speedup"))
    return f"{table}\n{len(rows)} entries in {cache.path}"


def merge(a: str, b: str, out: str, update: bool = False) -> str:
    """Merge caches A and B into the new file OUT (with ``update``, into OUT's entries too; newer
    timing wins on the same key); returns the report. Nothing is written at OUT when it fails (a
    missing or unusable input: CacheFileError; an output that cannot be written: OutputError)."""
    target = Path(out)
    cache_transfer.check_output(target, update)
    sources = [(source, *cache_transfer.read_entries(Path(source))) for source in (a, b)]  # both read first
    if update and target.exists():
        sources.insert(0, (out, *cache_transfer.read_entries(target)))
    entries, reports = cache_transfer.merged_entries(sources)
    cache_transfer.write_cache(entries, target)
    return "\n".join(str(r) for r in reports[-2:])
