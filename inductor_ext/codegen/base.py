"""What a device codegen (``codegen/metal``, ``codegen/sycl``) tells the rest of ext.

Each codegen package exposes ``CODEGEN = DeviceCodegen(...)`` in its ``__init__``;
``codegen/__init__.py`` finds them. The lowering installer asks the one a preset names (its
``codegen`` field) to install itself for a compile, when ``enabled(config)`` says so: it registers its scheduling and wrapper with
Inductor's ``register_backend_for_device`` for its device (or, with ``options={"interpret":
True}``, for "cpu", running each kernel with the CPU executor), and restores what was there
after the compile. Dumps find the kernels in Inductor's output code through
``describe_kernels``, so a Metal or SYCL kernel is listed with its own source and properties.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager


@dataclass(frozen=True)
class KernelInfo:
    """One kernel found in a compiled graph's output code."""

    name: str  # the variable the output code binds the kernel to
    language: str  # "triton", "cpp", "msl", "sycl", ...
    source: str  # the kernel's own source text
    suffix: str  # file suffix for its dump (".py", ".cpp", ".metal", ".sycl.cpp")
    properties: dict[str, Any] = field(default_factory=dict)  # e.g. {"nd_range_kernel": 2}
    header: str = ""  # the comment block before it in the output code (FX nodes, ATen ops)
    template: str | None = None  # the template family that rendered it, if any
    config: dict[str, Any] = field(default_factory=dict)  # that family's config


@dataclass(frozen=True)
class DeviceCodegen:
    name: str  # "metal", "sycl"
    device_types: tuple[str, ...]  # devices it generates kernels for natively
    language: str  # language of its kernels, as KernelInfo.language
    # install(config) -> context manager active for one compile (forward and backward)
    install: Callable[[Any], ContextManager[None]] = lambda config: contextlib.nullcontext()
    # describe_kernels(output_code) -> the kernels of this codegen in an output module
    describe_kernels: Callable[[str], list[KernelInfo]] = lambda code: []
    # missing() -> None when usable here, else what to install (one line)
    missing: Callable[[], str | None] = lambda: None
    # enabled(config) -> whether this compile uses it (an option it registered may say no, e.g.
    # SYCL for xpu only on request, Triton staying Inductor's default there)
    enabled: Callable[[Any], bool] = lambda config: True
