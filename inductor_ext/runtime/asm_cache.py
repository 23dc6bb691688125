"""On-disk cache of compiled kernel text (PTX, SASS, amdgcn...): one gzip JSON file per key.

Shared by the ISA gates (testing/isa.py) and compile-only templates (templates/cutedsl): reads
treat a missing, half-written or corrupt file as a miss, writes are atomic.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from inductor_ext.runtime.private_files import write_new
from inductor_ext.runtime.toolchain import user_cache_dir


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where compiled asm is cached: ``override``, ``$INDUCTOR_EXT_ISA_CACHE`` or the user cache."""
    return user_cache_dir("isa", "INDUCTOR_EXT_ISA_CACHE", override)


def read(path: Path, key: str) -> dict[str, str] | None:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            entry = json.load(f)
    except (OSError, EOFError, ValueError):
        return None  # missing, half-written by a crashed writer, or corrupt: compile again
    if entry.get("key") != key or not isinstance(entry.get("asm"), dict):
        return None
    return entry["asm"]


def write(path: Path, key: str, asm: dict[str, str]) -> None:
    data = gzip.compress(json.dumps({"key": key, "asm": asm}).encode(), compresslevel=3)
    write_new(path, data)  # atomic (concurrent sessions never read half a file) and the user's alone
