"""Interpret mode for Triton kernels: ext's Triton templates and Inductor's Triton code run on CPU
tensors in Triton's interpreter (numpy), with ``triton_interp``'s fixes for its bugs.

A test mode, not a way to run fast on CPU: it lets the kernels a GPU preset would get be
generated, autotuned against ATen and executed inside a real ``backend="ext"`` compile on a
machine without a GPU. (Metal and SYCL kernels have executors of their own.)
"""

from __future__ import annotations

import os


class InterpretModeError(RuntimeError):
    pass


def enable_triton_interpreter() -> None:
    """Prepare this process to run Triton kernels in the interpreter; idempotent."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        # Triton picks the interpreter when a kernel is decorated: it must be on from the start.
        raise InterpretModeError(
            "options={'interpret': True} runs this preset's Triton kernels in Triton's interpreter, which needs "
            "TRITON_INTERPRET=1 in the environment before Python starts, e.g. `TRITON_INTERPRET=1 python train.py`")
    import torch.utils._triton
    from triton import _utils

    from inductor_ext.runtime.triton_interp import apply_interpreter_fixes

    # Stock Triton has no CPU driver, so the backend hash Inductor puts in kernel metadata
    # cannot be computed; the interpreter ignores it.
    torch.utils._triton.triton_hash_with_backend = lambda: "TRITON_INTERPRETER"
    # Inductor types fp4 pointers as *u8 in compiled launches; the interpreter derives types
    # from the tensors and knows no fp4: give it the same answer (an added entry, nothing replaced).
    _utils.type_canonicalisation_dict.setdefault("float4_e2m1fn_x2", "u8")
    apply_interpreter_fixes()
