"""Folders and files ext executes or loads code from, safe on a machine many people log into.

ext imports the Triton modules it renders, loads the C++ shims it builds and runs the linker it
unpacks. A folder another user can write to would let them plant a file under a name ext will
load (names are predictable: they hash public sources) and have it run in every other user's
process. So every such folder is private to its user: created 0700, and an existing one must
belong to the user and be writable by no one else. And a cached file is checked against what it
should hold before it is loaded: a kernel module against its source, a built binary against the
digest recorded when ext built it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
from pathlib import Path

log = logging.getLogger(__name__)

_DIGEST_SUFFIX = ".sha256"


class UnsafeDirectoryError(PermissionError):
    """A folder ext would load code from belongs to another user."""


def private_dir(path: Path, setting: str | None = None) -> Path:
    """``path``, created with mode 0700 if missing. An existing folder must belong to this user;
    write access for group or others is taken away (with one log line). ``setting`` names the
    option or environment variable that chose the folder, for the error message."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not hasattr(os, "getuid"):  # Windows: no POSIX owners or modes to check
        return path
    info = path.stat()
    if info.st_uid != os.getuid():
        where = f" (set {setting} to a folder of yours)" if setting else ""
        raise UnsafeDirectoryError(
            f"inductor-ext will not load code from {path}: it belongs to uid {info.st_uid}, not to you "
            f"(uid {os.getuid()}), so another user could plant files there{where}")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        path.chmod(stat.S_IMODE(info.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
        log.warning("inductor-ext: %s was writable by other users; made it writable by you alone", path)
    return path


def write_if_different(path: Path, text: str) -> Path:
    """``path`` holding exactly ``text``: an existing file with other content (a planted or
    half-written one) is replaced atomically before anyone loads it."""
    try:
        if path.read_text() == text:
            return path
    except (OSError, UnicodeDecodeError):
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # atomic: a concurrent loader never sees half a file
    return path


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_digest(path: Path) -> None:
    """Remember what ext built at ``path`` (beside it), for :func:`holds_what_was_built`."""
    sidecar = path.with_name(path.name + _DIGEST_SUFFIX)
    write_if_different(sidecar, file_digest(path) + "\n")


def holds_what_was_built(path: Path) -> bool:
    """Whether ``path`` is the file ext built there (its digest matches the recorded one). A file
    without a record, or changed since, is not loaded: the caller builds it again."""
    sidecar = path.with_name(path.name + _DIGEST_SUFFIX)
    try:
        return path.is_file() and sidecar.read_text().strip() == file_digest(path)
    except OSError:
        return False
