"""Issue 31: cache folders come from platformdirs (macOS users get ~/Library/Caches), and the
environment variables still override them."""

from __future__ import annotations

from pathlib import Path

import platformdirs
import pytest

from inductor_ext.autotune.cache import default_cache_path
from inductor_ext.runtime import toolchain


@pytest.fixture()
def mac_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """platformdirs answering as it does on macOS, for a home folder under tmp_path."""
    caches = tmp_path / "Library" / "Caches"
    monkeypatch.setattr(platformdirs, "user_cache_dir", lambda name, appauthor=None: str(caches / name))
    monkeypatch.delenv("INDUCTOR_EXT_CACHE_DIR", raising=False)
    monkeypatch.delenv("INDUCTOR_EXT_TOOL_DIR", raising=False)
    return caches


def test_autotune_cache_lives_in_the_platform_cache_folder(mac_home, monkeypatch, tmp_path):
    assert default_cache_path() == mac_home / "inductor_ext" / "autotune.db"
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_path() == tmp_path / "mine" / "autotune.db"


def test_tool_folder_lives_in_the_platform_cache_folder_private(mac_home, monkeypatch, tmp_path):
    assert toolchain.tool_cache_dir() == mac_home / "inductor_ext" / "tools"
    assert (mac_home / "inductor_ext").stat().st_mode & 0o077 == 0
    monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(tmp_path / "tools"))
    assert toolchain.tool_cache_dir() == tmp_path / "tools"
