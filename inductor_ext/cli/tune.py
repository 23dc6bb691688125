"""``inductor-ext tune build|show|export|import|merge|status|work``: offline autotune caches, and the
queue of ``autotune="background"`` (``status`` shows it, ``work`` runs its worker here).

Reading a cache (show, export, merge's inputs) never creates or changes a file: a missing or
unusable one is one line and exit 1. Every command that writes takes ``-o``: its folder must
exist (it is never created), an existing file is refused unless ``--update`` says to add to it,
and the output is written beside it and renamed into place, so a command that fails (exit 1,
one line) leaves no file behind.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any, Callable

from inductor_ext.cli.errors import CliError, UsageError


def add_parser(sub: Any) -> None:
    t = sub.add_parser("tune", help="offline autotune caches: build, show, export, import, merge; "
                                    "the background tuning queue: status, work")
    actions = t.add_subparsers(dest="action", required=True, metavar="ACTION")

    b = actions.add_parser("build", help="autotune every GEMM of a model and store the winners in a new cache")
    b.add_argument("--model", required=True, metavar="MODULE:FACTORY",
                   help="a function returning the model: module:attr (importable or a .py in this folder) "
                        "or path/to/file.py:attr")
    given = b.add_mutually_exclusive_group(required=True)
    given.add_argument("--inputs", metavar="MODULE:FN", help="a function returning the example inputs (a tuple)")
    given.add_argument("--shapes", nargs="+", metavar="SHAPE",
                       help="random inputs of these shapes instead, one compile each, e.g. 1x16x64 8x16x64")
    b.add_argument("--dtype", choices=("float32", "bfloat16", "float16", "fp32", "bf16", "fp16"),
                   help="dtype of the --shapes inputs (default: the dtype of the model's parameters)")
    b.add_argument("--preset", help="the preset to tune for (default: detected from the inputs' device)")
    b.add_argument("--interpret", action="store_true",
                   help="run a GPU preset's Triton templates in the interpreter on CPU (with --preset, e.g. hopper)")
    b.add_argument("--train", action="store_true", help="tune the backward GEMMs too")
    b.add_argument("-o", "--out", dest="output", required=True, metavar="DB", help="the new cache file to write")
    _update(b)

    s = actions.add_parser("show", help="the entries of a cache: problem, winner and its config, time vs ATen")
    s.add_argument("db", help="an autotune cache file")
    s.add_argument("--json", action="store_true", help="print the entries as JSON instead of a table")

    e = actions.add_parser("export", help="a cache as sorted JSON (diffable, reviewable)")
    e.add_argument("db", help="an autotune cache file")
    e.add_argument("-o", "--out", dest="output", required=True, metavar="JSON", help="the new JSON file to write")
    _update(e)

    i = actions.add_parser("import", help="merge an exported JSON file into a cache (newer timing wins)")
    i.add_argument("json_file", metavar="JSON", help="a file written by `tune export`")
    i.add_argument("-o", "--out", dest="output", required=True, metavar="DB", help="the new cache file to write")
    _update(i)

    m = actions.add_parser("merge", help="merge two caches into a new one (newer timing wins, conflicts reported)")
    m.add_argument("a", metavar="A", help="the first cache")
    m.add_argument("b", metavar="B", help="the second cache")
    m.add_argument("-o", "--out", dest="output", required=True, metavar="DB", help="the new cache file to write")
    _update(m)

    st = actions.add_parser("status", help="the background tuning queue (autotune='background'): each problem "
                                           "served untimed, and whether the worker has timed it")
    st.add_argument("--json", action="store_true", help="print the queue as JSON instead of a table")
    actions.add_parser("work", help="run the background tuning worker here, in the foreground, until the queue "
                                    "is empty (one worker per machine: exits at once where another runs)")
    t.set_defaults(func=run)


def _update(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--update", action="store_true",
                        help="-o names an existing file: add to it (newer timing wins) instead of refusing")


def run(args: argparse.Namespace) -> int:
    from inductor_ext.autotune.cache import AutotuneCacheWarning, CacheFileError
    from inductor_ext.autotune.cache_transfer import OutputError

    default = warnings.formatwarning

    def one_line(message: Any, category: type[Warning], *where: Any, **kw: Any) -> str:
        if issubclass(category, AutotuneCacheWarning):  # a cache's warning, not Python's warning text
            return f"inductor-ext tune {args.action}: warning: {message}\n"
        return default(message, category, *where, **kw)

    warnings.formatwarning = one_line
    try:
        return _ACTIONS[args.action](args)
    except OutputError as e:
        raise CliError(str(e)) from None
    except (CacheFileError, FileExistsError, ValueError) as e:
        raise CliError(str(e)) from None
    except OSError as e:  # an output folder that is missing or not writable
        raise CliError(f"{e.filename or ''}: {e.strerror or e}") from None
    finally:
        warnings.formatwarning = default


def _build(args: argparse.Namespace) -> int:
    from inductor_ext import presets, tune

    if args.preset not in (None, "auto", *presets.PRESETS):
        raise UsageError(f"--preset: unknown preset {args.preset!r}; valid presets: auto, {', '.join(presets.PRESETS)}")
    try:
        cache = tune.build(args.model, args.output, inputs_spec=args.inputs, shapes=args.shapes or (),
                           dtype=args.dtype, preset=args.preset, interpret=args.interpret, train=args.train,
                           update=args.update)
    except tune.BadValue as e:
        raise UsageError(str(e)) from None
    except (tune.NothingTuned, tune.ModelFailed) as e:
        raise CliError(str(e)) from None
    print(tune.format_entries(cache))
    return 0


def _show(args: argparse.Namespace) -> int:
    from inductor_ext import tune
    from inductor_ext.autotune.cache import AutotuneCache

    with AutotuneCache(args.db, mode="read") as cache:
        if args.json:
            print(json.dumps({"path": str(cache.path), "entries": tune.entry_rows(cache)}, indent=2))
        else:
            print(tune.format_entries(cache))
    return 0


def _status(args: argparse.Namespace) -> int:
    import collections
    import datetime

    from inductor_ext import tables
    from inductor_ext.autotune.tune_queue import BadQueue, TuneQueue

    queue = TuneQueue()
    try:
        rows = queue.rows()
    except BadQueue as e:
        raise CliError(str(e)) from None
    if args.json:
        print(json.dumps({"path": str(queue.path), "jobs": rows}, indent=2))
        return 0
    counts = collections.Counter(r["state"] for r in rows)
    print(f"{queue.path}: " + (", ".join(f"{n} {state}" for state, n in counts.items()) or "empty"))
    if rows:
        print(tables.render(("problem", "state", "queued", "note"),
                            [(r["problem"], r["state"], datetime.datetime.fromtimestamp(r["queued"]).strftime("%F %T"),
                              r["note"]) for r in rows]))
    return 0


def _work(args: argparse.Namespace) -> int:
    from inductor_ext import background_tuning
    from inductor_ext.autotune.tune_queue import BadQueue, TuneQueue

    queue = TuneQueue()
    if (why := queue.usable()) is not None:
        raise CliError(f"background tuning: {why}")
    try:
        done = background_tuning.run(queue)
    except BadQueue as e:
        raise CliError(str(e)) from None
    for problem, state, note in done:
        print(f"{problem}: {state} {note}".rstrip())
    print(f"{len(done)} problem(s) tuned" if done else "nothing to tune (or another worker runs)")
    return 0


def _export(args: argparse.Namespace) -> int:
    from inductor_ext.autotune import cache_transfer

    out = Path(args.output)
    cache_transfer.check_output(out, args.update, "JSON")
    sources = [(args.db, *cache_transfer.read_entries(Path(args.db)))]
    if args.update and out.exists():  # the JSON's entries first: the cache's newer ones win
        sources.insert(0, (args.output, *cache_transfer.read_json(out, _warner(args.output))))
    entries, _ = cache_transfer.merged_entries(sources)
    cache_transfer.write_json(entries, out)
    print(f"wrote {args.output}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from inductor_ext.autotune import cache_transfer

    source, out = Path(args.json_file), Path(args.output)
    if not source.is_file():
        raise CliError(f"{source}: no such file (give a JSON file written by `inductor-ext tune export`)")
    cache_transfer.check_output(out, args.update)
    sources = [(args.json_file, *cache_transfer.read_json(source, _warner(args.json_file)))]
    if args.update and out.exists():
        sources.insert(0, (args.output, *cache_transfer.read_entries(out)))
    entries, reports = cache_transfer.merged_entries(sources)
    cache_transfer.write_cache(entries, out)
    print(reports[-1])
    return 0


def _warner(path: str) -> Callable[[str, str], None]:
    """Reports an entry of ``path`` skipped by the validator: one line on stderr (``one_line``)."""
    from inductor_ext.autotune.cache import AutotuneCacheWarning

    def warn(kind: str, message: str) -> None:
        warnings.warn(f"inductor_ext autotune cache {path}: {message}", AutotuneCacheWarning, stacklevel=2)

    return warn


def _merge(args: argparse.Namespace) -> int:
    from inductor_ext import tune

    print(tune.merge(args.a, args.b, args.output, update=args.update))
    return 0


_ACTIONS = {"build": _build, "show": _show, "export": _export, "import": _import, "merge": _merge, "status": _status,
            "work": _work}

