"""Files ext executes or loads live in folders private to the user and hold what they should
(runtime/private_files.py): on a shared machine nobody can plant code ext will run."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from inductor_ext.runtime import private_files, toolchain, triton_loader
from inductor_ext.runtime.kernel_source import KernelSource

KERNEL = "def answer():\n    return 42\n"


@pytest.fixture
def kernel_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "kernels"
    monkeypatch.setenv("INDUCTOR_EXT_KERNEL_DIR", str(path))
    return path


def test_kernel_modules_default_to_a_private_folder_of_the_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INDUCTOR_EXT_KERNEL_DIR", raising=False)
    monkeypatch.delenv("INDUCTOR_EXT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = triton_loader.kernel_dir()
    assert path == tmp_path / "cache" / "inductor_ext" / "kernels"  # not one world path under /tmp
    for folder in (path, path.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.getuid()


def test_a_planted_module_under_the_expected_name_is_not_executed(kernel_dir: Path, tmp_path: Path) -> None:
    ks = KernelSource(name="answer", source=KERNEL, template="test.kernel", config={})
    marker = tmp_path / "planted-code-ran"
    kernel_dir.mkdir(mode=0o700)
    planted = kernel_dir / f"answer_{ks.source_hash}.py"
    planted.write_text(f"open({str(marker)!r}, 'w').close()\ndef answer():\n    return 0\n")
    module = triton_loader.load_module(ks)
    assert not marker.exists()
    assert module.answer() == 42 and planted.read_text() == KERNEL


def test_a_folder_writable_by_others_is_replaced_not_trusted(kernel_dir: Path) -> None:
    """Issue 46: what others could write before is not made safe by taking their write access away."""
    kernel_dir.mkdir()
    kernel_dir.chmod(0o777)
    (kernel_dir / "old.py").write_text("x = 1\n")
    assert triton_loader.kernel_dir() == kernel_dir
    assert stat.S_IMODE(kernel_dir.stat().st_mode) == 0o700 and list(kernel_dir.iterdir()) == []
    (aside,) = kernel_dir.parent.glob("kernels.untrusted-*")
    assert (aside / "old.py").read_text() == "x = 1\n"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="making a folder that belongs to another user needs root")
def test_a_folder_of_another_user_is_refused(kernel_dir: Path) -> None:
    kernel_dir.mkdir()
    os.chown(kernel_dir, 65534, 65534)  # nobody
    with pytest.raises(private_files.UnsafeDirectoryError, match=r"belongs to uid 65534.*INDUCTOR_EXT_KERNEL_DIR"):
        triton_loader.kernel_dir()


def test_a_built_binary_changed_since_is_built_again(tmp_path: Path) -> None:
    out = tmp_path / "tools" / "shim.so"
    builds = []

    def command(dest: str) -> list[str]:
        builds.append(dest)
        return ["sh", "-c", f"printf built > {dest}"]

    toolchain.build_once(out, command, "a shim")
    toolchain.build_once(out, command, "a shim")
    assert len(builds) == 1  # reused while it holds what was built
    out.write_bytes(b"planted")
    toolchain.build_once(out, command, "a shim")
    assert len(builds) == 2 and out.read_bytes() == b"built"


def test_a_written_file_is_private_and_a_failed_write_leaves_no_temporary(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "k.py"
    private_files.write_new(target, b"x = 1\n")
    assert target.read_bytes() == b"x = 1\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    monkeypatch.setattr(private_files.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        private_files.write_new(target, b"x = 2\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.py"] and target.read_bytes() == b"x = 1\n"


def test_without_posix_owners_a_folder_is_made_with_its_parents_and_kept(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delattr(private_files.os, "getuid")  # as on Windows
    path = tmp_path / "a" / "b"
    assert private_files.private_dir(path) == path and path.is_dir()
    (path / "kept").write_text("")
    assert private_files.private_dir(path) == path and (path / "kept").exists()
