"""Reading compiled assembly (PTX, SASS, amdgcn): instruction lines, mnemonics, counts.

Shared by the ISA gates (``testing/isa.py``) and ``inductor-ext asm``: comments, labels,
directives, AMD metadata blocks and SASS encodings are not instructions.
"""

from __future__ import annotations

import collections
import re
from typing import Iterable, Mapping

from inductor_ext import targets

__all__ = ["ASM_KEY", "asm_text", "instruction_lines", "mnemonic", "instruction_counts", "missing_message"]

# Which text of a compiled kernel's asm dict holds each target's final assembly.
ASM_KEY: dict[str, str] = {name: t.asm_key for name, t in targets.all_targets().items() if t.asm_key}
_COMMENT = {"ptx": "//", "amdgcn": ";", "sass": None, "s": ";", "msl": "//"}


def asm_text(asm: Mapping[str, str] | str, target: str, key: str | None) -> tuple[str, str]:
    """(stage name, text with comments removed) that the gates search."""
    stage_of = ASM_KEY.get(target)
    if stage_of is None and key is None:
        raise ValueError(f"unknown ISA target {target!r}; known: {', '.join(ASM_KEY)}")
    if isinstance(asm, str):
        stage, text = key or stage_of, asm
    else:
        stage = key or stage_of
        if stage not in asm:
            raise KeyError(f"no {stage!r} in the asm for {target}; it has {sorted(asm)}")
        text = asm[stage]
    marker = _COMMENT.get(stage)
    if marker:
        text = "\n".join(line.split(marker, 1)[0] for line in text.splitlines())
    return stage, text


_SASS_LINE = re.compile(r"^/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;")


def instruction_lines(text: str, stage: str) -> list[str]:
    """Lines that hold an instruction: no labels, directives, metadata or SASS encodings."""
    if stage == "sass":
        return [m.group(1) for m in map(_SASS_LINE.match, (l.strip() for l in text.splitlines())) if m]
    out = []
    in_metadata = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(".amdgpu_metadata"):
            in_metadata = True
        elif line.startswith(".end_amdgpu_metadata"):
            in_metadata = False
        elif not in_metadata and line and not line.startswith((".", "{", "}", "(", ")", "$")) \
                and not line.endswith(":"):
            out.append(line)
    return out


def mnemonic(line: str) -> str:
    line = re.sub(r"^@!?U?[%P]\w+\s+", "", line)  # PTX / SASS predicate guard
    return re.split(r"[\s,;(]", line, maxsplit=1)[0]


def instruction_counts(asm: Mapping[str, str] | str, target: str, patterns: Iterable[str] | None = None,
                       *, key: str | None = None) -> dict[str, int]:
    """How often each instruction occurs in the target's assembly (comments ignored).

    With ``patterns`` (regular expressions): ``{pattern: number of instruction lines matching it}``.
    Without: ``{mnemonic: count}`` over every instruction line, most frequent first.
    ``key`` picks another stage of the asm dict (e.g. "sass").
    """
    stage, text = asm_text(asm, target, key)
    lines = instruction_lines(text, stage)
    if patterns is None:
        return dict(collections.Counter(mnemonic(line) for line in lines).most_common())
    compiled = {p: re.compile(p) for p in patterns}
    return {p: sum(1 for line in lines if rx.search(line)) for p, rx in compiled.items()}


def missing_message(text: str, target: str, stage: str, missing: list[str], counts: dict[str, int]) -> str:
    lines = instruction_lines(text, stage)
    mnemonics = collections.Counter(mnemonic(line) for line in lines).most_common(12)
    # The closest lines: ones holding the missing pattern's first word ("wgmma", "mfma"), else
    # any matrix instruction ("mma"), else the first lines.
    near: list[str] = []
    for p in missing:
        words = re.findall(r"[A-Za-z][A-Za-z0-9]{2,}", p.replace("\\", " "))
        is_mma = re.search(r"(?i)mf?ma", p.replace("\\", "")) is not None
        for word in [re.escape(w) for w in words[:1]] + ([r"mf?ma"] if is_mma else []):
            hits = [line for line in lines if re.search(word, line, re.IGNORECASE)]
            if hits:
                near += [h for h in hits[:4] if h not in near]
                break
    excerpt = near or lines[:8]
    found = ", ".join(f"{p} x{n}" for p, n in counts.items() if n)
    return (
        f"{target} {stage}: no instruction matches {', '.join(missing)}"
        + (f" (found: {found})" if found else "")
        + f"\n  {len(lines)} instructions; most frequent: "
        + ", ".join(f"{m} x{n}" for m, n in mnemonics)
        + "\n  excerpt:\n    "
        + "\n    ".join(line[:160] for line in excerpt)
    )
