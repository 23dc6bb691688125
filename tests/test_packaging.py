"""inductor-ext installs on every platform it targets, and runs where an optional toolchain is not
installed.

Resolution per platform uses uv (`uv pip compile --python-platform`, against PyPI): pip's
`--platform` picks wheels for the target but evaluates environment markers for the host, so
`pip install --dry-run --platform macosx_14_0_arm64` of torch alone fails here on torch's own
`platform_system == "Linux"` CUDA dependencies. These tests need PyPI (marked ``network``:
`pytest -m "not network"` leaves them out offline); each resolution takes 1-3 s once uv's cache
holds the metadata.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import _hidden_compile
import pytest
from _hidden_compile import HIDDEN

from inductor_ext.runtime import extras
from inductor_ext.templates import registry

ROOT = Path(__file__).resolve().parent.parent

# uv's platform name, and what must (and must not) be installed there with `.[dev]`.
PLATFORMS = {
    "macos-arm64": ("aarch64-apple-darwin", {"torch"}, {"triton", "flydsl", "nvidia-cutlass-dsl", "intel-sycl-rt"}),
    "linux-x86_64": ("x86_64-manylinux_2_28", {"torch", "triton", "flydsl", "nvidia-cutlass-dsl", "helion",
                                               "intel-sycl-rt", "quack-kernels"}, set()),
    "linux-aarch64": ("aarch64-manylinux_2_28", {"torch", "triton", "nvidia-cutlass-dsl", "quack-kernels", "helion"},
                      {"flydsl", "intel-sycl-rt"}),
}
TOOLCHAINS = {"triton", "flydsl", "nvidia-cutlass-dsl", "quack-kernels", "helion", "nvidia-matmul-heuristics",
              "intel-sycl-rt", "intel-opencl-rt"}


def _resolve(platform: str, extra: str | None) -> set[str]:
    uv = shutil.which("uv")
    assert uv, "uv is not installed: pip install -e '.[dev]' brings it"
    command = [uv, "pip", "compile", "--quiet", "--no-config", "--no-header", "--python-version", "3.11",
               "--python-platform", platform, "--only-binary", ":all:", str(ROOT / "pyproject.toml")]
    if extra:
        command += ["--extra", extra]
    # torch 2.15's macOS wheels are macosx_14_0_arm64 (uv's default target is macOS 13)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MACOSX_DEPLOYMENT_TARGET": "14.0"})
    assert done.returncode == 0, f"pip install inductor-ext[{extra or ''}] does not resolve on {platform}:\n{done.stderr}"
    return {re.match(r"[A-Za-z0-9_.\-]+", line).group(0).lower()
            for line in done.stdout.splitlines() if line and not line.startswith((" ", "#"))}


@pytest.mark.network
@pytest.mark.parametrize("name", PLATFORMS)
def test_the_base_install_resolves_with_no_gpu_toolchain(name: str) -> None:
    platform, _, _ = PLATFORMS[name]
    resolved = _resolve(platform, None)
    assert "torch" in resolved and "numpy" in resolved
    # torch itself brings Triton on Linux; nothing else of a GPU toolchain comes with the base
    assert not (resolved & TOOLCHAINS) - {"triton"}, resolved & TOOLCHAINS


@pytest.mark.network
@pytest.mark.parametrize("name", PLATFORMS)
def test_dev_pulls_every_toolchain_the_platform_has(name: str) -> None:
    platform, present, absent = PLATFORMS[name]
    resolved = _resolve(platform, "dev")
    assert present <= resolved, present - resolved
    assert not (absent & resolved), absent & resolved


@pytest.fixture(scope="module")
def hidden() -> dict[str, Any]:
    """One process: imports and compiles with every toolchain hidden, then lists each case in turn."""
    return _hidden_compile.run()["result"]


def test_with_no_toolchain_the_package_imports_and_the_cpu_preset_compiles(hidden: dict[str, Any]) -> None:
    assert hidden["matches"]  # right numbers, and ext's own decision path ran without Triton


@pytest.mark.parametrize("name", HIDDEN)
def test_a_missing_toolchain_lists_its_families_with_what_to_install(name: str, hidden: dict[str, Any]) -> None:
    expected = HIDDEN[name][2]
    unavailable = hidden["cases"][name]["unavailable"]
    assert expected <= set(unavailable), expected - set(unavailable)
    assert not {f for f in unavailable if f.startswith(("cpp.", "metal."))}  # theirs is all here
    if name != "all":  # only that toolchain's families
        others = set().union(*(v[2] for k, v in HIDDEN.items() if k not in (name, "all"))) - expected
        assert not others & set(unavailable), others & set(unavailable)
    for family in expected:
        assert "install" in unavailable[family], unavailable[family]
    for preset, lacks in hidden["cases"][name]["presets"].items():  # every preset still resolves
        assert isinstance(lacks, dict), f"preset {preset}: {lacks}"
        assert set(lacks) <= set(unavailable)
    assert hidden["cases"][name]["presets"]["cpu"] == {}


def test_an_import_error_of_our_own_is_not_taken_for_a_missing_toolchain() -> None:
    assert "inductor-ext[amd]" in extras.missing(ModuleNotFoundError("No module named 'flydsl'", name="flydsl"))
    assert "inductor-ext[nvidia]" in extras.missing(ModuleNotFoundError("x", name="cutlass.cute"))
    assert extras.missing(ModuleNotFoundError("x", name="inductor_ext.templates.nothing")) is None
    with pytest.raises(extras.MissingToolchain, match=r'the GEMM needs flydsl.*pip install "inductor-ext\[amd\]"'):
        _hide("flydsl", lambda: extras.require("flydsl.compiler", "the GEMM"))


def _hide(module: str, call: Any) -> Any:
    import sys

    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] == module}
    try:
        for k in saved:
            del sys.modules[k]
        sys.modules[module] = None  # type: ignore[assignment] - import then raises ModuleNotFoundError
        return call()
    finally:
        del sys.modules[module]
        sys.modules.update(saved)


def test_a_family_module_that_imports_a_missing_toolchain_at_load_is_listed_not_fatal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import inductor_ext.templates as package

    dsl = tmp_path / "fakedsl"
    dsl.mkdir()
    (dsl / "__init__.py").write_text("")
    (dsl / "gemm.py").write_text('import flydsl.compiler\n\nNAME = "fakedsl.gemm"\n\nFAMILY = Family(name=NAME)\n')
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    monkeypatch.setitem(__import__("sys").modules, "flydsl", None)
    registry._scan.cache_clear()
    try:
        assert "fakedsl.gemm" not in registry.families()
        assert "needs flydsl" in registry.unavailable()["fakedsl.gemm"]
        assert "fakedsl.gemm" in registry.names()
        with pytest.raises(KeyError, match="not available here: needs flydsl"):
            registry.get("fakedsl.gemm")
    finally:
        monkeypatch.undo()
        registry._scan.cache_clear()
        for name in [m for m in __import__("sys").modules if m.startswith("inductor_ext.templates.fakedsl")]:
            del __import__("sys").modules[name]


def test_the_installed_distribution_says_its_license_and_who_made_it() -> None:
    """pip show / PyPI read the distribution's metadata: a licence (its SPDX name and the file)
    and the project's authors, keywords and classifiers (a595f81 had none of them)."""
    from importlib import metadata

    meta = metadata.metadata("inductor-ext")
    assert meta["License-Expression"] == "BSD-3-Clause", meta.get("License-Expression")
    assert "LICENSE" in (meta.get_all("License-File") or [])
    assert meta["Author"] or meta["Author-email"]
    assert "torch.compile" in (meta["Keywords"] or "")
    assert any(c.startswith("Operating System :: MacOS") for c in meta.get_all("Classifier") or [])


def test_the_license_is_in_the_installed_metadata() -> None:
    import importlib.metadata

    meta = importlib.metadata.metadata("inductor-ext")
    assert meta["License-Expression"] == "BSD-3-Clause" and "LICENSE" in meta.get_all("License-File")
