"""Tier I gates: compile a rendered kernel for a GPU target on a machine without one, and
assert on the instructions it emits.

    asm = compile_for_target(ks, "sm_100a")          # {"ttir":..., "ttgir":..., "ptx":..., "sass":...}
    assert_has_instructions(asm, "sm_100a", [MMA_INSTRUCTION["sm_100a"]])

Compiling is ``runtime.triton_compile``'s job and reading assembly ``runtime.asm_text``'s; the
target facts (Triton's GPUTarget, the MMA instruction per target) come from ``targets``. This
module is what tests import: those re-exported, plus the assertions. A gate never passes
because something was missing: a target that cannot be compiled here raises
:class:`IsaCompileError`.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from inductor_ext import targets
from inductor_ext.runtime import asm_text
from inductor_ext.runtime.asm_text import ASM_KEY, instruction_counts
from inductor_ext.runtime.triton_compile import (
    IsaCompileError, cache_dir, compile_for_target, compile_many, gpu_target, launch_hints,
    triton_interpreter_active,
)

__all__ = [
    "TARGETS", "MMA_INSTRUCTION", "SASS_MMA_INSTRUCTION", "ASM_KEY", "IsaCompileError",
    "compile_for_target", "compile_many", "launch_hints", "gpu_target", "cache_dir",
    "assert_has_instructions", "assert_uses_mma", "instruction_counts", "triton_interpreter_active",
]

# target name -> (backend, arch, warp size) for triton.backends.compiler.GPUTarget
TARGETS: dict[str, tuple[str, int | str, int]] = {n: t.triton for n, t in targets.triton_targets().items()}
# The matrix instruction each target's tensor cores are driven by (a regular expression, searched
# in ASM_KEY[target] with comments stripped); and the same in SASS (cuobjdump) for NVIDIA.
MMA_INSTRUCTION: dict[str, str] = {n: t.mma_instruction for n, t in targets.triton_targets().items()
                                   if t.mma_instruction}
SASS_MMA_INSTRUCTION: dict[str, str] = {n: t.sass_mma_instruction for n, t in targets.triton_targets().items()
                                        if t.sass_mma_instruction}

# Kept for tests that read instruction lines directly.
_instruction_lines = asm_text.instruction_lines
_mnemonic = asm_text.mnemonic


def assert_has_instructions(asm: Mapping[str, str] | str, target: str, patterns: Iterable[str],
                            *, key: str | None = None) -> dict[str, int]:
    """Assert every regular expression in ``patterns`` matches an instruction of ``asm``.

    Searches ``asm[ASM_KEY[target]]`` (or ``asm[key]``; or ``asm`` itself when it is a string),
    comments stripped. Returns the counts; raises AssertionError naming the missing patterns,
    with the most frequent mnemonics and the closest lines as an excerpt.
    """
    patterns = list(patterns)
    if not patterns:
        raise ValueError("assert_has_instructions needs at least one pattern")
    stage, text = asm_text.asm_text(asm, target, key)
    counts = asm_text.instruction_counts(text, target, patterns, key=stage)
    missing = [p for p, n in counts.items() if n == 0]
    if missing:
        raise AssertionError(asm_text.missing_message(text, target, stage, missing, counts))
    return counts


def assert_uses_mma(asm: Mapping[str, str] | str, target: str) -> int:
    """Assert the kernel drives the target's matrix units; returns how many MMA instructions."""
    pattern = MMA_INSTRUCTION[target] if target in MMA_INSTRUCTION else None
    if pattern is None:
        raise ValueError(f"no MMA instruction known for {target!r}; known: {', '.join(MMA_INSTRUCTION)}")
    return assert_has_instructions(asm, target, [pattern])[pattern]
