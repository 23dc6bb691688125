"""Tier C for SYCL: kernels run on Intel's OpenCL CPU device (``runtime/sycl``), on CPU tensors.

``SYCL_MARKS`` (for ``pytestmark``) and ``needs_sycl`` (a decorator) mark a test ``sycl`` and skip
it, saying what to install, where the SYCL wheels (or g++) are missing. ``interpret_config()`` is
the config a codegen install needs to generate kernels for xpu and run them on the CPU device.
"""

from __future__ import annotations

import types
from typing import Callable, TypeVar

import pytest

from inductor_ext.runtime import sycl

SKIP_REASON = sycl.missing()
SYCL_MARKS = [pytest.mark.sycl,
              pytest.mark.skipif(SKIP_REASON is not None, reason=f"SYCL kernels cannot run here: {SKIP_REASON}")]

F = TypeVar("F", bound=Callable)


def needs_sycl(test: F) -> F:
    for mark in SYCL_MARKS:
        test = mark(test)
    return test


def interpret_config() -> types.SimpleNamespace:
    """A stand-in for ExtConfig with ``interpret=True`` (all ``CODEGEN.install`` reads)."""
    return types.SimpleNamespace(interpret=True)
