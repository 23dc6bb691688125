"""Test session setup.

Triton decides once per process, when triton.language is first imported, whether kernels run
in its interpreter. The suite runs tier C kernels in-process, so interpret mode is switched on
before anything imports Triton; ISA gates (tier I) then compile in a subprocess without it
(inductor_ext.testing.isa does that by itself).
"""

import os
import sys

if "triton" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# CLI tables wrap to $COLUMNS (inductor_ext/tables.py): pytest-xdist's workers inherit COLUMNS=80
# from execnet, so the CLI's tests would read wrapped rows there and whole rows in a plain run.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

# Autotune results must not leak between runs (a cached winner skips the benchmarks tests
# look at), so each session gets its own autotune cache directory; subprocesses inherit it.
# Every ext folder follows INDUCTOR_EXT_CACHE_DIR, but the toolchains (ld.lld, which
# .ci/install_amd_toolchain.sh unpacks into the tool folder once per machine), the C++ kernels
# built into it and compiled asm stay where they were, shared across sessions: their keys hash
# what they were built from, so a stale entry never matches.
import tempfile  # noqa: E402

from inductor_ext.runtime.toolchain import cache_root  # noqa: E402 - neither torch nor triton

# set by the caller, not pinned below (pytest-xdist's workers inherit the pinned value and the mark)
_ISA_CACHE_SET = bool(os.environ.get("INDUCTOR_EXT_ISA_CACHE")) and "_INDUCTOR_EXT_TEST_ISA_PINNED" not in os.environ
if not os.environ.get("INDUCTOR_EXT_ISA_CACHE"):
    os.environ["INDUCTOR_EXT_ISA_CACHE"] = str(cache_root() / "isa")
    os.environ["_INDUCTOR_EXT_TEST_ISA_PINNED"] = "1"
os.environ.setdefault("INDUCTOR_EXT_TOOL_DIR", str(cache_root() / "tools"))
os.environ["INDUCTOR_EXT_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor_ext_test_cache_")

import pytest  # noqa: E402

from inductor_ext.testing.golden import guard_expecttest  # noqa: E402

guard_expecttest()  # goldens and inline snapshots are rewritten only on EXPECTTEST_ACCEPT=1


@pytest.fixture(scope="module")
def isa_cache(request: pytest.FixtureRequest) -> str | None:
    """Compiled asm lives in pytest's cache (``--cache-clear`` empties it) unless
    $INDUCTOR_EXT_ISA_CACHE names another place."""
    if _ISA_CACHE_SET or getattr(request.config, "cache", None) is None:
        return None
    return str(request.config.cache.mkdir("inductor_ext_isa"))


@pytest.fixture
def interpreter() -> None:
    """Tier C tests run kernels in Triton's interpreter in this process: fail (not skip) when
    Triton was imported before interpret mode could be switched on."""
    from inductor_ext.testing import isa

    if os.environ.get("TRITON_INTERPRET") != "1" or not isa.triton_interpreter_active():
        pytest.fail("Triton was imported before this module could set TRITON_INTERPRET=1 (another test "
                    "module imported it first), so its kernels cannot run on the CPU here; run with "
                    "TRITON_INTERPRET=1 in the environment or run this file on its own")


@pytest.fixture
def kernel_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The C++ kernel libraries (``*.main.so``) built from here on in this test, one entry per
    compiler run that built one (the ISA probe's test builds are not kernels)."""
    from torch._inductor.cpp_builder import CppBuilder

    built: list[str] = []
    real = CppBuilder.build

    def build(self: CppBuilder) -> object:
        target = self.get_target_file_path()
        if target.endswith(".main.so"):
            built.append(target)
        return real(self)

    monkeypatch.setattr(CppBuilder, "build", build)
    return built
