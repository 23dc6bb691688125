"""Compile a rendered Triton kernel for a GPU target this machine does not have.

    asm = compile_for_target(ks, "sm_100a")          # {"ttir":..., "ttgir":..., "ptx":..., "sass":...}

Triton compiles for a ``GPUTarget`` without a driver; it ships what the last steps need
(``ptxas`` and ``cuobjdump`` under ``triton/backends/nvidia/bin``, an in-process LLD and the
ocml/ockl bitcode for AMD), so the binary (cubin / hsaco) is built too, which proves the
assembler accepted the code. A target that cannot be compiled here raises
:class:`IsaCompileError`; nothing passes because something was missing.

Results are cached on disk (``runtime.asm_cache``, one file per kernel x target), keyed by the
kernel source, its signature/constexprs/options, the target and the Triton version, under
``$INDUCTOR_EXT_ISA_CACHE`` (default ``$XDG_CACHE_HOME/inductor_ext/isa``) or the ``cache``
directory a caller passes, and memoised in-process.

Triton decides between its interpreter and its compiler when ``triton.language`` is first
imported. In a process that imported it with ``TRITON_INTERPRET=1`` (tier C tests, interpret
mode), compiles run in a subprocess without that variable (``runtime.harness``); elsewhere they
run in-process. Target facts (Triton's GPUTarget, the assembly stage) come from ``targets``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from typing import Any, Iterable, Mapping

import triton
from triton.backends.compiler import GPUTarget

from inductor_ext import targets
from inductor_ext.runtime import asm_cache, toolchain
from inductor_ext.runtime.triton_loader import kernel_dir, module_from_source
from inductor_ext.runtime.harness import run_in_subprocess, worker_env
from inductor_ext.runtime.kernel_source import KernelSource
from inductor_ext.runtime.private_files import write_if_different

__all__ = [
    "IsaCompileError", "compile_for_target", "compile_many", "launch_hints", "gpu_target", "cache_dir",
    "triton_interpreter_active",
]

_CACHE_FORMAT = 1  # bump when what is stored changes
_memo: dict[str, dict[str, str]] = {}
_lock = threading.Lock()


class IsaCompileError(RuntimeError):
    """A kernel could not be compiled for a target on this machine (tool missing, compiler error)."""


def gpu_target(target: str) -> GPUTarget:
    known = targets.triton_targets()
    if target not in known:
        raise ValueError(f"unknown ISA target {target!r}; known: {', '.join(known)}")
    return GPUTarget(*known[target].triton)


cache_dir = asm_cache.cache_dir


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
    path = write_if_different(kernel_dir() / f"{stem}.py", ks.source)
    name = f"inductor_ext_isa_kernels.{stem}"
    module = sys.modules.get(name)
    if module is None:
        with triton.knobs.runtime.scope():
            triton.knobs.runtime.interpret = False
            module = module_from_source(name, path, ks.source)  # the source, never a __pycache__
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
            if toolchain.amd_bitcode_dir() is None:
                raise RuntimeError("no AMD device bitcode (ocml.bc, ockl.bc) in $ROCM_PATH/amdgcn/bitcode "
                                   "or triton/backends/amd/lib")
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
    return run_in_subprocess("inductor_ext.runtime.triton_compile:_compile_job",
                             {"ks": ks, "target": target, "options": dict(opts), "hints": dict(hints)},
                             env=worker_env(), error=IsaCompileError,
                             what=f"compiling {ks.name} for {target} (this process runs Triton's interpreter)")


def _compile_job(request: dict[str, Any]) -> dict[str, str]:
    """Subprocess entry (runtime.harness): compile one request."""
    return _compile(request["ks"], request["target"], gpu_target(request["target"]), request["options"],
                    request["hints"])


def _sass(cubin: bytes, target: str) -> str:
    try:
        tool = toolchain.require(toolchain.cuobjdump(), "cuobjdump", "it ships with Triton's NVIDIA backend "
                                 "(pip install triton) or the CUDA toolkit")
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
