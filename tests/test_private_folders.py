"""Issue 46, "private means the contents too": a folder ext loads code from that others could
write, or that holds what others wrote, is moved aside, never repaired and trusted; binaries load
only with a record ext wrote; kernel modules run their source, never a planted ``__pycache__``;
dumps never follow a planted link; every folder ext makes is 0700, under INDUCTOR_EXT_CACHE_DIR
when that is set.

Root ignores file modes, so another user's files are planted as uid 65534 (``setpriv --reuid``),
and a folder root cannot change is tried without the override (``setpriv --bounding-set``).
"""

from __future__ import annotations

import errno
import importlib.util
import logging
import os
import py_compile
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from inductor_ext import dumps
from inductor_ext.runtime import asm_cache, cpu_library, private_files, tensor_watch, toolchain, triton_loader
from inductor_ext.runtime.kernel_source import KernelSource

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
NO_OVERRIDE = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner"]
as_root_with_setpriv = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="planting files as another user needs root and setpriv")
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or toolchain.gxx() is None, reason="needs gcc and g++")


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder every user can reach (pytest's tmp_path is root's alone), with ext's folders in it."""
    path = Path(tempfile.mkdtemp(prefix="ext_private_"))
    path.chmod(0o755)
    monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(path / "tools"))
    monkeypatch.setenv("INDUCTOR_EXT_KERNEL_DIR", str(path / "kernels"))
    yield path
    shutil.rmtree(path)


def plant(path: Path, data: bytes) -> None:
    """``path`` written by uid 65534 (its missing folders too)."""
    subprocess.run([*NOBODY, "sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", str(path)],
                   input=data, check=True)


def constructor_library(folder: Path, marker: Path) -> bytes:
    """A shared library whose constructor creates ``marker`` when it is loaded."""
    src = folder / "planted.c"
    src.write_text(f'#include <stdio.h>\n__attribute__((constructor)) static void planted(void) '
                   f'{{ FILE* f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(folder / "planted.so")], check=True)
    return (folder / "planted.so").read_bytes()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@as_root_with_setpriv
@needs_gcc
def test_a_shared_object_planted_with_its_digest_in_a_folder_that_was_open_is_never_loaded(shared: Path,
                                                                                          tmp_path: Path) -> None:
    marker = tmp_path / "planted-constructor-ran"
    library = constructor_library(tmp_path, marker)
    path = tensor_watch.library_path(toolchain.gxx())  # tensor_watch/<key>/: the key is predictable
    (shared / "tools").chmod(0o777)  # once open to everyone: another user plants the module and its record
    plant(path, library)
    plant(path.with_name(path.name + ".sha256"), (private_files.file_digest(path) + "\n").encode())
    module = tensor_watch.load.__wrapped__()  # type: ignore[attr-defined]  # not the process-wide cached one
    assert not marker.exists()
    assert module is not None and Path(module.__file__).read_bytes() != library  # built again, by ext
    assert mode(shared / "tools") == 0o700 and list(shared.glob("tools.untrusted-*"))


def _same_size_source(text: str, size: int) -> str:
    assert len(text.encode()) < size, "the planted source must fit in the real one's size"
    return text + "#" * (size - len(text.encode()) - 1) + "\n"


def _planted_bytecode(source_file: Path, evil: str, work: Path) -> bytes:
    """A ``.pyc`` of ``evil`` whose header matches ``source_file`` (its size and time): what the
    import system checks before it trusts bytecode over the source."""
    info = source_file.stat()
    fake = work / "evil.py"
    fake.write_text(_same_size_source(evil, info.st_size))
    os.utime(fake, (info.st_atime, info.st_mtime))
    return Path(py_compile.compile(str(fake), cfile=str(work / "evil.pyc"), doraise=True)).read_bytes()


def _kernel(tag: str) -> KernelSource:
    padding = "x" * 400  # room for the planted source, which must have the same size
    return KernelSource(name="answer", source=f"def answer():\n    return 42  # {tag} {padding}\n",
                        template="test.kernel", config={})


@as_root_with_setpriv
def test_a_module_and_bytecode_planted_in_a_kernel_folder_that_was_open_never_run(shared: Path,
                                                                                  tmp_path: Path) -> None:
    ks = _kernel(uuid.uuid4().hex)
    marker = tmp_path / "planted-bytecode-ran"
    folder = triton_loader.kernel_dir()
    folder.chmod(0o777)
    source = folder / f"answer_{ks.source_hash}.py"
    plant(source, ks.source.encode())  # the expected source: ext would not rewrite it
    evil = f"open({str(marker)!r}, 'w').close()\ndef answer():\n    return 0\n"
    plant(Path(importlib.util.cache_from_source(str(source))), _planted_bytecode(source, evil, tmp_path))
    assert triton_loader.load_module(ks).answer() == 42
    assert not marker.exists()


def test_bytecode_beside_a_kernel_module_is_never_read_even_in_a_private_folder(shared: Path, tmp_path: Path) -> None:
    """A kernel module runs the source ext rendered: a ``__pycache__`` (here one left by an older ext)
    is neither trusted nor written."""
    ks = _kernel(uuid.uuid4().hex)
    marker = tmp_path / "stale-bytecode-ran"
    source = triton_loader.kernel_dir() / f"answer_{ks.source_hash}.py"
    source.write_text(ks.source)
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.parent.mkdir()
    evil = f"open({str(marker)!r}, 'w').close()\ndef answer():\n    return 0\n"
    cached.write_bytes(_planted_bytecode(source, evil, tmp_path))
    module = triton_loader.load_module(ks)
    assert module.answer() == 42 and not marker.exists()
    assert list(cached.parent.iterdir()) == [cached]  # and no bytecode of ours written either
    assert module.__file__ == str(source)


@needs_gcc
def test_a_binary_with_no_record_is_built_again_not_loaded(shared: Path, tmp_path: Path) -> None:
    """Issue 47's surviving mutant (``private_files.py:79``): a library without a ``.sha256`` record,
    in the user's own private folder, is never loaded."""
    marker = tmp_path / "unrecorded-library-ran"
    kernel = KernelSource(name="ext_private_test_add_one", language="cpp", template="test.cpp", config={},
                          source=f'// {uuid.uuid4().hex}\nextern "C" int ext_private_test_add_one(int x) {{ return x + 1; }}\n')
    gxx = toolchain.gxx()
    assert gxx is not None
    path = cpu_library.library_path(kernel, (), gxx)
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_bytes(constructor_library(tmp_path, marker))
    assert cpu_library.function(kernel, ())(41) == 42
    assert not marker.exists() and private_files.holds_what_was_built(path)


def test_a_record_someone_else_wrote_or_can_write_is_no_record(tmp_path: Path) -> None:
    path = tmp_path / "shim.so"
    path.write_bytes(b"built")
    private_files.record_digest(path)
    assert private_files.holds_what_was_built(path)
    sidecar = path.with_name("shim.so.sha256")
    sidecar.chmod(0o666)
    assert not private_files.holds_what_was_built(path)
    sidecar.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(sidecar, 65534, 65534)
        assert not private_files.holds_what_was_built(path)
        os.chown(sidecar, 0, 0)
        os.chown(path, 65534, 65534)
        assert not private_files.holds_what_was_built(path)


def test_a_linked_record_is_no_record(tmp_path: Path) -> None:
    path = tmp_path / "shim.so"
    path.write_bytes(b"built")
    (tmp_path / "elsewhere").write_text(private_files.file_digest(path) + "\n")
    path.with_name("shim.so.sha256").symlink_to(tmp_path / "elsewhere")
    assert not private_files.holds_what_was_built(path)


@as_root_with_setpriv
def test_a_link_planted_in_a_dump_folder_is_not_followed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = Path(tempfile.mkdtemp(prefix="ext_dumps_"))
    try:
        (root / "g0").mkdir()
        for folder in (root, root / "g0"):
            folder.chmod(0o777)
        victim = tmp_path / "precious.txt"
        victim.write_text("mine")
        subprocess.run([*NOBODY, "ln", "-s", str(victim), str(root / "g0" / "output_code.py")], check=True)
        graph = torch.fx.symbolic_trace(lambda x: x)
        with caplog.at_level(logging.WARNING, logger="inductor_ext"):
            assert dumps.write(root, "g0", "# output code\n", graph, []) == []
        assert victim.read_text() == "mine"
        assert "dumps never write through links" in caplog.text
    finally:
        shutil.rmtree(root)


def test_dump_files_replace_a_link_at_their_name_never_write_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "precious.txt"
    victim.write_text("mine")
    (tmp_path / "output_code.py").symlink_to(victim)
    private_files.write_new(tmp_path / "output_code.py", b"# dump\n")
    assert victim.read_text() == "mine" and (tmp_path / "output_code.py").read_text() == "# dump\n"
    assert not (tmp_path / "output_code.py").is_symlink()


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """Folders must come out 0700 whatever the umask (mkdir's mode is narrowed by it, never widened)."""
    old = os.umask(0)
    yield
    os.umask(old)


def test_folders_ext_makes_are_0700_at_every_level(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   loose_umask: None) -> None:
    monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(tmp_path / "a" / "b" / "tools"))
    tools = toolchain.tool_cache_dir()
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", tools)] == [0o700] * 3
    out = tools / "cpu_kernels" / "0123abcd" / "k.so"
    toolchain.build_once(out, lambda dest: ["sh", "-c", f"rm -f {dest} && printf built > {dest} && chmod 777 {dest}"],
                         "a kernel")
    assert mode(tools / "cpu_kernels") == 0o700 and mode(out.parent) == 0o700
    assert mode(out) & 0o077 == 0 and private_files.holds_what_was_built(out)
    graph = torch.fx.symbolic_trace(lambda x: x)
    dumps.write(tmp_path / "d1" / "d2", "g0", "# output code\n", graph, [])
    assert [mode(p) for p in (tmp_path / "d1", tmp_path / "d1" / "d2", tmp_path / "d1" / "d2" / "g0")] == [0o700] * 3


def test_the_default_cache_folders_and_their_parents_are_made_0700(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  loose_umask: None) -> None:
    for var in ("INDUCTOR_EXT_CACHE_DIR", "INDUCTOR_EXT_TOOL_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    tools = toolchain.tool_cache_dir()
    assert tools == tmp_path / "home" / ".cache" / "inductor_ext" / "tools"
    assert [mode(p) for p in (tools.parent.parent.parent, tools.parent.parent, tools.parent, tools)] == [0o700] * 4


def test_with_only_the_cache_dir_set_every_folder_lives_under_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("INDUCTOR_EXT_TOOL_DIR", "INDUCTOR_EXT_KERNEL_DIR", "INDUCTOR_EXT_ISA_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "mine"))
    assert toolchain.tool_cache_dir() == tmp_path / "mine" / "tools"
    assert triton_loader.kernel_dir() == tmp_path / "mine" / "kernels"
    assert asm_cache.cache_dir() == tmp_path / "mine" / "isa"
    assert mode(tmp_path / "mine") == 0o700
    monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(tmp_path / "tools"))  # the specific variable still wins
    assert toolchain.tool_cache_dir() == tmp_path / "tools"


def _folder_with(tmp_path: Path, name: str = "tools") -> Path:
    folder = tmp_path / name
    (folder / "sub").mkdir(parents=True, mode=0o700)
    folder.chmod(0o700)
    (folder / "sub" / "kept.txt").write_text("x")
    return folder


def _moved_aside(folder: Path) -> bool:
    return bool(list(folder.parent.glob(f"{folder.name}.untrusted-*"))) and not (folder / "sub").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root")
def test_a_folder_holding_another_users_file_is_moved_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = _folder_with(tmp_path)
    os.chown(folder / "sub" / "kept.txt", 65534, 65534)
    with caplog.at_level(logging.WARNING):
        private_files.private_dir(folder, "INDUCTOR_EXT_TOOL_DIR")
    assert _moved_aside(folder) and mode(folder) == 0o700
    assert "kept.txt" in caplog.text and "moved" in caplog.text


def test_a_folder_holding_a_file_others_can_write_is_moved_aside(tmp_path: Path) -> None:
    folder = _folder_with(tmp_path)
    (folder / "sub" / "kept.txt").chmod(0o646)
    private_files.private_dir(folder)
    assert _moved_aside(folder)


def test_a_folder_holding_a_subfolder_others_can_write_is_moved_aside(tmp_path: Path) -> None:
    folder = _folder_with(tmp_path)
    (folder / "sub").chmod(0o770)
    private_files.private_dir(folder)
    assert _moved_aside(folder)


def test_a_private_folder_is_kept_with_its_contents_and_links(tmp_path: Path) -> None:
    """What ext (or the toolchain install) wrote stays: links of the user's (lld's library links)
    are fine, and a folder readable by others is not a risk."""
    folder = _folder_with(tmp_path)
    folder.chmod(0o755)
    (folder / "sub" / "link").symlink_to("kept.txt")
    assert private_files.private_dir(folder) == folder
    assert (folder / "sub" / "kept.txt").read_text() == "x" and mode(folder) == 0o755
    assert not list(tmp_path.glob("tools.untrusted-*"))


def test_a_folder_is_walked_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder_with(tmp_path)
    walks = []
    real = private_files._first_foreign_entry
    monkeypatch.setattr(private_files, "_first_foreign_entry", lambda p: walks.append(p) or real(p))
    for _ in range(3):
        private_files.private_dir(folder)
    assert walks == [folder]
    folder.chmod(0o777)  # the folder's own mode is looked at every time
    private_files.private_dir(folder)
    assert _moved_aside(folder)


def test_an_entry_that_vanishes_mid_walk_does_not_end_the_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A builder's temporary file removed while the folder is walked is skipped, and the walk goes
    on to the entries after it (a planted one among them)."""
    folder = tmp_path / "tools"
    folder.mkdir(mode=0o700)
    (folder / "planted").write_text("x")
    (folder / "planted").chmod(0o666)
    monkeypatch.setattr(private_files.os, "walk", lambda top: iter([(str(top), [], ["gone.tmp", "planted"])]))
    assert private_files._first_foreign_entry(folder) == folder / "planted"


def test_the_shared_base_folder_is_checked_but_not_walked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache root holds other things (autotune.db, CI's virtual environment): only its own mode counts."""
    base = _folder_with(tmp_path, "inductor_ext")
    (base / "sub" / "kept.txt").chmod(0o666)  # not ext's to judge
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(base))
    monkeypatch.delenv("INDUCTOR_EXT_TOOL_DIR", raising=False)
    assert toolchain.tool_cache_dir() == base / "tools"
    assert (base / "sub" / "kept.txt").exists()


@as_root_with_setpriv
def test_a_folder_that_cannot_be_moved_aside_is_refused_naming_the_setting(tmp_path: Path) -> None:
    parent = Path(tempfile.mkdtemp(prefix="ext_locked_"))
    try:
        (parent / "kernels").mkdir()
        (parent / "kernels").chmod(0o777)
        parent.chmod(0o555)
        code = ("import sys; from pathlib import Path; from inductor_ext.runtime import private_files as p\n"
                "try:\n    p.private_dir(Path(sys.argv[1]), 'INDUCTOR_EXT_KERNEL_DIR')\n"
                "except p.UnsafeDirectoryError as e:\n    print(e); raise SystemExit(3)\n")
        done = subprocess.run([*NO_OVERRIDE, sys.executable, "-c", code, str(parent / "kernels")],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 3, done.stderr
        assert "could not be moved aside" in done.stdout and "INDUCTOR_EXT_KERNEL_DIR" in done.stdout
        assert mode(parent / "kernels") == 0o777  # not repaired either
    finally:
        parent.chmod(0o755)
        shutil.rmtree(parent)


def test_doctor_finds_zig_without_writing_its_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ziglang").mkdir()
    (tmp_path / "ziglang" / "zig").write_text("")
    monkeypatch.setattr(toolchain, "package_dirs", lambda name: [tmp_path / "ziglang"] if name == "ziglang" else [])
    monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(tmp_path / "tools"))
    assert toolchain._zig_ld_lld(write=False) == f"{tmp_path / 'ziglang' / 'zig'} ld.lld"
    toolchain.ld_lld(write=False)
    assert not (tmp_path / "tools").exists()
    wrapper = Path(toolchain._zig_ld_lld())  # a compile does write it, recorded, the user's alone
    assert wrapper.parent.parent == tmp_path / "tools" and mode(wrapper) == 0o700
    assert private_files.holds_what_was_built(wrapper)


def test_folders_are_0700_even_under_a_umask_that_takes_the_users_own_bits(tmp_path: Path) -> None:
    old = os.umask(0o277)
    try:
        private_files.make_private_dirs(tmp_path / "a" / "b")
    finally:
        os.umask(old)
    assert mode(tmp_path / "a") == 0o700 and mode(tmp_path / "a" / "b") == 0o700


def test_a_folder_another_process_moved_aside_first_is_made_again(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder_with(tmp_path)
    folder.chmod(0o777)

    def raced(src: Path, dst: Path) -> None:
        os.replace(src, tmp_path / "moved-by-the-other-process")
        raise FileNotFoundError(src)

    monkeypatch.setattr(private_files.os, "rename", raced)
    assert private_files.private_dir(folder) == folder and mode(folder) == 0o700


def test_the_shared_base_folder_open_to_others_is_moved_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = _folder_with(tmp_path, "inductor_ext")
    base.chmod(0o777)
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(base))
    monkeypatch.delenv("INDUCTOR_EXT_TOOL_DIR", raising=False)
    toolchain.tool_cache_dir()
    assert _moved_aside(base) and mode(base) == 0o700


def test_inspect_reads_the_source_that_ran_not_the_file_as_it_is_later(shared: Path) -> None:
    import inspect

    ks = _kernel(uuid.uuid4().hex)
    module = triton_loader.load_module(ks)
    Path(module.__file__).write_text("def answer():\n    return 'changed on disk'\n")
    assert inspect.getsource(module.answer) == ks.source


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root")
def test_a_dump_folder_of_another_user_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "dumps").mkdir()
    os.chown(tmp_path / "dumps", 65534, 65534)
    graph = torch.fx.symbolic_trace(lambda x: x)
    with caplog.at_level(logging.WARNING, logger="inductor_ext"):
        assert dumps.write(tmp_path / "dumps", "g0", "# output code\n", graph, []) == []
    assert "belongs to uid 65534" in caplog.text and not (tmp_path / "dumps" / "g0" / "output_code.py").exists()


def test_a_dump_file_replaces_a_link_at_its_name(tmp_path: Path) -> None:
    victim = tmp_path / "precious.txt"
    victim.write_text("mine")
    (tmp_path / "output_code.py").symlink_to(victim)
    dumps._write(tmp_path / "output_code.py", "# dump\n")  # even past the folder check (a link made since)
    assert victim.read_text() == "mine"


def test_a_folder_of_another_user_is_refused_naming_it_both_uids_and_the_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal says which folder, whose it is, who asks and what to set instead; for a folder
    no setting chose it names no setting. (Another user is faked by the uid ext asks for.)"""
    folder = tmp_path / "kernels"
    folder.mkdir(mode=0o700)
    owner = folder.stat().st_uid
    monkeypatch.setattr(private_files.os, "getuid", lambda: owner + 4242)
    with pytest.raises(private_files.UnsafeDirectoryError) as refused:
        private_files.private_dir(folder, "INDUCTOR_EXT_KERNEL_DIR")
    assert str(refused.value) == (
        f"inductor-ext will not load code from {folder}: it belongs to uid {owner}, not to you (uid {owner + 4242}), "
        "so another user could plant files there (set INDUCTOR_EXT_KERNEL_DIR to a folder of yours)")
    with pytest.raises(private_files.UnsafeDirectoryError) as refused:
        private_files.private_dir(folder)
    assert str(refused.value).endswith("so another user could plant files there")


def test_a_folder_that_cannot_be_moved_aside_is_refused_naming_it_why_and_the_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Moving an open folder aside can fail (a mount point, a read-only parent): the error names the
    folder, why it is not trusted, why the move failed and the setting to change; it is not repaired."""
    folder = _folder_with(tmp_path, "kernels")
    folder.chmod(0o777)

    def busy(src: Path, dst: Path) -> None:
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(src))

    monkeypatch.setattr(private_files.os, "rename", busy)
    with pytest.raises(private_files.UnsafeDirectoryError) as refused:
        private_files.private_dir(folder, "INDUCTOR_EXT_KERNEL_DIR")
    assert str(refused.value) == (
        f"inductor-ext will not load code from {folder}: it is writable by other users, so anything in it may have "
        f"been planted, and it could not be moved aside ({os.strerror(errno.EBUSY)}) "
        "(set INDUCTOR_EXT_KERNEL_DIR to a folder of yours)")
    assert mode(folder) == 0o777 and (folder / "sub" / "kept.txt").exists()
    with pytest.raises(private_files.UnsafeDirectoryError) as refused:
        private_files.private_dir(folder)
    assert str(refused.value).endswith(f"could not be moved aside ({os.strerror(errno.EBUSY)})")


def test_a_folder_another_process_makes_meanwhile_is_kept_and_its_subfolders_still_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes making the same folders race: the one that finds a folder made since it looked
    leaves that folder as it is (it is checked like any existing one) and goes on to make the rest."""
    real = os.path.lexists

    def made_meanwhile(path: Any) -> bool:
        if Path(path) == tmp_path / "a" and not real(path):
            (tmp_path / "a").mkdir(mode=0o750)  # the other process, right after this one looked
            return False
        return real(path)

    monkeypatch.setattr(private_files.os.path, "lexists", made_meanwhile)
    private_files.make_private_dirs(tmp_path / "a" / "b" / "c")
    assert mode(tmp_path / "a") == 0o750
    assert mode(tmp_path / "a" / "b") == 0o700 and mode(tmp_path / "a" / "b" / "c") == 0o700


def test_the_temporary_file_is_made_beside_the_file_it_replaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not in the shared temporary folder: there others could see or swap it, and a rename from
    another filesystem is no rename (os.replace fails, or is not atomic)."""
    renames = []
    real = os.replace
    monkeypatch.setattr(private_files.os, "replace", lambda src, dst: renames.append(Path(src)) or real(src, dst))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "shared-tmp"))  # where a default temp file would go
    (tmp_path / "shared-tmp").mkdir()
    target = tmp_path / "private" / "k.so"
    target.parent.mkdir()
    private_files.write_new(target, b"built")
    assert target.read_bytes() == b"built" and [p.parent for p in renames] == [target.parent]
    assert list((tmp_path / "shared-tmp").iterdir()) == [] and list(target.parent.iterdir()) == [target]


def test_the_warning_says_where_the_folder_went_named_by_time_and_process(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """The user's files are not lost, only moved: the one warning names the folder, where it went
    and why, and the new name says when (sortable) and which process moved it."""
    folder = _folder_with(tmp_path)
    folder.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="inductor_ext"):
        private_files.private_dir(folder)
    (aside,) = tmp_path.glob("tools.untrusted-*")
    assert re.fullmatch(rf"tools\.untrusted-20\d{{6}}-\d{{6}}-{os.getpid()}", aside.name), aside.name
    assert (aside / "sub" / "kept.txt").read_text() == "x"
    why = "it is writable by other users, so anything in it may have been planted"
    assert caplog.messages == [f"inductor-ext: moved {folder} aside to {aside} and made a new private one: {why}"]
