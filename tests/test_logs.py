"""TORCH_LOGS=ext_autotune,ext_passes: ext's decisions and pass runs in PyTorch's logging."""

import os
import subprocess
import sys

SCRIPT = """
import sys
import torch
m = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU())
with torch.no_grad():
    torch.compile(m, backend="ext", options={"autotune": "quick", "autotune_cache": sys.argv[1]})(torch.randn(4, 16))
"""


def _stderr(torch_logs, tmp_path):
    # fresh Inductor caches: a cache hit would skip the lowering and the passes we log
    env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / f"inductor_{bool(torch_logs)}")
    if torch_logs:
        env["TORCH_LOGS"] = torch_logs
    # a fresh autotune cache too: a hit would log the cached winner, not the timed candidates
    cache = str(tmp_path / f"autotune_{bool(torch_logs)}.db")
    done = subprocess.run([sys.executable, "-c", SCRIPT, cache], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def test_artifacts_log_decisions_and_passes_only_when_asked(tmp_path):
    logged = _stderr("ext_autotune,ext_passes", tmp_path)
    assert "[__ext_autotune]" in logged and "addmm" in logged
    assert "cpp.gemm avx" in logged  # the cpu preset's C++ GEMM template candidates, timed (whichever wins)
    assert "[__ext_passes]" in logged and "nvfp4_alpha_fold" in logged
    quiet = _stderr(None, tmp_path)
    assert "__ext_autotune" not in quiet and "__ext_passes" not in quiet
