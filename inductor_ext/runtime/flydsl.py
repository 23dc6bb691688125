"""FlyDSL compiles for AMD GPUs (gfx950, gfx1250) on a machine without ROCm or a GPU.

FlyDSL lowers a ``@flyc.jit`` launcher and its ``@flyc.kernel`` through MLIR/LLVM to an hsaco.
Without ROCm it needs three things, all found here:

- ``ROCM_PATH``: a folder holding ``llvm/bin/ld.lld`` (an AMDGPU linker: Debian's lld-19 that
  ``.ci/install_amd_toolchain.sh`` unpacks, or ``zig ld.lld``) and ``amdgcn/bitcode/{ocml,ockl}.bc``
  (Triton's AMD backend ships them). :func:`rocm_root` builds one under the tool cache, made of
  links to what :mod:`.toolchain` finds.
- ``COMPILE_ONLY=1`` (a launch would abort the process: there is no libamdhip64), and the target in
  both ``ARCH`` and ``FLYDSL_GPU_ARCH`` (FlyDSL's arch lookups read the latter).
- ``FLYDSL_DEBUG_DUMP_ASM=1`` + ``FLYDSL_DUMP_DIR``: FlyDSL writes each kernel's final ISA to
  ``<dir>/<kernel>_0/22_final_isa.s``. The hsaco itself is read from the compiled module FlyDSL keeps
  (``JitFunction._last_compiled``: a ``gpu.binary`` whose ``bin`` attribute is the code object).

FlyDSL reads these once per process, so compiles run in subprocesses (``runtime.harness``), one
target each, as many at once as this process has CPUs when a batch is large enough to share. A job names a *builder*, ``"package.module:function"``, called there with
the job's data; it returns ``(jit_function, args)`` and :func:`compile_jobs` calls
``jit_function(*args)`` (CPU tensors stand in for device ones: FlyDSL only reads their dtype and
layout). LLVM reports some failures only on stderr and still writes an hsaco (``error: no libcall
available for ftanh``): the worker captures stderr and any ``error:`` line fails the job.

Results are cached on disk (``runtime.asm_cache``) keyed by the job, the target, FlyDSL's version and
the code of the builder's module and what it imports of ours, and memoised in-process. Each result maps ``amdgcn`` (the target's
``asm_key``: the final ISA of every kernel, one after another), ``hsaco_b64`` (the code object, base64) and ``metadata`` (JSON:
kernels with their register/LDS figures, compile seconds, versions).
"""

from __future__ import annotations

import ast
import base64
import contextlib
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from inductor_ext import targets
from inductor_ext.runtime import asm_cache, toolchain
from inductor_ext.runtime.private_files import make_private_dirs
from inductor_ext.runtime.harness import run_in_subprocess, worker_env as _harness_env

__all__ = ["ARCHES", "FlyDslCompileError", "FlyJob", "rocm_root", "worker_env", "compile_jobs", "hsaco_bytes"]

# Targets FlyDSL compiles for here (AMD wave64 CDNA4 and wave32 gfx1250).
ARCHES = ("gfx950", "gfx1250")
_CACHE_FORMAT = 1
BITCODE_INSTALL = "pip install triton (its AMD backend ships ocml.bc and ockl.bc) or install ROCm"


class FlyDslCompileError(RuntimeError):
    """A FlyDSL kernel could not be compiled for an AMD target here (DSL error, LLVM error,
    missing libcall); the message carries what FlyDSL and LLVM said."""


@dataclass(frozen=True)
class FlyJob:
    """One compile: ``builder(job)`` returns ``(jit_function, args)`` for ``arch``.

    ``name`` labels cache files and messages; ``key`` is what the compile depends on besides the
    builder module's source (the job data is a fine default: leave it empty)."""

    builder: str
    job: Any
    arch: str
    name: str
    key: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------- toolchain


def rocm_root() -> Path:
    """A ``ROCM_PATH``-shaped folder for FlyDSL: ``llvm/bin/ld.lld`` and ``amdgcn/bitcode/{ocml,ockl}.bc``.

    ``$ROCM_PATH`` itself when it has both; else links to what :mod:`.toolchain` finds, under
    ``tool_cache_dir() / "flydsl_rocm" / <hash of their paths>``. Raises
    :class:`~inductor_ext.runtime.toolchain.ToolchainMissing` saying what to install.
    """
    env_root = os.environ.get("ROCM_PATH")
    if env_root and (Path(env_root) / "llvm" / "bin" / "ld.lld").is_file() \
            and (Path(env_root) / "amdgcn" / "bitcode" / "ocml.bc").is_file():
        return Path(env_root)
    lld = toolchain.require(toolchain.ld_lld(), "an AMDGPU linker (ld.lld)", toolchain.LLD_INSTALL)
    bitcode = toolchain.require(toolchain.amd_bitcode_dir(), "the AMD device bitcode (ocml.bc, ockl.bc)",
                                BITCODE_INSTALL)
    sources = {"ld.lld": os.path.realpath(lld),
               "ocml.bc": os.path.realpath(Path(bitcode) / "ocml.bc"),
               "ockl.bc": os.path.realpath(Path(bitcode) / "ockl.bc")}
    digest = hashlib.sha256(json.dumps(sources, sort_keys=True).encode()).hexdigest()[:16]
    root = toolchain.tool_cache_dir() / "flydsl_rocm" / digest
    if not (root / "llvm" / "bin" / "ld.lld").exists():
        tmp = root.with_name(f"{digest}.{os.getpid()}.{threading.get_ident()}.tmp")
        make_private_dirs(tmp / "llvm" / "bin")  # 0700 whatever the umask: the tool folder stays trusted
        make_private_dirs(tmp / "amdgcn" / "bitcode")
        # Link to lld by the name "ld.lld": lld picks its GNU flavour from argv[0].
        os.symlink(lld, tmp / "llvm" / "bin" / "ld.lld")
        for name in ("ocml.bc", "ockl.bc"):
            os.symlink(sources[name], tmp / "amdgcn" / "bitcode" / name)
        try:
            os.rename(tmp, root)
        except OSError:  # another process built it first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return root


def worker_env(arch: str, dump_dir: str) -> dict[str, str]:
    """The compile subprocess's environment: the caller's, less anything that steers FlyDSL or
    Triton's interpreter, plus a compile-only build for ``arch`` that dumps its ISA."""
    if arch not in ARCHES:
        raise ValueError(f"FlyDSL target {arch!r} is not one of {ARCHES}")
    return _harness_env(drop=("TRITON_INTERPRET", "ARCH", "COMPILE_ONLY", "ROCM_PATH"), drop_prefixes=("FLYDSL_",),
                        set={
                            "ROCM_PATH": str(rocm_root()),
                            "COMPILE_ONLY": "1",  # no device: compile, never launch
                            "ARCH": arch,
                            "FLYDSL_GPU_ARCH": arch,
                            "FLYDSL_DEBUG_DUMP_ASM": "1",
                            "FLYDSL_DUMP_DIR": dump_dir,
                            "FLYDSL_RUNTIME_ENABLE_CACHE": "0",  # our cache keys on more than FlyDSL's
                        })


# ----------------------------------------------------------------------------------- compile


def _code_of(path: Path) -> str:
    """What a module's compiled code depends on: its syntax tree without docstrings (comments are
    not in it), so editing prose never invalidates a compiled kernel."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _imported(tree: ast.AST, package: str) -> set[tuple[str, tuple[str, ...]]]:
    """(module, names imported from it) for every import of ``package`` in ``tree``, anywhere
    (builders import their DSL helpers inside functions)."""
    found: set[tuple[str, tuple[str, ...]]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update((a.name, ()) for a in node.names if a.name.split(".")[0] == package)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == package:
            found.add((node.module, tuple(a.name for a in node.names)))
    return found


def _source(module: str) -> tuple[Path | None, bool]:
    """(the module's .py file or None, whether it is a package); imports its parent packages only."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None, False
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None, False
    return Path(spec.origin), spec.submodule_search_locations is not None


@functools.lru_cache(maxsize=None)
def _module_sha(module: str) -> str:
    """Hash of the code a builder's compile depends on: its module (``"pkg.mod"`` or
    ``"pkg.mod:builder"``) and every module of our package it imports, transitively, read without
    importing them (imports cost seconds). A kernel is rebuilt when that code changes, not when a
    sibling family or a docstring does."""
    module = module.partition(":")[0]
    package = module.split(".")[0]
    h, seen, todo = hashlib.sha256(), set(), [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path, is_package = _source(name)
        if path is None:
            if name == module:
                raise FlyDslCompileError(f"builder module {module!r} not found")
            continue
        tree = ast.parse(path.read_text(), str(path))
        h.update(name.encode() + b"\0" + _code_of(path).encode() + b"\0")
        for imported, names in sorted(_imported(tree, package)):
            todo.append(imported)
            if _source(imported)[1]:  # ``from pkg import mod``: mod may be a module
                todo.extend(f"{imported}.{n}" for n in names)
    return h.hexdigest()


def _versions() -> dict[str, str]:
    try:
        return {"flydsl": importlib.metadata.version("flydsl")}
    except importlib.metadata.PackageNotFoundError:
        return {"flydsl": "missing"}


def _cache_key(job: FlyJob) -> str:
    payload = json.dumps({
        "format": _CACHE_FORMAT, "builder": job.builder, "job": repr(job.job), "key": job.key, "arch": job.arch,
        "builder_sha": _module_sha(job.builder), "runtime_sha": _module_sha(__name__),
        "versions": _versions(), "python": sys.version_info[:2],
    }, sort_keys=True, default=repr)
    return hashlib.sha256(payload.encode()).hexdigest()


_memo: dict[str, dict[str, str]] = {}
_lock = threading.Lock()


def compile_jobs(jobs: list[FlyJob], *, cache: str | os.PathLike[str] | None = None,
                 timeout: float = 900, workers: int | None = None) -> list[dict[str, str]]:
    """Compile every job; one asm dict per job. Cache misses compile in subprocesses (one target
    each), up to ``workers`` at once (default: the CPUs this process may use).

    Raises :class:`FlyDslCompileError` naming every job that failed (with FlyDSL's/LLVM's words;
    the others are compiled and cached), :class:`~inductor_ext.runtime.toolchain.ToolchainMissing`
    when ld.lld or the bitcode is missing.
    """
    keys = [_cache_key(job) for job in jobs]
    results: dict[str, dict[str, str]] = {}
    misses: dict[str, tuple[FlyJob, Path]] = {}
    root = asm_cache.cache_dir(cache)
    for job, key in zip(jobs, keys):
        with _lock:
            if key in _memo:
                results[key] = _memo[key]
                continue
        path = root / f"flydsl-{job.arch}-{job.name[:80]}-{key[:24]}.json.gz"
        asm = asm_cache.read(path, key)
        if asm is not None:
            results[key] = asm
        elif key not in misses:
            misses[key] = (job, path)
    workers = workers or len(os.sched_getaffinity(0))
    batches = _batches(list(misses.items()), workers)
    failures: list[str] = []

    def compile_batch(batch: list[tuple[str, tuple[FlyJob, Path]]]) -> None:
        compiled = _compile_in_subprocess([job for _, (job, _) in batch], batch[0][1][0].arch, timeout)
        for (key, (job, path)), asm in zip(batch, compiled):
            if isinstance(asm, str):
                failures.append(asm)
                continue
            asm_cache.write(path, key, asm)
            results[key] = asm

    if len(batches) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(len(batches), workers)) as pool:
            for done in [pool.submit(compile_batch, b) for b in batches]:
                done.result()  # a worker that died raises here
    elif batches:
        compile_batch(batches[0])
    with _lock:
        _memo.update(results)
    if failures:
        raise FlyDslCompileError(f"{len(failures)} of {len(jobs)} FlyDSL kernel(s) failed to compile:\n"
                                 + "\n".join(failures))
    return [dict(results[key]) for key in keys]


# Compiles per worker below which another worker (another FlyDSL import, ~5 s) does not pay off.
_JOBS_PER_WORKER = 3


def _batches(misses: list[tuple[str, tuple[FlyJob, Path]]], workers: int) -> list[list[tuple[str, tuple[FlyJob, Path]]]]:
    """The misses cut into one batch per worker subprocess: one target per batch (FlyDSL reads its
    target once per process), at most ``workers`` batches when there are enough jobs to share."""
    by_arch: dict[str, list[tuple[str, tuple[FlyJob, Path]]]] = {}
    for item in misses:
        by_arch.setdefault(item[1][0].arch, []).append(item)
    batches = []
    spare = max(workers, len(by_arch)) - len(by_arch)  # workers beyond one per target
    for arch in sorted(by_arch, key=lambda a: -len(by_arch[a])):
        items = by_arch[arch]
        extra = min(spare, len(items) // (2 * _JOBS_PER_WORKER))
        spare -= extra
        parts = extra + 1
        batches += [items[i::parts] for i in range(parts)]
    return batches


def _compile_in_subprocess(jobs: list[FlyJob], arch: str, timeout: float) -> list[dict[str, str] | str]:
    """Each job's asm, or the error that job met (a message naming it)."""
    with tempfile.TemporaryDirectory(prefix="inductor_ext_flydsl_") as d:
        dump, log = os.path.join(d, "dump"), os.path.join(d, "llvm.log")
        env = worker_env(arch, dump)
        what = f"compiling {len(jobs)} FlyDSL kernel(s) for {arch} ({', '.join(j.name for j in jobs[:4])}" \
               + (", ..." if len(jobs) > 4 else "") + ")"
        try:
            out = run_in_subprocess("inductor_ext.runtime.flydsl:_compile_request",
                                    {"jobs": [(j.builder, j.job, j.name) for j in jobs], "arch": arch, "log": log},
                                    env=env, timeout=timeout, cwd=d, what=what, error=FlyDslCompileError)
        except FlyDslCompileError as e:
            # A hard LLVM error aborts the process while stderr goes to the log: show its tail.
            tail = Path(log).read_text(errors="replace").strip().splitlines()[-15:] if os.path.exists(log) else []
            raise FlyDslCompileError("\n".join([str(e), *tail])) from e
    compiled: list[dict[str, str] | str] = []
    for job, item in zip(jobs, out["results"]):
        if "error" in item:
            compiled.append(f"{job.name} for {arch}: {item['error']}")
            continue
        meta = json.loads(item["asm"]["metadata"])
        meta["worker_import_s"] = out["import_s"]
        item["asm"]["metadata"] = json.dumps(meta, sort_keys=True, indent=1)
        compiled.append(item["asm"])
    return compiled


@contextlib.contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    """Send file descriptor 2 (LLVM writes there, not to ``sys.stderr``) to ``path``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "a") as f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


_LLVM_ERROR = re.compile(r"^(?:error|LLVM ERROR): .*$", re.MULTILINE)


def _compile_request(request: dict[str, Any]) -> dict[str, Any]:
    """Subprocess side: import FlyDSL (timed), then build, compile and read back each job."""
    t0 = time.perf_counter()
    import flydsl.compiler  # noqa: F401  - the import cost is reported apart from the compiles

    import_s = time.perf_counter() - t0
    dump, log = Path(os.environ["FLYDSL_DUMP_DIR"]), request["log"]
    results = []
    for builder, data, name in request["jobs"]:
        try:
            results.append({"asm": _compile_one(builder, data, name, request["arch"], dump, log)})
        except Exception as e:  # noqa: BLE001 - reported to the parent with the job's name
            import traceback

            where = [line for line in traceback.format_exc().splitlines() if line.startswith('  File "')][-4:]
            results.append({"error": f"{type(e).__name__}: {e}\n" + "\n".join(where)})
    return {"results": results, "import_s": round(import_s, 3)}


def _compile_one(builder: str, data: Any, name: str, arch: str, dump: Path, log: str) -> dict[str, str]:
    import shutil

    module_name, _, attr = builder.partition(":")
    jit_fn, args = getattr(importlib.import_module(module_name), attr)(data)
    shutil.rmtree(dump, ignore_errors=True)
    dump.mkdir(parents=True)
    start = os.path.getsize(log) if os.path.exists(log) else 0
    t0 = time.perf_counter()
    with _stderr_to(log):
        jit_fn(*args)
    compile_s = time.perf_counter() - t0
    with open(log, errors="replace") as f:
        f.seek(start)
        said = f.read()
    errors = _LLVM_ERROR.findall(said)
    if errors:
        # e.g. "no libcall available for ftanh": LLVM still wrote a code object, which would call
        # a function that does not exist. Never a silent success.
        raise FlyDslCompileError(f"LLVM reported {len(errors)} error(s) while compiling {name} for {arch} "
                                 f"(FlyDSL still wrote a code object): " + "; ".join(dict.fromkeys(errors)))
    isa_files = sorted(dump.glob("*/*_final_isa.s"))
    if not isa_files:
        raise FlyDslCompileError(f"FlyDSL wrote no ISA for {name} under {dump} (FLYDSL_DEBUG_DUMP_ASM had no effect)")
    isa = "".join(f"; ---- kernel {p.parent.name} ----\n{p.read_text()}" for p in isa_files)
    ir_text = jit_fn._last_compiled[1]._ir_text
    hsaco = hsaco_bytes(ir_text)
    if not hsaco.startswith(b"\x7fELF") or f"gfx{arch.removeprefix('gfx')}".encode() not in hsaco:
        raise FlyDslCompileError(f"the code object FlyDSL built for {name} is not an {arch} ELF")
    kernels = {m.group(1): {k: int(v) for k, v in re.findall(r"(\w+) = (-?\d+) : i64", m.group(2))}
               for m in re.finditer(r'#gpu\.kernel_metadata<"([^"]+)".*?metadata = \{([^}]*)\}', ir_text)}
    meta = {"name": name, "arch": arch, "builder": builder, "kernels": kernels, "compile_s": round(compile_s, 3),
            "hsaco_bytes": len(hsaco), "hsaco_sha256": hashlib.sha256(hsaco).hexdigest(), "versions": _versions(),
            "llvm_warnings": [line for line in said.splitlines() if "warning" in line][:20]}
    # the stage name runtime.asm_text (and the ISA gates, inductor-ext asm) read for this target
    return {targets.get(arch).asm_key: isa, "hsaco_b64": base64.b64encode(hsaco).decode(),
            "metadata": json.dumps(meta, sort_keys=True, indent=1)}


def hsaco_bytes(ir_text: str) -> bytes:
    """The code object inside a compiled module's ``gpu.binary`` (``bin = "..."``, MLIR-escaped:
    ``\\\\`` for a backslash, ``\\XX`` for any other unprintable byte or a quote)."""
    text = ir_text.encode("utf-8")
    start = text.find(b'bin = "')
    if start < 0:
        raise FlyDslCompileError("the compiled FlyDSL module holds no gpu.binary")
    out, i = bytearray(), start + len(b'bin = "')
    while text[i] != ord('"'):
        if text[i] == ord("\\"):
            if text[i + 1] == ord("\\"):
                out.append(ord("\\"))
                i += 2
            else:
                out.append(int(text[i + 1:i + 3], 16))
                i += 3
        else:
            out.append(text[i])
            i += 1
    return bytes(out)
