"""Folders and files ext executes or loads code from, safe on a machine many people log into.

ext imports the Triton modules it renders, loads the C++ shims it builds and runs the linker it
unpacks. A folder another user can write to would let them plant a file under a name ext will
load (names are predictable: they hash public sources) and have it run in every other user's
process. So every such folder is private to its user: created 0700, and an existing one must
belong to the user. One that others can write, or that holds anything others wrote or can write,
is not repaired (what they planted would stay): it is moved aside and made again, empty. And a
cached file is checked against what it should hold before it is loaded: a kernel module against
its source, a built binary against the digest ext recorded beside it when it built it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

_DIGEST_SUFFIX = ".sha256"


class UnsafeDirectoryError(PermissionError):
    """A folder ext would load code from belongs to another user, or could not be replaced."""


_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
# folders whose contents were walked and found private, by (path, device, inode): once private,
# nobody else can add to them, so each is walked once per process
_walked: set[tuple[str, int, int]] = set()
_walk_lock = threading.Lock()


def private_dir(path: Path, setting: str | None = None, *, contents: bool = True) -> Path:
    """``path``, a folder only this user can have written to. A missing folder is created 0700
    (each missing parent too). An existing one must belong to this user (else
    :class:`UnsafeDirectoryError`). One writable by group or others, or holding (at any depth,
    ``contents``) an entry of another user or one writable by group or others, may hold planted
    files: it is not repaired and trusted but moved aside (``<name>.untrusted-<time>``, one
    warning) and made again, empty. ``setting`` names the option or environment variable that
    chose the folder, for the error message."""
    if not hasattr(os, "getuid"):  # Windows: no POSIX owners or modes to check
        path.mkdir(parents=True, exist_ok=True)
        return path
    make_private_dirs(path)
    info = path.stat()  # a symlink to a folder is judged by the folder it names
    if info.st_uid != os.getuid():
        raise UnsafeDirectoryError(
            f"inductor-ext will not load code from {path}: it belongs to uid {info.st_uid}, not to you "
            f"(uid {os.getuid()}), so another user could plant files there{_where(setting)}")
    why = _untrusted_because(path, info, contents)
    if why:
        _move_aside(path, why, setting)
        make_private_dirs(path)
    return path


def make_private_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents, each 0700 whatever the umask (never looser)."""
    missing = []
    while not os.path.lexists(path) and path.parent != path:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue  # made meanwhile by another process: checked like any existing folder
        folder.chmod(0o700)  # mkdir's mode is narrowed by the umask, never widened: this is exact


def is_private_entry(info: os.stat_result) -> bool:
    """Whether an entry (``os.lstat``) belongs to this user and nobody else can write it (a
    symlink's own mode means nothing: only its owner is checked)."""
    if info.st_uid != os.getuid():
        return False
    return stat.S_ISLNK(info.st_mode) or not info.st_mode & _WRITABLE_BY_OTHERS


def _untrusted_because(path: Path, info: os.stat_result, contents: bool) -> str | None:
    if info.st_mode & _WRITABLE_BY_OTHERS:
        return "it is writable by other users, so anything in it may have been planted"
    key = (str(path), info.st_dev, info.st_ino)
    if not contents or key in _walked:
        return None
    bad = _first_foreign_entry(path)
    if bad is not None:
        return f"it holds {bad}, which another user wrote or can write"
    with _walk_lock:
        _walked.add(key)
    return None


def _first_foreign_entry(folder: Path) -> Path | None:
    """The first entry under ``folder`` (any depth, links not followed) that is not private."""
    for root, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            entry = Path(root) / name
            try:
                if not is_private_entry(entry.lstat()):
                    return entry
            except FileNotFoundError:
                continue  # removed while we looked (a builder's temporary file)
    return None


def _move_aside(path: Path, why: str, setting: str | None) -> None:
    aside = path.with_name(f"{path.name}.untrusted-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # another process of ours moved it first
    except OSError as e:
        raise UnsafeDirectoryError(
            f"inductor-ext will not load code from {path}: {why}, and it could not be moved aside "
            f"({e.strerror}){_where(setting)}") from None
    log.warning("inductor-ext: moved %s aside to %s and made a new private one: %s", path, aside, why)


def _where(setting: str | None) -> str:
    return f" (set {setting} to a folder of yours)" if setting else ""


def write_if_different(path: Path, text: str) -> Path:
    """``path`` holding exactly ``text``: an existing file with other content (a planted or
    half-written one) is replaced atomically before anyone loads it."""
    try:
        if path.read_text() == text:
            return path
    except (OSError, UnicodeDecodeError):
        pass
    write_new(path, text.encode())
    return path


def write_new(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically, never following a link: the bytes go to a new
    temporary file beside it (``mkstemp``: a fresh random name opened ``O_EXCL|O_NOFOLLOW``)
    that is renamed over ``path`` (a link there is replaced, not written through)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
        os.replace(tmp, path)  # atomic: a concurrent loader never sees half a file
    except BaseException:
        os.unlink(tmp)
        raise


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_digest(path: Path) -> None:
    """Remember what ext built at ``path`` (beside it), for :func:`holds_what_was_built`."""
    sidecar = path.with_name(path.name + _DIGEST_SUFFIX)
    write_if_different(sidecar, file_digest(path) + "\n")


def holds_what_was_built(path: Path) -> bool:
    """Whether ``path`` is the file ext built there: it and its digest record (beside it) are
    plain files of this user that nobody else can write, and the digest matches. A file without
    a record, with a record someone else wrote, or changed since is not loaded: the caller builds
    it again."""
    sidecar = path.with_name(path.name + _DIGEST_SUFFIX)
    try:
        for f in (path, sidecar):
            info = f.lstat()
            if not stat.S_ISREG(info.st_mode) or not is_private_entry(info):
                return False
        return sidecar.read_text().strip() == file_digest(path)
    except (OSError, UnicodeDecodeError):
        return False
