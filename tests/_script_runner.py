"""Runs a test script (``tests/_*_script.py``) in a fresh Python and returns the JSON it prints.

Used where a test needs a process of its own: Triton picks its interpreter once per process,
a fake process group is one per process, and caches are checked from a second process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).parent


def run_json_script(script: str, *args: str, env: dict[str, str] | None = None, timeout: float = 900,
                    cwd: Path | None = None, unset: tuple[str, ...] = ()) -> Any:
    """``python tests/<script> *args`` with the repository and tests/ importable and ``env`` over
    this process's environment (less the variables in ``unset``); asserts it succeeded and
    returns its last stdout line as JSON."""
    path = os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])
    inherited = {k: v for k, v in os.environ.items() if k not in unset}
    done = subprocess.run([sys.executable, str(TESTS / script), *args],
                          env={**inherited, "PYTHONPATH": path, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def interpret_env(tmp: Path) -> dict[str, str]:
    """Triton's interpreter, and Inductor's and ext's caches of their own under ``tmp``."""
    return {"TRITON_INTERPRET": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
            "INDUCTOR_EXT_CACHE_DIR": str(tmp / "ext")}
