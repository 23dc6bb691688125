"""The ``inductor-ext`` command: presets, dumps and the demo."""

from __future__ import annotations

import argparse
import json
import sys


def _presets(args: argparse.Namespace) -> int:
    from inductor_ext import presets

    if args.action == "show":
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
    d.add_argument("--sort", default="graph", choices=("graph", "kernel", "template"))
    d.add_argument("--filter", help="only rows whose entry contains this text")
    d.set_defaults(func=_dumps)

    m = sub.add_parser("demo", help="compile a small decoder block with backend='ext', check it and time it")
    m.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    m.add_argument("--dump-dir", help="write the kernel dumps here")
    m.add_argument("--interpret", action="store_true",
                   help="run ext's Triton templates on CPU in the Triton interpreter (slow; shows autotuning vs ATen)")
    m.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
