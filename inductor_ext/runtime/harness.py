"""The one subprocess compile harness: run a function in a fresh Python with its own environment.

Compilers read settings from the environment once per process (Triton picks its interpreter at
first import, CuTeDSL reads ``CUTE_DSL_ARCH``, FlyDSL ``FLYDSL_GPU_ARCH`` and ``COMPILE_ONLY``), and
some abort the process on error (FlyDSL without libamdhip64). So compiles for a target this
machine does not have run here::

    result = run_in_subprocess("inductor_ext.runtime.triton_compile:compile_job", request,
                               env=worker_env(set={"CUTE_DSL_ARCH": "sm_100a"}),
                               what="compiling ext_gemm for sm_90a", error=IsaCompileError)

``entry`` is ``"package.module:function"``; the function gets ``request`` (any picklable value)
and returns a picklable result. An exception inside it comes back as ``error(message)``; a crash
of the process, or a timeout, as ``error`` with the tail of its output.
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import tempfile
import traceback
from typing import Any, Iterable, Mapping

# Variables that make Triton run kernels in its interpreter instead of compiling them.
INTERPRETER_ENV = ("TRITON_INTERPRET",)


def worker_env(*, drop: Iterable[str] = INTERPRETER_ENV, drop_prefixes: Iterable[str] = (),
               set: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``drop`` (and names starting with ``drop_prefixes``),
    plus ``set``: what a compile subprocess runs with."""
    dropped, prefixes = frozenset(drop), tuple(drop_prefixes)
    env = {k: v for k, v in os.environ.items() if k not in dropped and not (prefixes and k.startswith(prefixes))}
    env.update(set or {})
    return env


def run_in_subprocess(entry: str, request: Any, *, env: Mapping[str, str] | None = None,
                      timeout: float | None = None, cwd: str | None = None, what: str = "a compile job",
                      error: type[Exception] = RuntimeError) -> Any:
    """``entry(request)`` in a fresh interpreter; returns its result or raises ``error``."""
    with tempfile.TemporaryDirectory(prefix="inductor_ext_job_") as d:
        request_path, response_path = os.path.join(d, "request.pkl"), os.path.join(d, "response.pkl")
        with open(request_path, "wb") as f:
            pickle.dump({"entry": entry, "request": request}, f)
        cmd = [sys.executable, "-c", "from inductor_ext.runtime.harness import worker_main; worker_main()",
               request_path, response_path]
        try:
            proc = subprocess.run(cmd, env=dict(env) if env is not None else worker_env(), capture_output=True,
                                  text=True, timeout=timeout, cwd=cwd or d)
        except subprocess.TimeoutExpired as e:
            raise error(f"{what} took over {timeout:.0f} s and was stopped") from e
        if proc.returncode != 0 or not os.path.exists(response_path):
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-30:])
            raise error(f"{what} failed in a subprocess with exit code {proc.returncode}:\n{tail}")
        with open(response_path, "rb") as f:
            response = pickle.load(f)
    if "error" in response:
        raise error(f"{what}: {response['error']}")
    return response["result"]


def worker_main() -> None:
    """Subprocess side: load argv[1], call its entry, write the result (or the error) to argv[2]."""
    with open(sys.argv[1], "rb") as f:
        job = pickle.load(f)
    module_name, _, attr = job["entry"].partition(":")
    try:
        result: dict[str, Any] = {"result": getattr(importlib.import_module(module_name), attr)(job["request"])}
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises its own error type
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        result = {"error": detail, "traceback": traceback.format_exc()}
    with open(sys.argv[2], "wb") as f:
        pickle.dump(result, f)
