"""``inductor-ext asm``: a template family's kernel for a target this machine does not have,
compiled with the real toolchain, with the key instructions it found.

    inductor-ext asm --list
    inductor-ext asm triton.nvfp4_gemm --target sm_100a [--shape 128x256x512] [--dtype bfloat16]
                     [--config block_m=128,block_n=64] [--out DIR]
    inductor-ext asm triton.gemm --target sm_90a --shape 8x4096x4096 --all-configs

``--shape`` compiles the config autotuning would try first for that shape (the policies'
``autotune.policy.candidates``, less what the family's ``refuse_config`` refuses); ``--config``
changes fields of it; ``--all-configs`` compiles every offered config and prints one line each.
Triton kernels are compiled as a launch on contiguous tensors specialises them (the family's
``launch_values``: unit strides become constants). Each result says its registers and
local-memory spills (``runtime.register_use``: SASS ``STL``/``LDL``, amdgcn spill counts and
scratch instructions); the exit status is 1 when a key instruction is missing or registers spill.

Families compile through ``compile_asm(problem, config, target)`` when they define it (CuTeDSL,
FlyDSL, Metal; SYCL returns the SPIR-V its run-time compiler made), else as Triton source
(``runtime.triton_compile``). The key instructions are the family's own:
``key_instructions(problem, config, target)`` when its configs build on different instructions,
else ``KEY_INSTRUCTIONS[target]``; the target's MMA instruction (``targets``) when it names none
(a norm kernel has no matrix instruction). Metal has no compiler on Linux: its families count
their key instructions in the MSL and show the Metal-on-CPU executor's build of it.

``inductor.<kind>`` (``inductor.pointwise``, ``inductor.rms_norm``, ``inductor.softmax``,
``inductor.flex_forward``, ``inductor.flex_decode``) are no template family: they show the kernel
Inductor's own codegen writes under a preset's Inductor patches (gfx1250: its Tensor Data Mover
descriptors, ``targets.amd.INDUCTOR_TDM``), generated as on that device by
``testing.gfx1250_inductor``; ``--shape`` does not apply to them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from inductor_ext import tables, targets
from inductor_ext.runtime import asm_text
from inductor_ext.runtime.register_use import register_use
from inductor_ext.runtime.kernel_source import SUFFIXES
from inductor_ext.runtime.toolchain import ToolchainMissing
from inductor_ext.templates import registry
from inductor_ext.templates.family import Family, OpSpec, TensorSpec

DEFAULT_SHAPE = (128, 128, 256)


class AsmError(ValueError):
    """A bad family, target, shape or config: the message says what is allowed."""


def family_targets(family: Family) -> list[str]:
    """The device targets a family claims (not the interpreter's "cpu")."""
    return [t for t in family.targets if t in targets.all_targets() and not targets.has(t, targets.INTERPRETER)]


INDUCTOR_PREFIX = "inductor."


def inductor_kinds() -> dict[str, tuple[str, ...]]:
    """``inductor.<kind>`` -> the targets whose preset's Inductor codegen ``asm`` can show."""
    from inductor_ext.testing import gfx1250_inductor

    return {f"{INDUCTOR_PREFIX}{kind}": ("gfx1250",) for kind in gfx1250_inductor.KINDS}


def listing() -> str:
    rows = [(name, ", ".join(family_targets(family)) or "(none: CPU only)", family.choice_kind)
            for name, family in sorted(registry.families().items())]
    rows += [(name, ", ".join(claimed), "inductor codegen") for name, claimed in inductor_kinds().items()]
    return tables.render(("family", "targets", "kind"), [(name, claimed, f"[{kind}]") for name, claimed, kind in rows])


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(d) for d in text.lower().split("x"))
    except ValueError:
        raise AsmError(f"--shape {text!r} is not MxNxK, e.g. 128x256x512") from None
    if min(m, n, k) <= 0:
        raise AsmError(f"--shape {text!r}: M, N and K must be positive")
    return m, n, k


def _value(text: str, current: Any, key: str) -> Any:
    if isinstance(current, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise AsmError(f"--config {key}={text!r}: expected true or false")
        return text.lower() in ("true", "1")
    if isinstance(current, int):
        try:
            return int(text)
        except ValueError:
            raise AsmError(f"--config {key}={text!r}: expected an integer") from None
    return text


def apply_overrides(config: Any, text: str | None) -> Any:
    if not text:
        return config
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    changes = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in fields:
            raise AsmError(f"--config {item!r}: expected key=value with a key among {', '.join(fields)}")
        changes[key] = _value(value.strip(), fields[key], key)
    try:  # every value checked against the family's declaration, as a cache entry's would be
        return registry.from_dict(type(config), {**fields, **changes})
    except ValueError as e:  # allowed.InvalidField: the field, the value and what is allowed
        raise AsmError(f"--config: {e}") from None


def _mm_spec(m: int, n: int, k: int, dtype: str, device_type: str) -> OpSpec:
    return OpSpec("mm", (TensorSpec((m, k), (k, 1), dtype), TensorSpec((k, n), (n, 1), dtype)),
                  TensorSpec((m, n), (n, 1), dtype), {}, device_type)


def example_problem(family: Family, shape: tuple[int, int, int], dtype: str | None, target: str) -> Any:
    """The family's problem for an MxNxK GEMM: its own ``example_problem`` when it has one, else
    the plain mm of that shape."""
    m, n, k = shape
    if family.example_problem is not None:
        problem = family.example_problem(m, n, k, dtype)
    elif "mm" in family.ops:
        problem = family.problem_for(_mm_spec(m, n, k, dtype or "bfloat16", targets.get(target).device_type))
    else:
        raise AsmError(f"{family.name} has no example_problem(m, n, k, dtype) to build a problem from --shape")
    if isinstance(problem, str):
        raise AsmError(f"{family.name} cannot serve {m}x{n}x{k} {dtype or ''}: {problem}")
    return problem


def key_patterns(family: Family, target: str, asm: dict[str, str], problem: Any = None,
                 config: Any = None) -> dict[str, list[str]]:
    """Assembly stage -> the instruction patterns to look for: the family's own when it names them,
    else the target's MMA instruction (in SASS too, for NVIDIA)."""
    t = targets.get(target)
    found: dict[str, list[str]] = {}
    own = family.key_instructions(problem, config, target)  # [(stage, regex)]
    for stage, pattern in own:
        found.setdefault(stage, []).append(pattern)
    if not own and t.asm_key and t.mma_instruction:
        found.setdefault(t.asm_key, []).append(t.mma_instruction)
    if not own and "sass" in asm and t.sass_mma_instruction:
        found.setdefault("sass", []).append(t.sass_mma_instruction)
    return {stage: list(dict.fromkeys(p)) for stage, p in found.items() if stage in asm}


def launch_hints(family: Family, problem: Any, ks: Any) -> dict[str, int] | None:
    """The specialisation a launch of a Triton family's kernel gets (``family.launch_values``:
    the integer arguments for contiguous tensors; unit strides become constants), or None
    (the compiler's default: only pointers aligned) for a family that does not say."""
    values = family.launch_values
    if values is None:
        return None
    from inductor_ext.runtime.triton_compile import launch_hints as hints

    return hints(ks, {k: v for k, v in values(problem).items() if ks.signature.get(k, "").startswith("i")})


def build(family_name: str, target: str, shape: tuple[int, int, int] = DEFAULT_SHAPE, dtype: str | None = None,
          config_text: str | None = None) -> dict[str, Any]:
    """Render and compile one kernel; what ``inductor-ext asm`` prints."""
    if family_name.startswith(INDUCTOR_PREFIX):
        return build_inductor(family_name, target, dtype)
    family = _family(family_name, target)
    problem = example_problem(family, shape, dtype, target)
    offered = offered_configs(family, problem, target)
    if not offered:
        raise AsmError(f"{family_name} has no config for {problem} on {target}")
    config = apply_overrides(offered[0], config_text)
    check = family.refuse_config
    reason = check(problem, config, target) if check is not None else None
    if reason:
        raise AsmError(f"{family_name} cannot use config {config}: {reason}")
    return compile_config(family, problem, config, target)


def offered_configs(family: Family, problem: Any, target: str) -> list[Any]:
    """The configs autotuning benchmarks for ``problem`` (every policy's, ``effort="full"``), in
    the order it tries them, without those the family's ``refuse_config`` refuses."""
    from inductor_ext.autotune import policy

    check = family.refuse_config
    return [c.config for c in policy.candidates(family, problem, target, "full")
            if check is None or not check(problem, c.config, target)]


def build_all(family_name: str, target: str, shape: tuple[int, int, int] = DEFAULT_SHAPE,
              dtype: str | None = None) -> list[dict[str, Any]]:
    """``build`` for every config autotuning would try for the shape (``--all-configs``)."""
    family = _family(family_name, target)
    problem = example_problem(family, shape, dtype, target)
    offered = offered_configs(family, problem, target)
    if not offered:
        raise AsmError(f"{family_name} has no config for {problem} on {target}")
    return [compile_config(family, problem, config, target) for config in offered]


def _family(family_name: str, target: str) -> Family:
    families = registry.families()
    if family_name not in families:
        raise AsmError(f"unknown template family {family_name!r}; families: {', '.join(sorted(families))}")
    family = families[family_name]
    claimed = family_targets(family)
    if target not in claimed:
        raise AsmError(f"{family_name} does not claim target {target!r}; it claims: {', '.join(claimed) or 'none'}")
    return family


def compile_config(family: Family, problem: Any, config: Any, target: str) -> dict[str, Any]:
    """Render and compile one config; the summary ``inductor-ext asm`` prints."""
    family_name = family.name
    ks = family.render(problem, config, target)
    if family.compile_asm is not None:
        asm = family.compile_asm(problem, config, target)
    elif ks.language == "triton" and targets.get(target).triton is not None:
        from inductor_ext.runtime.triton_compile import compile_for_target

        asm = compile_for_target(ks, target, hints=launch_hints(family, problem, ks))
    else:
        raise AsmError(f"{family_name} has no compile_asm() and {ks.language} for {target} is not Triton")
    patterns = key_patterns(family, target, asm, problem, config)
    counts = {stage: asm_text.instruction_counts(asm, target, pats, key=stage) for stage, pats in patterns.items()}
    use = register_use(asm)
    return {"family": family_name, "target": target, "problem": dataclasses.asdict(problem),
            "config": dataclasses.asdict(config), "kernel": ks.name, "language": ks.language,
            "source": ks.source, "asm": {k: v for k, v in asm.items() if k != "metadata"},
            "key_instructions": counts,
            "registers": None if use is None else {**dataclasses.asdict(use), "spills": use.spills}}


def build_inductor(name: str, target: str, dtype: str | None = None) -> dict[str, Any]:
    """Inductor's kernel of kind ``inductor.<kind>`` for ``target``, generated with the preset's
    Inductor patches (``testing.gfx1250_inductor``), compiled, with its key instructions counted."""
    import torch

    from inductor_ext.runtime.triton_compile import compile_for_target
    from inductor_ext.testing import gfx1250_inductor as gi

    kinds = inductor_kinds()
    if name not in kinds:
        raise AsmError(f"unknown Inductor kernel kind {name!r}; kinds: {', '.join(kinds)}")
    if target not in kinds[name]:
        raise AsmError(f"{name} is shown for {', '.join(kinds[name])}, not {target!r}")
    kind = name.removeprefix(INDUCTOR_PREFIX)
    torch_dtype = getattr(torch, dtype or "bfloat16", None)
    if torch_dtype not in (torch.bfloat16, torch.float16, torch.float32) or (kind.startswith("flex") and
                                                                           torch_dtype == torch.float32):
        raise AsmError(f"{name}: --dtype {dtype!r} is not one its example takes: bfloat16, float16"
                       f"{'' if kind.startswith('flex') else ', float32'}")
    example = gi.example(kind, torch_dtype)
    graph = gi.generate(example.fn, *example.inputs, tdm=True)
    ks = gi.kernel_source(gi.main_kernel(graph, kind))
    asm = compile_for_target(ks, target)
    stage = targets.get(target).asm_key
    counts = {stage: asm_text.instruction_counts(asm, target, example.key_instructions(), key=stage)}
    return {"family": name, "target": target,
            "problem": {"kind": kind, "inputs": [[list(t.shape), str(t.dtype)] for t in example.inputs]},
            "config": {**ks.constexprs, **ks.launch}, "kernel": ks.name, "language": ks.language,
            "source": ks.source, "asm": {k: v for k, v in asm.items() if k != "metadata"},
            "key_instructions": counts}


def write(result: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [out / f"{result['kernel']}{SUFFIXES.get(result['language'], '.txt')}"]
    written[0].write_text(result["source"])
    for stage, text in result["asm"].items():
        if text == result["source"]:
            continue  # a stage that is the source itself (Metal's MSL): written once, above
        path = out / f"{result['kernel']}.{stage}"
        path.write_text(text)
        written.append(path)
    summary = out / f"{result['kernel']}.json"
    summary.write_text(json.dumps({k: v for k, v in result.items() if k not in ("source", "asm")}, indent=2))
    return written + [summary]


def format_result(result: dict[str, Any], show: tuple[str, ...] = ("source", "asm")) -> str:
    lines = [f"# {result['family']} for {result['target']}: kernel {result['kernel']}",
             f"# problem {result['problem']}", f"# config  {result['config']}"]
    if "source" in show:
        lines += ["", f"==== source ({result['language']}) ====", result["source"].rstrip()]
    if "asm" in show:
        for stage, text in result["asm"].items():
            # host_launch: a CuTeDSL kernel's launch config (the PDL attribute among it)
            if stage in ("ptx", "sass", "amdgcn", "isa", "executor", "spirv", "host_launch"):
                lines += ["", f"==== {stage} ====", text.rstrip()]
    lines += ["", "==== key instructions ===="]
    for stage, counts in result["key_instructions"].items():
        for pattern, n in counts.items():
            lines.append(f"{stage:7s} {pattern:55s} x{n}" + ("" if n else "   MISSING"))
    lines += ["", "==== registers ====", registers_line(result)]
    return "\n".join(lines)


def registers_line(result: dict[str, Any]) -> str:
    """Registers and local-memory (spill) instructions, from the SASS or the amdgcn metadata."""
    use = result.get("registers")
    if use is None:
        return "registers ? (no SASS or amdgcn to read them from)"
    regs = "?" if use["registers"] is None else use["registers"]
    line = f"registers {regs}  spill stores {use['spill_stores']}  spill loads {use['spill_loads']}"
    if use["reported_spills"]:
        line += f"  compiler-reported spills {use['reported_spills']}"
    if use["lane_spills"]:
        line += f"  SGPRs in VGPR lanes {use['lane_spills']} (no memory)"
    return line + ("   SPILLS" if use["spills"] else "")


def format_configs(results: list[dict[str, Any]]) -> str:
    """``--all-configs``: one line per config with its key instructions, registers and spills."""
    first = results[0]
    lines = [f"# {first['family']} for {first['target']}: {len(results)} configs, problem {first['problem']}"]
    for result in results:
        keys = ", ".join(f"{p} x{n}" + ("" if n else " MISSING") for counts in result["key_instructions"].values()
                         for p, n in counts.items())
        lines.append(f"{result['kernel']}\n    {keys}\n    {registers_line(result)}")
    return "\n".join(lines)


def _failed(result: dict[str, Any]) -> bool:
    """A key instruction missing, or registers spilling to local memory."""
    missing = any(not n for counts in result["key_instructions"].values() for n in counts.values())
    return missing or bool((result.get("registers") or {}).get("spills"))


def add_parser(sub: Any) -> None:
    p = sub.add_parser("asm", help="show a template family's kernel compiled for a target (PTX/SASS, amdgcn; "
                                     "MSL with the Metal-on-CPU executor's build)")
    p.add_argument("family", nargs="?", help="template family, e.g. triton.nvfp4_gemm, or an Inductor kernel kind, "
                                            "e.g. inductor.flex_forward (see --list)")
    p.add_argument("--list", action="store_true", help="print every family with the targets it claims")
    p.add_argument("--target", help="e.g. sm_90a, sm_100a, gfx950, gfx1250, mps")
    p.add_argument("--shape", default="x".join(map(str, DEFAULT_SHAPE)), help="MxNxK (default %(default)s)")
    p.add_argument("--dtype", help="operand dtype, e.g. bfloat16 (default: the family's)")
    p.add_argument("--config", help="config overrides, e.g. block_m=64,num_warps=4")
    p.add_argument("--out", help="write source, assembly and a JSON summary to this folder instead of printing them")
    p.add_argument("--all-configs", action="store_true",
                   help="compile every config autotuning would try for --shape and print, per config, "
                        "its key instructions, registers and spills")
    p.set_defaults(func=main)


# Triton 3.9 warns on every compile that TRITON_DEFAULT_FP_FUSION is unset; the command's output is
# the kernels (fusion stays Triton's default, on), so its notice is left out of it.
_TRITON_NOTICES = r"TRITON_DEFAULT_FP_FUSION is unset"


def main(args: argparse.Namespace) -> int:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_TRITON_NOTICES)
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    if args.list:
        print(listing())
        return 0
    if not args.family or not args.target:
        print("inductor-ext asm: give FAMILY --target T (or --list)", file=sys.stderr)
        return 2
    try:
        if args.all_configs:
            if args.config or args.out:
                raise AsmError("--all-configs compiles the offered configs: it takes no --config or --out")
            results = build_all(args.family, args.target, parse_shape(args.shape), args.dtype)
            print(format_configs(results))
            return 1 if any(map(_failed, results)) else 0
        result = build(args.family, args.target, parse_shape(args.shape), args.dtype, args.config)
    except AsmError as e:  # what the command line asked for: a usage mistake
        print(f"inductor-ext asm: {e}", file=sys.stderr)
        return 2
    except ToolchainMissing as e:  # a failure here, not of the command line (cli/errors.py)
        print(f"inductor-ext asm: {e}", file=sys.stderr)
        return 1
    if args.out:
        for path in write(result, Path(args.out)):
            print(path)
        print(format_result(result, show=()))
    else:
        print(format_result(result))
    return 1 if _failed(result) else 0
