"""``inductor-ext tune build|show|export|import|merge``: offline autotune caches.

Reading a cache (show, export, merge's inputs) never creates or changes a file: a missing or
unusable one is one line and exit 1. A command that fails leaves no output file behind.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from inductor_ext.cli.errors import CliError, UsageError


def add_parser(sub: Any) -> None:
    t = sub.add_parser("tune", help="offline autotune caches: build, show, export, import, merge")
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
    b.add_argument("-o", "--out", dest="output", required=True, metavar="DB", help="the cache file to write")

    s = actions.add_parser("show", help="the entries of a cache: problem, winner and its config, time vs ATen")
    s.add_argument("db", help="an autotune cache file")
    s.add_argument("--json", action="store_true", help="print the entries as JSON instead of a table")

    e = actions.add_parser("export", help="a cache as sorted JSON (diffable, reviewable)")
    e.add_argument("db", help="an autotune cache file")
    e.add_argument("-o", "--out", dest="output", required=True, metavar="JSON", help="the JSON file to write")

    i = actions.add_parser("import", help="merge an exported JSON file into a cache (newer timing wins)")
    i.add_argument("json_file", metavar="JSON", help="a file written by `tune export`")
    i.add_argument("-o", "--out", dest="output", required=True, metavar="DB",
                   help="the cache to merge into (created if missing)")

    m = actions.add_parser("merge", help="merge two caches into a new one (newer timing wins, conflicts reported)")
    m.add_argument("a", metavar="A", help="the first cache")
    m.add_argument("b", metavar="B", help="the second cache")
    m.add_argument("-o", "--out", dest="output", required=True, metavar="DB", help="the new cache file to write")
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from inductor_ext.autotune.cache import AutotuneCacheWarning, CacheFileError

    default = warnings.formatwarning

    def one_line(message: Any, category: type[Warning], *where: Any, **kw: Any) -> str:
        if issubclass(category, AutotuneCacheWarning):  # a cache's warning, not Python's warning text
            return f"inductor-ext tune {args.action}: warning: {message}\n"
        return default(message, category, *where, **kw)

    warnings.formatwarning = one_line
    try:
        return _ACTIONS[args.action](args)
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
                           dtype=args.dtype, preset=args.preset, interpret=args.interpret, train=args.train)
    except tune.NothingTuned as e:
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


def _export(args: argparse.Namespace) -> int:
    from inductor_ext.autotune.cache import AutotuneCache

    folder = Path(args.output).parent
    if not folder.is_dir():
        raise CliError(f"{args.output}: no folder {str(folder)!r} to write it in")
    with AutotuneCache(args.db, mode="read") as cache:
        cache.export_json(args.output)
    print(f"wrote {args.output}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from inductor_ext.autotune.cache import AutotuneCache

    source = Path(args.json_file)
    if not source.is_file():
        raise CliError(f"{source}: no such file (give a JSON file written by `inductor-ext tune export`)")
    new = not Path(args.output).exists()
    try:
        with AutotuneCache(args.output) as cache:
            if cache.in_memory:
                raise CliError(f"{args.output}: not a usable autotune cache (see the warning above); "
                               "import into a new file")
            report = cache.import_json(source)
            cache.checkpoint()
    except BaseException:
        if new:  # a cache created for this import is not left behind
            for suffix in ("", "-wal", "-shm"):
                Path(f"{args.output}{suffix}").unlink(missing_ok=True)
        raise
    print(report)
    return 0


def _merge(args: argparse.Namespace) -> int:
    from inductor_ext import tune

    print(tune.merge(args.a, args.b, args.output))
    return 0


_ACTIONS = {"build": _build, "show": _show, "export": _export, "import": _import, "merge": _merge}

