"""runtime.flydsl: the ROCm-less toolchain (ld.lld + ocml/ockl as a ROCM_PATH folder), compile-only
builds in a subprocess, the ISA and hsaco read back, the libcall trap, errors that say what to do."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

import pytest

from inductor_ext.runtime import flydsl, toolchain
from inductor_ext.testing import isa

PROBES = str(Path(__file__).parent / "flydsl_probes")


@pytest.fixture
def probes_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([PROBES, os.environ.get("PYTHONPATH", "")]))  # the worker
    monkeypatch.syspath_prepend(PROBES)  # this process hashes the builder's source


def _job(name: str, arch: str = "gfx950") -> flydsl.FlyJob:
    return flydsl.FlyJob(f"probe_kernels:{name}", {}, arch, name)


def test_rocm_root_has_what_flydsl_reads() -> None:
    root = flydsl.rocm_root()
    lld = root / "llvm" / "bin" / "ld.lld"
    assert toolchain.lld_works(str(lld)), f"{lld} does not run"
    for name in ("ocml.bc", "ockl.bc"):
        assert (root / "amdgcn" / "bitcode" / name).stat().st_size > 100_000
    assert flydsl.rocm_root() == root  # built once, found again


def test_missing_linker_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.setattr(toolchain, "ld_lld", lambda: None)
    with pytest.raises(toolchain.ToolchainMissing, match=r"AMDGPU linker \(ld.lld\).*install_amd_toolchain.sh"):
        flydsl.rocm_root()
    monkeypatch.setattr(toolchain, "ld_lld", lambda: "/bin/true")
    monkeypatch.setattr(toolchain, "amd_bitcode_dir", lambda: None)
    with pytest.raises(toolchain.ToolchainMissing, match=r"ocml.bc.*pip install triton"):
        flydsl.rocm_root()


def test_worker_env_is_compile_only_for_the_arch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYDSL_RUNTIME_RUN_ONLY", "1")
    env = flydsl.worker_env("gfx1250", "/tmp/d")
    assert (env["COMPILE_ONLY"], env["ARCH"], env["FLYDSL_GPU_ARCH"], env["FLYDSL_DUMP_DIR"]) == ("1", "gfx1250", "gfx1250", "/tmp/d")
    assert "FLYDSL_RUNTIME_RUN_ONLY" not in env and "TRITON_INTERPRET" not in env
    with pytest.raises(ValueError, match="gfx942"):
        flydsl.worker_env("gfx942", "/tmp/d")


@pytest.mark.isa
def test_compiles_both_arches_and_returns_the_code_object(probes_on_path: None, isa_cache: str | None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    out950, out1250 = flydsl.compile_jobs([_job("scale_job"), _job("scale_job", "gfx1250")], cache=isa_cache)
    for out, arch in ((out950, "gfx950"), (out1250, "gfx1250")):
        assert re.search(rf'\.amdgcn_target "amdgcn-amd-amdhsa-\w*-{arch}"', out["amdgcn"])
        isa.assert_has_instructions(out["amdgcn"], arch, [r"buffer_load_(dword|b32)", r"buffer_store_(dword|b32)", r"v_add_f32"])
        hsaco = base64.b64decode(out["hsaco_b64"])
        assert hsaco[:4] == b"\x7fELF" and hsaco[18] == 224  # e_machine EM_AMDGPU
        meta = json.loads(out["metadata"])
        assert meta["arch"] == arch and meta["kernels"]["probe_0"]["wavefront_size"] == (64 if arch == "gfx950" else 32)
    # a second call is answered from the memo / disk cache without a subprocess
    flydsl._memo.clear()
    monkeypatch.setattr(flydsl, "_compile_in_subprocess", lambda *a: pytest.fail("the cache did not answer"))
    again = flydsl.compile_jobs([_job("scale_job")], cache=isa_cache)
    assert again[0] == out950


@pytest.mark.isa
def test_missing_libcall_fails_instead_of_a_silent_success(probes_on_path: None, tmp_path: Path) -> None:
    with pytest.raises(flydsl.FlyDslCompileError, match=r"no libcall available for ftanh.*still wrote a code object|"
                                                       r"still wrote a code object.*no libcall available for ftanh"):
        flydsl.compile_jobs([_job("tanh_job")], cache=tmp_path)
    assert not list(tmp_path.glob("*.json.gz")), "a failed compile must not be cached"


@pytest.mark.isa
def test_builder_errors_name_the_job(probes_on_path: None, tmp_path: Path) -> None:
    with pytest.raises(flydsl.FlyDslCompileError, match=r"broken_job for gfx950: ValueError: this builder fails on purpose"):
        flydsl.compile_jobs([_job("broken_job")], cache=tmp_path)


def test_hsaco_bytes_unescapes_mlir_strings() -> None:
    text = 'gpu.binary @k [#gpu.object<#rocdl.target, bin = "\\7FELF\\\\x\\22y\\00">]'
    assert flydsl.hsaco_bytes(text) == b'\x7fELF\\x"y\x00'
    with pytest.raises(flydsl.FlyDslCompileError, match="no gpu.binary"):
        flydsl.hsaco_bytes("module {}")
