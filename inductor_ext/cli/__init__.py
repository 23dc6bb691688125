"""The ``inductor-ext`` command: presets, dumps, tune, asm, comms, doctor and the demo.

Exit codes: 0 success, 1 a failure (a missing or unusable file, a model that cannot be loaded,
a device that is not here), 2 a usage mistake (an unknown command, flag or value). A user's
mistake ends in one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
from typing import Any, Callable

from inductor_ext.cli import asm
from inductor_ext.cli.errors import CliError, UsageError

__all__ = ["CliError", "UsageError", "build_parser", "main"]


def _presets(args: argparse.Namespace) -> int:
    from inductor_ext import presets, tables

    if getattr(args, "action", None) == "show":
        name = args.name
        if name == "auto":  # what auto picks on this machine's accelerator, of any device type
            name, _ = presets.machine_preset()
        if name not in presets.PRESETS:
            raise UsageError(f"unknown preset {name!r}; valid presets: auto, {', '.join(presets.PRESETS)}")
        print(json.dumps(presets.describe(name), indent=2, default=str))
        return 0
    rows = [(name, data["description"]) for name, data in presets.PRESETS.items()]
    rows.append(("auto", "(default) the preset for the example inputs' device"))
    if args.json:
        print(json.dumps(dict(rows), indent=2))
    else:
        print(tables.render(("preset", "description"), rows))
    return 0


def _dumps(args: argparse.Namespace) -> int:
    from inductor_ext import dumps

    try:
        index = dumps.read_index(args.path)
    except (FileNotFoundError, ValueError) as e:
        raise CliError(str(e)) from None
    if args.json:
        print(json.dumps(dumps.select(index, sort=args.sort, contains=args.filter), indent=2, default=str))
    else:
        print(dumps.format_table(index, sort=args.sort, contains=args.filter))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from inductor_ext import demo

    _check_device(args.device)
    if not args.json:
        return demo.main(args.device, args.dump_dir, args.interpret)
    result = demo.run(args.device, args.dump_dir, args.interpret, out=lambda line: print(line, file=sys.stderr))
    result["timings"] = {arm: t.text() for arm, t in result["timings"].items()}
    print(json.dumps(result, indent=2, default=str))
    return 0 if result["ok"] else 1


def _check_device(device: str | None) -> None:
    """A device the demo was asked for must be here (torch would fail deep inside the compile)."""
    if device in (None, "cpu"):
        return
    import torch

    present = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available(),
               "xpu": hasattr(torch, "xpu") and torch.xpu.is_available()}
    if not present[device]:
        here = ", ".join(["cpu", *(d for d, ok in present.items() if ok)])
        raise CliError(f"no {device} device on this machine (devices here: {here}); "
                       "leave --device out to use the best one here")


def _comms(args: argparse.Namespace) -> int:
    return _comms_report(args.rest)


def _comms_report(argv: list[str]) -> int:
    """``comms report`` with its own parser (imported only when it runs: it loads torch and the
    passes); a usage mistake exits 2 with argparse's one line, as every other command."""
    from inductor_ext.cli import comms_report

    try:
        return comms_report.main(argv)
    except SystemExit as e:  # --help (0) and usage mistakes (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)


def _doctor(args: argparse.Namespace) -> int:
    from inductor_ext.cli import doctor

    return doctor.main(args)


def version() -> str:
    try:
        return importlib.metadata.version("inductor-ext")
    except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown (not installed)"


def _json_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON instead of a table")


def build_parser() -> argparse.ArgumentParser:
    from inductor_ext.cli import tune

    parser = argparse.ArgumentParser(prog="inductor-ext", description=__doc__.split("\n")[0],
                                     epilog="exit codes: 0 success, 1 failure, 2 usage mistake")
    parser.add_argument("--version", action="version", version=f"inductor-ext {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("presets", help="list the hardware presets, or show one resolved")
    _json_flag(p, "the list")
    p.set_defaults(func=_presets, action="list")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="every preset with its description (the default)")
    listing.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                         help="print the list as JSON instead of a table")
    show = actions.add_parser("show", help="one preset resolved, with the Inductor patches it implies (JSON)")
    show.add_argument("name", nargs="?", default="auto",
                      help="a preset name (see `inductor-ext presets`), or auto: the one this machine gets")
    show.add_argument("--json", action="store_true", help="print it as JSON (what show prints in any case)")

    d = sub.add_parser("dumps", help="read kernel dumps written with options={'dump_dir': PATH}")
    d_actions = d.add_subparsers(dest="action", required=True, metavar="ACTION")
    d_show = d_actions.add_parser("show", help="every kernel of a dump: template, winner, module, source")
    d_show.add_argument("path", help="the dump_dir a compile wrote (it holds index.json)")
    d_show.add_argument("--sort", default="graph", choices=("graph", "kernel", "template", "reason", "speedup"),
                        help="row order (default %(default)s)")
    d_show.add_argument("--filter", metavar="TEXT", help="only rows whose entry contains this text")
    _json_flag(d_show, "the selected index entries")
    d.set_defaults(func=_dumps)

    tune.add_parser(sub)

    c = sub.add_parser("comms", help="compile-time communication reports (cost-model figures)")
    c_actions = c.add_subparsers(dest="action", required=True, metavar="ACTION")
    # its own parser reads the rest (imported only when it runs: it loads torch and the passes)
    report = c_actions.add_parser("report", add_help=False,
                                  help="ext's fsdp_overlap against Inductor's own passes, per arm")
    report.add_argument("rest", nargs=argparse.REMAINDER,
                        help="options of the report (see: inductor-ext comms report --help)")
    c.set_defaults(func=_comms)

    asm.add_parser(sub)

    doc = sub.add_parser("doctor", help="the toolchains and executors found here, and what each preset can do")
    _json_flag(doc, "the findings")
    doc.set_defaults(func=_doctor)

    m = sub.add_parser("demo", help="compile a small decoder block with backend='ext', check it and time it")
    m.add_argument("--device", choices=("cpu", "cuda", "mps", "xpu"),
                   help="where to run it (default: cuda when available, else cpu)")
    m.add_argument("--dump-dir", metavar="DIR", help="write the kernel dumps here (default: a new temporary folder)")
    m.add_argument("--interpret", action="store_true",
                   help="run the hopper preset's Triton templates on CPU in the Triton interpreter (slow)")
    m.add_argument("--json", action="store_true",
                   help="print the results as JSON (the report goes to stderr)")
    m.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    if given[:2] == ["comms", "report"]:  # its own parser reads every option (argparse.REMAINDER cannot)
        return _comms_report(given[2:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version (0) and usage mistakes (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    if getattr(args, "interpret", False) and os.environ.get("TRITON_INTERPRET") != "1" and argv is None:
        _restart_with_interpreter()
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"inductor-ext {_command(args)}: error: {e}", file=sys.stderr)
        return 2
    except CliError as e:
        print(f"inductor-ext {_command(args)}: {e}", file=sys.stderr)
        return 1


def _command(args: Any) -> str:
    return " ".join(str(p) for p in (args.command, getattr(args, "action", None)) if p)


def _restart_with_interpreter() -> None:
    """Triton chooses the interpreter at import: run this command again with it on."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    os.execvpe(sys.executable, [sys.executable, "-m", "inductor_ext", *sys.argv[1:]], env)


if __name__ == "__main__":
    sys.exit(main())
