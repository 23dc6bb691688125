"""Interpret mode: Inductor's Triton templates (ours included) on CPU tensors, in the Triton interpreter.

A test mode, not a way to run fast on CPU: the interpreter runs each program in numpy. It lets
template choices be generated, autotuned against ATen and executed inside a real
``backend="ext"`` compile on machines without a GPU.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.utils._triton


class InterpretModeError(RuntimeError):
    pass


def interpret_patches() -> dict[str, Any]:
    """Inductor config for interpret mode: Triton codegen for CPU tensors."""
    return {"cpu_backend": "triton"}


def enable_interpret_mode() -> None:
    """Prepare this process for interpret mode; idempotent."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        # Triton picks the interpreter when a kernel is decorated: it must be on from the start.
        raise InterpretModeError(
            "options={'interpret': True} needs TRITON_INTERPRET=1 in the environment before Python "
            "starts, e.g. `TRITON_INTERPRET=1 python train.py`")
    # Stock Triton has no CPU driver, so the backend hash Inductor puts in kernel metadata
    # cannot be computed; the interpreter ignores it.
    torch.utils._triton.triton_hash_with_backend = lambda: "TRITON_INTERPRETER"
    # Inductor types fp4 pointers as *u8 in compiled launches; the interpreter derives types
    # from the tensors and knows no fp4: give it the same answer (an added entry, nothing replaced).
    from triton import _utils

    _utils.type_canonicalisation_dict.setdefault("float4_e2m1fn_x2", "u8")
    try:
        from inductor_ext.testing.triton_interp import apply_interpreter_fixes
    except ImportError:  # fixes are optional for fp32/fp16 kernels
        return
    apply_interpreter_fixes()
