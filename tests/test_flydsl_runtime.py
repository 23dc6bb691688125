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


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict]:
    """One batch holding a kernel with a missing libcall, a builder that raises and a good kernel
    (one worker subprocess: failures are never cached, so this runs every time)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", os.pathsep.join([PROBES, os.environ.get("PYTHONPATH", "")]))
    mp.syspath_prepend(PROBES)
    cache = tmp_path_factory.mktemp("flydsl_failures")
    # a job of its own (its data is part of the key): scale_job compiled by another test is memoised
    good = flydsl.FlyJob("probe_kernels:scale_job", {"batch": "with failures"}, "gfx950", "scale_job")
    try:
        with pytest.raises(flydsl.FlyDslCompileError) as info:
            flydsl.compile_jobs([_job("tanh_job"), _job("broken_job"), good], cache=cache, workers=1)
        return str(info.value), cache, flydsl.compile_jobs([good], cache=cache)[0]
    finally:
        mp.undo()


@pytest.mark.isa
def test_missing_libcall_fails_instead_of_a_silent_success(failed: tuple[str, Path, dict]) -> None:
    message, _, _ = failed
    assert re.search(r"tanh_job for gfx950: .*no libcall available for ftanh.*still wrote a code object|"
                     r"tanh_job for gfx950: .*still wrote a code object.*no libcall available for ftanh", message)


@pytest.mark.isa
def test_every_failure_is_named_and_the_rest_is_cached(failed: tuple[str, Path, dict]) -> None:
    message, cache, good = failed
    assert message.startswith("2 of 3 FlyDSL kernel(s) failed to compile")
    assert "broken_job for gfx950: ValueError: this builder fails on purpose" in message
    cached = [p.name for p in cache.glob("*.json.gz")]
    assert len(cached) == 1 and "scale_job" in cached[0], cached  # a failed compile is never cached
    assert json.loads(good["metadata"])["name"] == "scale_job"


def test_batches_split_by_target_and_share_the_cpus() -> None:
    jobs = [(f"k{i}", (_job(f"j{i}", arch), Path("."))) for i, arch in enumerate(["gfx950"] * 7 + ["gfx1250"] * 2)]
    one_cpu = flydsl._batches(jobs, 1)
    assert sorted(len(b) for b in one_cpu) == [2, 7]  # one batch per target, always
    two = flydsl._batches(jobs, 2)
    assert sorted(len(b) for b in two) == [2, 7]  # a second CPU already busy with the other target
    four = flydsl._batches(jobs, 4)
    assert sorted(len(b) for b in four) == [2, 3, 4]  # 7 jobs are enough to share with one more worker
    assert all(len({j.arch for _, (j, _) in b}) == 1 for b in four)


def test_hsaco_bytes_unescapes_mlir_strings() -> None:
    text = 'gpu.binary @k [#gpu.object<#rocdl.target, bin = "\\7FELF\\\\x\\22y\\00">]'
    assert flydsl.hsaco_bytes(text) == b'\x7fELF\\x"y\x00'
    with pytest.raises(flydsl.FlyDslCompileError, match="no gpu.binary"):
        flydsl.hsaco_bytes("module {}")


# Each FlyDSL family's call() (tier D) with CPU stand-ins under COMPILE_ONLY: FlyDSL traces the
# launcher with exactly the arguments call() builds, so a misordered or mistyped argument fails here.
DRY_RUNS = {
    "gemm_addmm": ("inductor_ext.templates.flydsl.gemm", "GemmProblem", "GemmConfig", "gfx950",
                   {"m": 40, "n": 24, "k": 64, "dtype": "bfloat16", "b_k_major": True, "bias": True},
                   {"block_m": 64, "block_n": 64, "block_k": 64, "waves_m": 2, "waves_n": 2},
                   [((24,), "bfloat16", False), ((40, 64), "bfloat16", False), ((24, 64), "bfloat16", True)]),
    "grouped_mm": ("inductor_ext.templates.flydsl.grouped_mm", "GroupedMmProblem", "GroupedMmConfig", "gfx1250",
                   {"t": 40, "n": 24, "k": 64, "groups": 3},
                   {"block_m": 64, "block_n": 64, "block_k": 64, "waves_m": 2, "waves_n": 2},
                   [((40, 64), "bfloat16", False), ((3, 64, 24), "bfloat16", False), ((10, 20, 40), "offs", False)]),
    "mx_fp8": ("inductor_ext.templates.flydsl.mx_scaled_mm", "MxScaledMmProblem", "MxScaledMmConfig", "gfx950",
               {"m": 40, "n": 24, "k": 128, "scale_layout": "plain"},
               {"block_m": 64, "block_n": 64, "block_k": 128, "waves_m": 2, "waves_n": 2},
               [((40, 128), "float8_e4m3fn", False), ((24, 128), "float8_e4m3fn", True),
                ((40, 4), "float8_e8m0fnu", False), ((24, 4), "float8_e8m0fnu", False)]),
    "tdm_fp8": ("inductor_ext.templates.flydsl.tdm_gemm", "TdmGemmProblem", "TdmGemmConfig", "gfx1250",
                {"m": 40, "n": 24, "k": 128, "dtype": "float8_e4m3fn", "scaling": "tensor"},
                {"block_m": 64, "block_n": 64, "block_k": 128, "waves_m": 2, "waves_n": 2},
                [((40, 128), "float8_e4m3fn", False), ((24, 128), "float8_e4m3fn", True), ((1,), "float32", False),
                 ((1,), "float32", False)]),
}


@pytest.mark.isa
def test_run_passes_what_the_launcher_takes(probes_on_path: None, isa_cache: str | None) -> None:
    jobs = [flydsl.FlyJob("probe_kernels:dry_run_job",
                          {"family": mod, "problem_cls": pc, "config_cls": cc, "target": target, "problem": p,
                           "config": c, "tensors": tensors}, target, f"dry_run_{name}",
                          key={"family_sources": flydsl._module_sha(f"{mod}:call")})  # recompile when call() changes
            for name, (mod, pc, cc, target, p, c, tensors) in DRY_RUNS.items()]
    for (name, spec), asm in zip(DRY_RUNS.items(), flydsl.compile_jobs(jobs, cache=isa_cache)):
        assert re.search(r"v_(mfma|wmma)", asm["amdgcn"]), name
