"""Tier I gates: compile a rendered Triton kernel for a GPU target on a machine without one,
and assert on the instructions it emits.

    asm = compile_for_target(ks, "sm_100a")          # {"ttir":..., "ttgir":..., "ptx":..., "sass":...}
    assert_has_instructions(asm, "sm_100a", [MMA_INSTRUCTION["sm_100a"]])

Triton compiles for a ``GPUTarget`` without a driver; it ships what the last steps need
(``ptxas`` and ``cuobjdump`` under ``triton/backends/nvidia/bin``, an in-process LLD and the
ocml/ockl bitcode for AMD), so the binary (cubin / hsaco) is built too, which proves the
assembler accepted the code. A target that cannot be compiled here raises
:class:`IsaCompileError`; a gate never passes because something was missing.

Results are cached on disk (gzip JSON, one file per kernel x target), keyed by the kernel
source, its signature/constexprs/options, the target and the Triton version, under
``$INDUCTOR_EXT_ISA_CACHE`` (default ``$XDG_CACHE_HOME/inductor_ext/isa``) or the ``cache``
directory a caller passes, and memoised in-process.

Triton decides between its interpreter and its compiler when ``triton.language`` is first
imported. In a process that imported it with ``TRITON_INTERPRET=1`` (tier C tests), compiles run
in a subprocess without that variable; elsewhere they run in-process.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.util
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping

import triton
from triton.backends.compiler import GPUTarget

from inductor_ext.templates.base import KernelSource
from inductor_ext.templates.loader import kernel_dir
from inductor_ext.templates import asm_cache

__all__ = [
    "TARGETS", "MMA_INSTRUCTION", "SASS_MMA_INSTRUCTION", "ASM_KEY", "IsaCompileError",
    "compile_for_target", "compile_many", "launch_hints", "gpu_target", "cache_dir",
    "assert_has_instructions", "assert_uses_mma", "instruction_counts", "triton_interpreter_active",
]

# target name -> (backend, arch, warp size) for triton.backends.compiler.GPUTarget
TARGETS: dict[str, tuple[str, int | str, int]] = {
    "sm_90a": ("cuda", 90, 32),
    "sm_100a": ("cuda", 100, 32),
    "gfx950": ("hip", "gfx950", 64),
    "gfx1250": ("hip", "gfx1250", 32),
}

# The matrix instruction each target's tensor cores are driven by (a regular expression, searched
# in ASM_KEY[target] with comments stripped). Spellings seen with Triton 3.9:
#   sm_90a   wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 (.f16.f16, k8 .tf32.tf32)
#   sm_100a  tcgen05.mma.cta_group::1.kind::f16 (bf16 and fp16), tcgen05.mma.cta_group::1.kind::tf32
#   gfx950   v_mfma_f32_32x32x16_bf16, v_mfma_f32_32x32x16_f16, v_mfma_f32_32x32x2_f32
#   gfx1250  v_wmma_f32_16x16x32_bf16, v_wmma_f32_16x16x32_f16, v_wmma_f32_16x16x4_f32
MMA_INSTRUCTION: dict[str, str] = {
    "sm_90a": r"wgmma\.mma_async",
    "sm_100a": r"tcgen05\.mma",
    "gfx950": r"v_mfma",
    "gfx1250": r"v_wmma",
}

# The same in the machine code ptxas produced (asm["sass"], cuobjdump): HGMMA.64x128x16.F32.BF16,
# HGMMA.64x128x16.F32 (fp16), HGMMA.64x128x8.F32.TF32 on sm_90a; UTCHMMA on sm_100a (all three kinds).
SASS_MMA_INSTRUCTION: dict[str, str] = {"sm_90a": r"\bHGMMA\.", "sm_100a": r"\bUTC\w*MMA\b"}

# Which text of the asm dict holds the target's final assembly.
ASM_KEY: dict[str, str] = {"sm_90a": "ptx", "sm_100a": "ptx", "gfx950": "amdgcn", "gfx1250": "amdgcn"}

_COMMENT = {"ptx": "//", "amdgcn": ";", "sass": None}
_CACHE_FORMAT = 1  # bump when what is stored changes
_memo: dict[str, dict[str, str]] = {}
_lock = threading.Lock()


class IsaCompileError(RuntimeError):
    """A kernel could not be compiled for a target on this machine (tool missing, compiler error)."""


def gpu_target(target: str) -> GPUTarget:
    if target not in TARGETS:
        raise ValueError(f"unknown ISA target {target!r}; known: {', '.join(TARGETS)}")
    return GPUTarget(*TARGETS[target])


cache_dir = asm_cache.cache_dir


# ----------------------------------------------------------------------------------- compile


def compile_for_target(ks: KernelSource, target: str, *, hints: Mapping[str, int] | None = None,
                       options: Mapping[str, Any] | None = None,
                       cache: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Compile ``ks`` for ``target`` ("sm_90a", "sm_100a", "gfx950", "gfx1250") and return its texts.

    The result maps stage name to text: always ``ttir``, ``ttgir``, ``llir`` and the assembly
    (``ptx`` for NVIDIA, ``amdgcn`` for AMD); ``sass`` (cuobjdump of the cubin) on NVIDIA;
    ``metadata`` (JSON: shared memory, num_warps, ...); ``source`` (Triton's input IR).
    A cubin or hsaco is always built (that is how the assembler is checked) but not returned.

    ``hints`` specialise runtime arguments the way a launch would (Triton's AOT convention):
    ``16`` = divisible by 16, ``1`` = equal to 1 (becomes a constant); see :func:`launch_hints`.
    Default: every pointer argument divisible by 16 (what torch allocations give).
    ``options`` adds to / overrides ``ks.launch`` (num_warps, num_stages, ...).
    Raises :class:`IsaCompileError` when the target cannot be compiled here.
    """
    tgt = gpu_target(target)
    opts = {**ks.launch, **(options or {})}
    if hints is None:
        hints = {n: 16 for n, t in ks.signature.items() if t.startswith("*")}
    hints = dict(sorted(hints.items()))
    _check_hints(ks, hints)
    key = _cache_key(ks, target, opts, hints)
    with _lock:
        if key in _memo:
            return dict(_memo[key])
    path = cache_dir(cache) / f"{ks.name[:80]}-{target}-{key[:24]}.json.gz"
    asm = _read_cache(path, key)
    if asm is None:
        _check_toolchain(target, tgt)
        if triton_interpreter_active():
            asm = _compile_in_subprocess(ks, target, opts, hints)
        else:
            asm = _compile(ks, target, tgt, opts, hints)
        _write_cache(path, key, asm)
    with _lock:
        _memo[key] = asm
    return dict(asm)


def compile_many(jobs: Iterable[tuple[Any, ...]], *, max_workers: int | None = None,
                 **kwargs: Any) -> list[dict[str, str]]:
    """``compile_for_target`` over jobs ``(ks, target)`` or ``(ks, target, {keyword arguments})``
    (``kwargs`` apply to all), in parallel when compiles run in subprocesses (this process runs
    Triton's interpreter), else one after another. Raises the first job's error."""
    calls = [(job[0], job[1], {**kwargs, **(job[2] if len(job) > 2 else {})}) for job in jobs]
    if not triton_interpreter_active() or len(calls) < 2:
        return [compile_for_target(ks, target, **kw) for ks, target, kw in calls]
    from concurrent.futures import ThreadPoolExecutor

    workers = max_workers or max(1, min(len(calls), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda call: compile_for_target(call[0], call[1], **call[2]), calls))


def launch_hints(ks: KernelSource, values: Mapping[str, int], *, aligned_pointers: bool = True) -> dict[str, int]:
    """The hints a launch with these integer argument ``values`` would specialise on:
    1 for a value equal to 1, 16 for a multiple of 16 (and for pointers when ``aligned_pointers``)."""
    hints = {n: 16 for n, t in ks.signature.items() if t.startswith("*")} if aligned_pointers else {}
    for name, value in values.items():
        if ks.signature.get(name, "").startswith("*") or ks.signature.get(name) == "constexpr":
            raise ValueError(f"{name} of {ks.name} is not an integer runtime argument")
        if value == 1:
            hints[name] = 1
        elif value % 16 == 0:
            hints[name] = 16
    return hints


def _check_hints(ks: KernelSource, hints: Mapping[str, int]) -> None:
    for name, hint in hints.items():
        kind = ks.signature.get(name)
        if kind is None or kind == "constexpr":
            raise ValueError(f"hint for {name!r}: {ks.name} has no such runtime argument")
        if hint not in (1, 16) or (hint == 1 and kind.startswith("*")):
            raise ValueError(f"hint {name}={hint}: use 16 (divisible by 16) or 1 (an integer equal to 1)")


def _cache_key(ks: KernelSource, target: str, opts: Mapping[str, Any], hints: Mapping[str, int]) -> str:
    payload = json.dumps({
        "format": _CACHE_FORMAT,
        "source": ks.source,
        "name": ks.name,
        "signature": ks.signature,
        "constexprs": {k: repr(v) for k, v in ks.constexprs.items()},
        "options": {k: repr(v) for k, v in opts.items()},
        "hints": hints,
        "target": target,
        "triton": [triton.__version__, os.path.dirname(triton.__file__)],
        "env": _compile_env(),
    }, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _compile_env() -> dict[str, str]:
    """Environment variables that change what Triton compiles (part of the cache key)."""
    from triton._C.libtriton import get_cache_invalidating_env_vars

    env = dict(get_cache_invalidating_env_vars())
    for name in _PYTHON_SIDE_ENV:
        if name in os.environ:
            env.setdefault(name, os.environ[name])
    return dict(sorted(env.items()))


# Read by Triton's Python side (knobs) while compiling; Triton's C++ list covers the rest.
_PYTHON_SIDE_ENV = (
    "AMDGCN_USE_BUFFER_OPS", "AMDGCN_USE_BUFFER_ATOMICS", "TRITON_DEFAULT_FP_FUSION",
    "TRITON_FORCE_DISABLE_FP_FUSION", "TRITON_F32_DEFAULT", "TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH",
)


_read_cache, _write_cache = asm_cache.read, asm_cache.write


def _load_jit_function(ks: KernelSource) -> Any:
    """The kernel as a compilable ``JITFunction``, even when ``TRITON_INTERPRET=1`` is set.

    ``@triton.jit`` picks interpreter or compiler when the module is executed, so the module is
    executed here with the interpreter off, under its own name (``loader``'s cached module may
    hold an interpreted function of the same source).
    """
    stem = f"{ks.name}_{ks.source_hash}"
    path = kernel_dir() / f"{stem}.py"
    if not path.exists() or path.read_text() != ks.source:
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(ks.source)
        os.replace(tmp, path)
    name = f"inductor_ext_isa_kernels.{stem}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        with triton.knobs.runtime.scope():
            triton.knobs.runtime.interpret = False
            spec.loader.exec_module(module)
        sys.modules[name] = module
    fn = getattr(module, ks.name)
    if not isinstance(fn, triton.runtime.JITFunction):
        raise IsaCompileError(f"{ks.name} in {path} is a {type(fn).__name__}, not a @triton.jit JITFunction")
    return fn


def _check_toolchain(target: str, tgt: GPUTarget) -> None:
    """Fail loudly, naming the tool, when a step Triton needs for ``target`` is missing."""
    try:
        if tgt.backend == "cuda":
            tool = triton.knobs.nvidia.ptxas_blackwell if tgt.arch >= 100 else triton.knobs.nvidia.ptxas
            if not tool or not getattr(tool, "path", None):
                raise RuntimeError("Cannot find ptxas")
        else:
            from triton._C.libtriton import amd

            if not hasattr(amd, "link_hsaco"):
                raise RuntimeError("this Triton build has no in-process LLD (amd.link_hsaco)")
            lib = Path(triton.__file__).parent / "backends" / "amd" / "lib"
            missing = [f for f in ("ocml.bc", "ockl.bc") if not (lib / f).is_file()]
            if missing:
                raise RuntimeError(f"missing AMD device bitcode {missing} in {lib}")
    except Exception as e:  # noqa: BLE001 - any failure here means "cannot compile"
        raise IsaCompileError(
            f"cannot compile for {target} on this machine with triton {triton.__version__}: {e}"
        ) from e


def _compile(ks: KernelSource, target: str, tgt: GPUTarget, opts: Mapping[str, Any],
             hints: Mapping[str, int]) -> dict[str, str]:
    fn = _load_jit_function(ks)
    names = list(ks.signature)
    signature, constexprs = dict(ks.signature), dict(ks.constexprs)
    for name, hint in hints.items():
        if hint == 1:  # what a launch does with an integer argument equal to 1
            signature[name], constexprs[name] = "constexpr", 1
    desc = {n: "D" for n, hint in hints.items() if hint == 16}
    if tgt.backend == "hip" and triton.knobs.amd.use_buffer_ops:
        # A launch on AMD marks every tensor under 2 GiB as 32-bit addressable (buffer loads).
        for n, kind in ks.signature.items():
            if kind.startswith("*"):
                desc[n] = desc.get(n, "") + "S"
    try:
        backend = triton.compiler.make_backend(tgt)
        attrs = {(names.index(n),): backend.parse_attr(d) for n, d in desc.items()}
        src = triton.compiler.ASTSource(fn, signature, constexprs, attrs)
        compiled = triton.compile(src, target=tgt, options=dict(opts))
    except Exception as e:  # noqa: BLE001 - re-raised with what was being compiled
        raise IsaCompileError(
            f"triton {triton.__version__} failed to compile {ks.name} ({ks.template}, config {ks.config}) "
            f"for {target} ({tgt}): {type(e).__name__}: {e}"
        ) from e
    asm = {k: v for k, v in compiled.asm.items() if isinstance(v, str)}
    binary = {"cuda": "cubin", "hip": "hsaco"}[tgt.backend]
    if not compiled.asm.get(binary):
        raise IsaCompileError(f"compiling {ks.name} for {target} produced no {binary}")
    if tgt.backend == "cuda":
        asm["sass"] = _sass(compiled.asm["cubin"], target)
    asm["metadata"] = json.dumps(_jsonable(compiled.metadata._asdict()), sort_keys=True, indent=1)
    return asm


def triton_interpreter_active() -> bool:
    """True when triton.language was imported with ``TRITON_INTERPRET=1``.

    Triton's own ``@jit`` helpers (``tl.cdiv``, ``tl.max``, ...) are then interpreter functions,
    which ``triton.compile`` cannot lower, and that cannot be undone in this process.
    """
    from triton.runtime.interpreter import InterpretedFunction

    return any(isinstance(v, InterpretedFunction) for v in vars(triton.language.standard).values())


def _compile_in_subprocess(ks: KernelSource, target: str, opts: Mapping[str, Any],
                           hints: Mapping[str, int]) -> dict[str, str]:
    """``_compile`` in a fresh interpreter without ``TRITON_INTERPRET`` (see above)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory(prefix="inductor_ext_isa_") as d:
        request, response = os.path.join(d, "request.pkl"), os.path.join(d, "response.json")
        with open(request, "wb") as f:
            pickle.dump({"ks": ks, "target": target, "options": dict(opts), "hints": dict(hints)}, f)
        proc = subprocess.run(
            [sys.executable, "-c", "from inductor_ext.testing.isa import _worker_main; _worker_main()",
             request, response],
            env=env, capture_output=True, text=True,
        )
        if proc.returncode != 0 or not os.path.exists(response):
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:])
            raise IsaCompileError(
                f"compiling {ks.name} for {target} in a subprocess (this process runs Triton's "
                f"interpreter) failed with exit code {proc.returncode}:\n{tail}")
        with open(response, encoding="utf-8") as f:
            result = json.load(f)
    if "error" in result:
        raise IsaCompileError(result["error"])
    return result["asm"]


def _worker_main() -> None:
    """Subprocess entry: compile the pickled request (argv[1]), write JSON to argv[2]."""
    with open(sys.argv[1], "rb") as f:
        req = pickle.load(f)
    try:
        asm = _compile(req["ks"], req["target"], gpu_target(req["target"]), req["options"], req["hints"])
        result: dict[str, Any] = {"asm": asm}
    except IsaCompileError as e:
        result = {"error": str(e)}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(result, f)


def _sass(cubin: bytes, target: str) -> str:
    try:
        tool = triton.knobs.nvidia.cuobjdump.path
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "kernel.cubin")
            with open(path, "wb") as f:
                f.write(cubin)
            return subprocess.run([tool, "-sass", path], check=True, capture_output=True, text=True).stdout
    except Exception as e:  # noqa: BLE001
        raise IsaCompileError(f"cannot disassemble the {target} cubin with cuobjdump: {e}") from e


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)


# ------------------------------------------------------------------------------------ assert


def _asm_text(asm: Mapping[str, str] | str, target: str, key: str | None) -> tuple[str, str]:
    """(stage name, text with comments removed) that the gates search."""
    if target not in ASM_KEY:
        raise ValueError(f"unknown ISA target {target!r}; known: {', '.join(ASM_KEY)}")
    if isinstance(asm, str):
        stage, text = key or ASM_KEY[target], asm
    else:
        stage = key or ASM_KEY[target]
        if stage not in asm:
            raise KeyError(f"no {stage!r} in the asm for {target}; it has {sorted(asm)}")
        text = asm[stage]
    marker = _COMMENT.get(stage)
    if marker:
        text = "\n".join(line.split(marker, 1)[0] for line in text.splitlines())
    return stage, text


_SASS_LINE = re.compile(r"^/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;")


def _instruction_lines(text: str, stage: str) -> list[str]:
    """Lines that hold an instruction: no labels, directives, metadata or SASS encodings."""
    if stage == "sass":
        return [m.group(1) for m in map(_SASS_LINE.match, (l.strip() for l in text.splitlines())) if m]
    out = []
    in_metadata = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(".amdgpu_metadata"):
            in_metadata = True
        elif line.startswith(".end_amdgpu_metadata"):
            in_metadata = False
        elif not in_metadata and line and not line.startswith((".", "{", "}", "(", ")", "$")) \
                and not line.endswith(":"):
            out.append(line)
    return out


def _mnemonic(line: str) -> str:
    line = re.sub(r"^@!?U?[%P]\w+\s+", "", line)  # PTX / SASS predicate guard
    return re.split(r"[\s,;(]", line, maxsplit=1)[0]


def instruction_counts(asm: Mapping[str, str] | str, target: str, patterns: Iterable[str] | None = None,
                       *, key: str | None = None) -> dict[str, int]:
    """How often each instruction occurs in the target's assembly (comments ignored).

    With ``patterns`` (regular expressions): ``{pattern: number of instruction lines matching it}``.
    Without: ``{mnemonic: count}`` over every instruction line, most frequent first.
    ``key`` picks another stage of the asm dict (e.g. "sass").
    """
    stage, text = _asm_text(asm, target, key)
    lines = _instruction_lines(text, stage)
    if patterns is None:
        return dict(collections.Counter(_mnemonic(line) for line in lines).most_common())
    compiled = {p: re.compile(p) for p in patterns}
    return {p: sum(1 for line in lines if rx.search(line)) for p, rx in compiled.items()}


def assert_has_instructions(asm: Mapping[str, str] | str, target: str, patterns: Iterable[str],
                            *, key: str | None = None) -> dict[str, int]:
    """Assert every regular expression in ``patterns`` matches an instruction of ``asm``.

    Searches ``asm[ASM_KEY[target]]`` (or ``asm[key]``; or ``asm`` itself when it is a string),
    comments stripped. Returns the counts; raises AssertionError naming the missing patterns,
    with the most frequent mnemonics and the closest lines as an excerpt.
    """
    patterns = list(patterns)
    if not patterns:
        raise ValueError("assert_has_instructions needs at least one pattern")
    stage, text = _asm_text(asm, target, key)
    counts = instruction_counts(text, target, patterns, key=stage)
    missing = [p for p, n in counts.items() if n == 0]
    if missing:
        raise AssertionError(_missing_message(text, target, stage, missing, counts))
    return counts


def assert_uses_mma(asm: Mapping[str, str] | str, target: str) -> int:
    """Assert the kernel drives the target's matrix units; returns how many MMA instructions."""
    pattern = MMA_INSTRUCTION[target] if target in MMA_INSTRUCTION else None
    if pattern is None:
        raise ValueError(f"no MMA instruction known for {target!r}; known: {', '.join(MMA_INSTRUCTION)}")
    return assert_has_instructions(asm, target, [pattern])[pattern]


def _missing_message(text: str, target: str, stage: str, missing: list[str], counts: dict[str, int]) -> str:
    lines = _instruction_lines(text, stage)
    mnemonics = collections.Counter(_mnemonic(line) for line in lines).most_common(12)
    # The closest lines: ones holding the missing pattern's first word ("wgmma", "mfma"), else
    # any matrix instruction ("mma"), else the first lines.
    near: list[str] = []
    for p in missing:
        words = re.findall(r"[A-Za-z][A-Za-z0-9]{2,}", p.replace("\\", " "))
        is_mma = re.search(r"(?i)mf?ma", p.replace("\\", "")) is not None
        for word in [re.escape(w) for w in words[:1]] + ([r"mf?ma"] if is_mma else []):
            hits = [line for line in lines if re.search(word, line, re.IGNORECASE)]
            if hits:
                near += [h for h in hits[:4] if h not in near]
                break
    excerpt = near or lines[:8]
    found = ", ".join(f"{p} x{n}" for p, n in counts.items() if n)
    return (
        f"{target} {stage}: no instruction matches {', '.join(missing)}"
        + (f" (found: {found})" if found else "")
        + f"\n  {len(lines)} instructions; most frequent: "
        + ", ".join(f"{m} x{n}" for m, n in mnemonics)
        + "\n  excerpt:\n    "
        + "\n    ".join(line[:160] for line in excerpt)
    )
