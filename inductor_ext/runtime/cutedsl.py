"""CuTeDSL compiles for a GPU this machine does not have: PTX, cubin, SASS, without a device.

A family supplies a *builder*, ``"package.module:function"``, that takes one job (plain data)
and returns ``(compiled, metadata)``: ``compiled`` is what ``cute.compile`` returned (it carries
``__ptx__`` and ``__cubin__`` when artifacts are kept), ``metadata`` a JSON-able dict.
:func:`compile_jobs` runs every job in one subprocess (``runtime.harness``; CuTeDSL reads its
settings from the environment once per process, and its imports take most of a cold compile),
with the environment set for the target, and returns one asm dict per job: ``ptx``, ``sass``
(``cuobjdump -sass`` of the cubin), ``host_launch`` (the ``cuda.launch_cfg`` lines of the host
function's IR: how the compiled function launches its kernel, e.g. with or without the PDL
attribute, ``programmatic_stream_serialization_allowed``) and ``metadata`` (JSON).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
import subprocess
import tempfile
import time
from typing import Any

from inductor_ext.runtime import toolchain
from inductor_ext.runtime.harness import run_in_subprocess, worker_env as _harness_env


# The host IR's launch-config ops (cuda.launch_cfg.create, .cluster_dim, ...programmatic_stream_
# serialization_allowed): what the compiled function sets on its cuLaunchKernelEx config.
_LAUNCH_CFG = "cuda.launch_cfg."


class CuteDslCompileError(RuntimeError):
    """A CuTeDSL kernel could not be compiled on this machine (missing package, DSL error)."""


def worker_env(dump_dir: str, arch: str = "sm_100a") -> dict[str, str]:
    """The compile subprocess's environment: the caller's, less anything that steers Triton's
    interpreter, CuTeDSL or quack, plus the settings a compile-only build for ``arch`` needs."""
    return _harness_env(drop_prefixes=("CUTE_DSL_", "QUACK_"), set={
        "CUTE_DSL_ARCH": arch,  # the compile target (cutlass / quack read it at import)
        "QUACK_ARCH": arch.removeprefix("sm_").rstrip("a"),  # quack's dispatch arch without a GPU
        # keep the artifacts so the compiled function carries them; "ir" dumps the host IR
        "CUTE_DSL_KEEP": "ptx,cubin,ir",
        "CUTE_DSL_DUMP_DIR": dump_dir,
        "CUTE_DSL_DISABLE_FILE_CACHING": "1",  # a cache hit would carry no PTX
        "QUACK_CACHE_ENABLED": "0",  # likewise quack's .o cache
    })


def compile_jobs(builder: str, jobs: list[Any], *, arch: str = "sm_100a", what: str = "CuTeDSL kernels",
                 timeout: float = 1800) -> list[dict[str, str]]:
    """Compile ``jobs`` with ``builder`` in one subprocess; raises the first failing job's error."""
    with tempfile.TemporaryDirectory(prefix="inductor_ext_cutedsl_") as d:
        dump = os.path.join(d, "dump")
        os.mkdir(dump)  # the DSL writes artifacts only into an existing directory
        result = run_in_subprocess("inductor_ext.runtime.cutedsl:_compile_jobs",
                                   {"builder": builder, "jobs": jobs, "arch": arch},
                                   env=worker_env(dump, arch), timeout=timeout, cwd=d,
                                   what=f"compiling {len(jobs)} {what}", error=CuteDslCompileError)
    out = []
    for item in result["results"]:
        if "error" in item:
            raise CuteDslCompileError(item["error"])
        meta = json.loads(item["asm"]["metadata"])
        meta["worker_import_s"] = result["import_s"]
        item["asm"]["metadata"] = json.dumps(meta, sort_keys=True, indent=1)
        out.append(item["asm"])
    return out


def _compile_jobs(request: dict[str, Any]) -> dict[str, Any]:
    """Subprocess side: import the builder (timed), then build and disassemble each job."""
    module_name, _, attr = request["builder"].partition(":")
    t0 = time.perf_counter()
    build = getattr(importlib.import_module(module_name), attr)
    import_s = time.perf_counter() - t0
    results = []
    for job in request["jobs"]:
        try:
            results.append({"asm": _artifacts(*build(job), arch=request["arch"])})
        except Exception as e:  # noqa: BLE001 - reported to the parent with what was compiled
            results.append({"error": f"{job!r}: {type(e).__name__}: {e}"})
    return {"results": results, "import_s": round(import_s, 3)}


def _artifacts(compiled: Any, meta: dict[str, Any], *, arch: str) -> dict[str, str]:
    """The PTX, SASS and metadata of one compiled CuTeDSL function."""
    ptx, cubin = compiled.__ptx__, compiled.__cubin__
    dump = os.environ["CUTE_DSL_DUMP_DIR"]
    host_launch = []
    for name in sorted(os.listdir(dump)):  # read now: the next job writes files of the same names
        if name.endswith("_clean.mlir"):
            with open(os.path.join(dump, name)) as f:
                host_launch += [line.strip() for line in f if _LAUNCH_CFG in line]
        os.unlink(os.path.join(dump, name))
    if not isinstance(ptx, str) or ".target" not in ptx:
        raise CuteDslCompileError(f"CuTeDSL returned no PTX (got {str(ptx)[:200]!r})")
    if not isinstance(cubin, (bytes, bytearray)) or not cubin.startswith(b"\x7fELF"):
        raise CuteDslCompileError(f"CuTeDSL returned no cubin (got {str(cubin)[:200]!r})")
    if not host_launch:
        raise CuteDslCompileError(f"CuTeDSL dumped no host IR with {_LAUNCH_CFG} lines (CUTE_DSL_KEEP=ir)")
    asm = {"ptx": ptx, "host_launch": "\n".join(host_launch)}
    meta = {**meta, "target": arch,
            "entries": [line.split()[2].split("(")[0] for line in ptx.splitlines()
                        if line.startswith(".visible .entry") or line.startswith(".entry")],
            "cubin_bytes": len(cubin), "cubin_sha256": hashlib.sha256(cubin).hexdigest()}
    tool = toolchain.cuobjdump()
    if tool:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "kernel.cubin")
            with open(path, "wb") as f:
                f.write(cubin)
            proc = subprocess.run([tool, "-sass", path], capture_output=True, text=True)
        if proc.returncode != 0:
            raise CuteDslCompileError(f"{tool} -sass failed: {proc.stderr.strip()[-500:]}")
        asm["sass"] = proc.stdout
        meta["sass_tool"] = tool
    else:
        meta["sass_tool"] = None
        meta["sass_missing"] = ("no cuobjdump found (PATH, $CUDA_HOME/bin, $TRITON_CUOBJDUMP_PATH, "
                                "Triton's bundled tools); the cubin is base64 in metadata['cubin_b64']")
        meta["cubin_b64"] = base64.b64encode(cubin).decode()
    asm["metadata"] = json.dumps(meta, sort_keys=True, indent=1)
    return asm
