"""Where Intel's SYCL runtime wheels put their files, and the environment they need.

The wheels (``pip install "inductor-ext[sycl]"``) install into the environment's ``lib/`` and
``include/`` folders, not into site-packages: ``libsycl.so``, ``libsycl-jit.so`` (the run-time
compiler), the Unified Runtime adapters, ``libintelocl.so`` (Intel's OpenCL CPU device), the SYCL
headers and the device libraries (``libsycl-*.spv``). Everything here is found through the
installed distributions' file lists, so a venv, a conda env or a system Python all work.
"""

from __future__ import annotations

import functools
import getpass
import importlib.metadata
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

# The versions this runtime was verified with (design.md, "Intel SYCL"): 2026.x UR wheels lack
# the OpenCL adapter, so the CPU device would be missing.
PINNED = {
    "intel-sycl-rt": "2025.3.3",
    "intel-cmplr-lib-ur": "2025.3.3",
    "intel-cmplr-lib-rt": "2025.3.3",
    "intel-opencl-rt": "2025.3.3",
}

INSTALL_HINT = 'pip install "inductor-ext[sycl]" (Intel\'s SYCL runtime wheels: ' + " ".join(
    f"{name}=={version}" for name, version in PINNED.items()) + ")"


@dataclass(frozen=True)
class SyclWheels:
    version: str  # intel-sycl-rt's version
    lib_dir: Path  # holds libsycl.so, libsycl-jit.so, libintelocl.so, the device libraries
    include_dir: Path  # holds sycl/sycl.hpp

    @property
    def libintelocl(self) -> Path:
        return self.lib_dir / "libintelocl.so"


def _file_of(distribution: str, name: str) -> Path | None:
    try:
        files = importlib.metadata.files(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == name:
            return Path(os.path.normpath(f.locate()))
    return None


@functools.cache
def find() -> SyclWheels | None:
    """The installed SYCL wheels, or None when one of the needed files is missing."""
    libsycl = _file_of("intel-sycl-rt", "libsycl.so")
    header = _file_of("intel-sycl-rt", "sycl.hpp")
    ocl = _file_of("intel-opencl-rt", "libintelocl.so")
    if libsycl is None or header is None or ocl is None:
        return None
    include_dir = header.parent.parent
    if not ((include_dir / "sycl" / "sycl.hpp").is_file() and (libsycl.parent / "libsycl-jit.so").is_file()):
        return None
    return SyclWheels(importlib.metadata.version("intel-sycl-rt"), libsycl.parent, include_dir)


def missing() -> str | None:
    """None when the SYCL runtime can be used here, else one line saying what to install."""
    wheels = find()
    if wheels is None:
        return f"Intel's SYCL runtime is not installed; {INSTALL_HINT}"
    if wheels.version != PINNED["intel-sycl-rt"]:
        return (f"intel-sycl-rt {wheels.version} is installed but inductor-ext's SYCL runtime needs "
                f"{PINNED['intel-sycl-rt']}; {INSTALL_HINT}")
    from inductor_ext.runtime import toolchain

    if toolchain.gxx() is None:
        return "no C++ compiler (g++) to build the SYCL host shim; install g++ (apt-get install g++)"
    return None


def inductor_cache_dir() -> Path:
    """Inductor's cache folder ($TORCHINDUCTOR_CACHE_DIR, else its default under the temp dir),
    found without importing torch._inductor."""
    root = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not root:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = str(os.getuid())
        root = os.path.join(tempfile.gettempdir(), f"torchinductor_{user.replace(os.sep, '_')}")
    return Path(root)


def configure_environment(wheels: SyclWheels) -> dict[str, str]:
    """Set what the SYCL runtime reads at start-up, before it is loaded; returns what was set.

    - ``OCL_ICD_FILENAMES`` gains the wheel's ``libintelocl.so`` (the ``.icd`` file the wheel ships
      points at a build machine's path, so the OpenCL CPU device is not found without it);
    - ``SYCL_CACHE_PERSISTENT=1`` and ``SYCL_CACHE_DIR`` under Inductor's cache dir, so a kernel is
      compiled once per machine, not once per process. A value the user set wins.
    """
    changed = {}
    icd = os.environ.get("OCL_ICD_FILENAMES", "")
    if str(wheels.libintelocl) not in icd.split(":"):
        changed["OCL_ICD_FILENAMES"] = ":".join(p for p in (icd, str(wheels.libintelocl)) if p)
    if "SYCL_CACHE_PERSISTENT" not in os.environ:
        changed["SYCL_CACHE_PERSISTENT"] = "1"
    if "SYCL_CACHE_DIR" not in os.environ:
        changed["SYCL_CACHE_DIR"] = str(inductor_cache_dir() / "sycl")
    os.environ.update(changed)
    return changed
