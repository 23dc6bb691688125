"""Registers and local-memory spills of a compiled GPU kernel, read from its assembly.

A kernel whose registers spill to local memory (NVIDIA ``STL``/``LDL``, AMD scratch) runs far
below its roofline, and nothing else in the ISA says so: tier I asserts that no offered config
spills (tests/test_tier_i_configs.py) and ``inductor-ext asm`` prints these numbers per config.

- NVIDIA (the ``sass`` stage, cuobjdump's disassembly): every ``STL``/``LDL`` (any width:
  ``STL.64``, ``LDL.LU.128``, ...) is a local-memory store/load. Triton's kernels keep no
  arrays in local memory, so each is a spill. Registers: the highest ``R<n>`` used, plus one
  (cuobjdump's listing carries no register count; ``RZ`` is not counted).
- AMD (the ``amdgcn`` stage): the code object metadata's ``.vgpr_spill_count``, and the
  ``scratch_*`` instructions; registers: ``.vgpr_count``. ``.sgpr_spill_count`` counts as a
  spill to memory only when the kernel has scratch (``.private_segment_fixed_size``); without it
  the compiler parked the SGPRs in VGPR lanes (``v_writelane``), which touches no memory and is
  shown apart (``lane_spills``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from inductor_ext.runtime.asm_text import instruction_lines, mnemonic

__all__ = ["RegisterUse", "register_use"]


@dataclass(frozen=True)
class RegisterUse:
    """What a kernel's assembly says about its registers; ``spills`` is the number of
    local-memory (scratch) instructions plus the spill counts the compiler reported."""

    registers: int | None  # None: the assembly does not say
    spill_stores: int  # NVIDIA STL*, AMD scratch stores
    spill_loads: int  # NVIDIA LDL*, AMD scratch loads
    reported_spills: int = 0  # AMD metadata: .vgpr_spill_count (+ .sgpr_spill_count with scratch)
    lane_spills: int = 0  # AMD: SGPRs spilled to VGPR lanes (no scratch): not memory traffic

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads + self.reported_spills

    def describe(self) -> str:
        regs = "?" if self.registers is None else str(self.registers)
        extra = f", compiler-reported spills {self.reported_spills}" if self.reported_spills else ""
        extra += f", SGPRs in VGPR lanes {self.lane_spills}" if self.lane_spills else ""
        return f"registers {regs}, local-memory stores {self.spill_stores}, loads {self.spill_loads}{extra}"


_REG = re.compile(r"\bR(\d+)\b")
_META = re.compile(r"^\s*\.(vgpr_count|vgpr_spill_count|sgpr_spill_count|private_segment_fixed_size):\s*(\d+)",
                   re.M)


def _sass(text: str) -> RegisterUse:
    lines = instruction_lines(text, "sass")
    ops = [mnemonic(line).split(".", 1)[0] for line in lines]
    regs = [int(r) for line in lines for r in _REG.findall(line)]
    return RegisterUse(max(regs) + 1 if regs else 0, ops.count("STL"), ops.count("LDL"))


def _amdgcn(text: str) -> RegisterUse:
    meta: dict[str, int] = {}
    for key, value in _META.findall(text):
        meta[key] = max(meta.get(key, 0), int(value))  # one kernel per module: max is its value
    code = "\n".join(line.split(";", 1)[0] for line in text.splitlines())
    ops = [mnemonic(line) for line in instruction_lines(code, "amdgcn")]
    stores = sum(op.startswith("scratch_store") for op in ops)
    loads = sum(op.startswith("scratch_load") for op in ops)
    sgpr, scratch = meta.get("sgpr_spill_count", 0), meta.get("private_segment_fixed_size", 0)
    return RegisterUse(meta.get("vgpr_count"), stores, loads,
                       meta.get("vgpr_spill_count", 0) + (sgpr if scratch else 0), 0 if scratch else sgpr)


def register_use(asm: Mapping[str, str]) -> RegisterUse | None:
    """Registers and spills from a compiled kernel's stages (``sass`` for NVIDIA, ``amdgcn`` for
    AMD); None when it has neither (PTX alone does not say what ptxas allocated)."""
    if asm.get("sass"):
        return _sass(asm["sass"])
    if asm.get("amdgcn"):
        return _amdgcn(asm["amdgcn"])
    return None
