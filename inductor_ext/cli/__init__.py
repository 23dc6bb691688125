"""The ``inductor-ext`` command: presets, dumps, tune, asm, comms and the demo."""

from __future__ import annotations

import argparse
import json
import os
import sys

from inductor_ext.cli import asm


def _presets(args: argparse.Namespace) -> int:
    from inductor_ext import presets

    if args.action == "show":
        if args.name == "auto":  # what auto picks on this machine
            import torch

            args.name = presets.preset_for_device(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
        if args.name not in presets.PRESETS:
            print(f"unknown preset {args.name!r}; valid presets: {', '.join(presets.PRESETS)}", file=sys.stderr)
            return 2
        print(json.dumps(presets.describe(args.name), indent=2, default=str))
        return 0
    width = max(map(len, presets.PRESETS))
    for name, data in presets.PRESETS.items():
        print(f"{name.ljust(width)}  {data['description']}")
    print(f"{'auto'.ljust(width)}  (default) the preset for the example inputs' device")
    return 0


def _dumps(args: argparse.Namespace) -> int:
    from inductor_ext import dumps

    try:
        index = dumps.read_index(args.path)
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    print(dumps.format_table(index, sort=args.sort, contains=args.filter))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from inductor_ext import demo

    return demo.main(args.device, args.dump_dir, args.interpret)


def _tune(args: argparse.Namespace) -> int:
    from inductor_ext import tune
    from inductor_ext.autotune.cache import AutotuneCache

    if args.action == "build":
        try:
            cache = tune.build(args.model, args.output, inputs_spec=args.inputs, shapes=args.shapes or (),
                               preset=args.preset, interpret=args.interpret, train=args.train)
        except (tune.NothingTuned, ValueError) as e:
            print(f"inductor-ext tune build: {e}", file=sys.stderr)
            return 1
        print(tune.format_entries(cache))
    elif args.action == "show":
        print(tune.format_entries(AutotuneCache(args.paths[0])))
    elif args.action == "merge":
        print(tune.merge(args.paths[0], args.paths[1], args.output))
    elif args.action == "export":
        AutotuneCache(args.paths[0]).export_json(args.output)
        print(f"wrote {args.output}")
    elif args.action == "import":
        print(AutotuneCache(args.output).import_json(args.paths[0]))
    return 0


def _comms(args: argparse.Namespace) -> int:
    from inductor_ext.cli import comms_report as report

    return report.main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inductor-ext", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("presets", help="list the hardware presets, or show one resolved")
    p.add_argument("action", nargs="?", choices=("list", "show"), default="list")
    p.add_argument("name", nargs="?", default="auto")
    p.set_defaults(func=_presets)

    d = sub.add_parser("dumps", help="read kernel dumps written with options={'dump_dir': PATH}")
    d.add_argument("action", choices=("show",))
    d.add_argument("path")
    d.add_argument("--sort", default="graph", choices=("graph", "kernel", "template", "reason", "speedup"))
    d.add_argument("--filter", help="only rows whose entry contains this text")
    d.set_defaults(func=_dumps)

    t = sub.add_parser("tune", help="offline autotune caches: build, show, merge, export, import")
    t.add_argument("action", choices=("build", "show", "merge", "export", "import"))
    t.add_argument("paths", nargs="*", help="show DB | merge A B | export DB | import JSON")
    t.add_argument("--model", help="build: MODULE:FACTORY returning the model")
    t.add_argument("--inputs", help="build: MODULE:FN returning the example inputs (a tuple)")
    t.add_argument("--shapes", nargs="+", help="build: input shapes instead of --inputs, e.g. 1x16x64 8x16x64")
    t.add_argument("--preset", help="build: preset (default: detected from the inputs)")
    t.add_argument("--interpret", action="store_true", help="build: Triton templates in the interpreter (CPU)")
    t.add_argument("--train", action="store_true", help="build: tune the backward GEMMs too")
    t.add_argument("--out", "-o", dest="output", help="build/merge/export/import: the file to write")
    t.set_defaults(func=_tune)

    c = sub.add_parser("comms", help="compile-time communication reports (cost-model figures)")
    c.add_argument("action", choices=("report",))
    c.add_argument("rest", nargs=argparse.REMAINDER, help="options of the report (see: comms report --help)")
    c.set_defaults(func=_comms)

    asm.add_parser(sub)

    m = sub.add_parser("demo", help="compile a small decoder block with backend='ext', check it and time it")
    m.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    m.add_argument("--dump-dir", help="write the kernel dumps here")
    m.add_argument("--interpret", action="store_true",
                   help="run ext's Triton templates on CPU in the Triton interpreter (slow; shows autotuning vs ATen)")
    m.set_defaults(func=_demo)
    return parser


_NEEDS = {"build": ("model", "output"), "show": ("paths",), "merge": ("paths", "output"),
          "export": ("paths", "output"), "import": ("paths", "output")}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "tune":
        missing = [n for n in _NEEDS[args.action] if not getattr(args, n)]
        if args.action == "merge" and len(args.paths) != 2:
            missing.append("two caches to merge")
        if missing:
            parser.error(f"tune {args.action} needs {', '.join(missing)}")
        if args.action == "build" and args.interpret and os.environ.get("TRITON_INTERPRET") != "1":
            _restart_with_interpreter()
    if args.command == "demo" and args.interpret and os.environ.get("TRITON_INTERPRET") != "1":
        _restart_with_interpreter()
    return args.func(args)


def _restart_with_interpreter() -> None:
    """Triton chooses the interpreter at import: run this command again with it on."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    os.execvpe(sys.executable, [sys.executable, "-m", "inductor_ext.cli", *sys.argv[1:]], env)


if __name__ == "__main__":
    sys.exit(main())
