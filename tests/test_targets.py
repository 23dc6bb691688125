"""The target registry: presets come from the vendor modules, and detection on real GPUs picks
the right one (device properties stubbed: no GPU here), with one log line when it picks 'aten'."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from inductor_ext import presets, targets


@pytest.fixture
def ext_log(caplog):
    """Records of the "inductor_ext" logger (torch's logging setup stops it propagating)."""
    logger = logging.getLogger("inductor_ext")
    logger.addHandler(caplog.handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    yield caplog
    logger.setLevel(old)
    logger.removeHandler(caplog.handler)


def _fake_gpu(monkeypatch, *, major=0, minor=0, name="GPU", arch=None):
    monkeypatch.setattr(torch.version, "hip", "6.4" if arch is not None else None)
    props = SimpleNamespace(major=major, minor=minor, name=name, gcnArchName=f"{arch}:sramecc+:xnack-" if arch else "")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)


@pytest.mark.parametrize("major, minor, name, preset", [
    (9, 0, "NVIDIA H100 80GB HBM3", "hopper"),
    (10, 0, "NVIDIA B200", "blackwell"),
    (10, 3, "NVIDIA B300", "blackwell"),
    (12, 0, "NVIDIA GeForce RTX 5090", "aten"),
    (8, 0, "NVIDIA A100-SXM4-80GB", "aten"),
])
def test_cuda_devices(monkeypatch, ext_log, major, minor, name, preset):
    _fake_gpu(monkeypatch, major=major, minor=minor, name=name)
    assert presets.preset_for_device(torch.device("cuda", 0)) == preset
    lines = [r.getMessage() for r in ext_log.records if "no preset" in r.getMessage()]
    if preset == "aten":
        assert len(lines) == 1 and name in lines[0] and f"sm_{major}{minor}" in lines[0], lines
    else:
        assert lines == []


@pytest.mark.parametrize("arch, preset", [("gfx950", "gfx950"), ("gfx1250", "gfx1250"), ("gfx942", "aten")])
def test_rocm_devices(monkeypatch, ext_log, arch, preset):
    _fake_gpu(monkeypatch, name="AMD Instinct", arch=arch)
    assert presets.preset_for_device(torch.device("cuda", 0)) == preset
    lines = [r.getMessage() for r in ext_log.records if "no preset" in r.getMessage()]
    assert len(lines) == (preset == "aten") and all(arch in line for line in lines), lines


def test_unknown_device_type_is_aten_with_one_line(ext_log):
    assert presets.preset_for_device(torch.device("meta")) == "aten"
    assert [r.getMessage() for r in ext_log.records] == ["ext: no preset for device type 'meta'; using 'aten'"]


@pytest.mark.parametrize("device, preset", [("cpu", "cpu"), ("mps", "mps"), ("xpu", "xpu")])
def test_other_device_types(device, preset):
    assert presets.preset_for_device(torch.device(device)) == preset


def test_every_preset_targets_a_known_target_and_every_target_has_one_vendor():
    known = targets.all_targets()
    for name, data in presets.PRESETS.items():
        assert data["target"] in known, name
        assert data["device_type"] == known[data["target"]].device_type
    assert list(presets.PRESETS)[0] == "cpu" and list(presets.PRESETS)[-1] == "aten"


def test_capabilities_not_names():
    assert targets.has("sm_90a", targets.PDL) and targets.has("sm_100a", targets.NVFP4_MMA)
    assert not targets.has("gfx950", targets.PDL) and not targets.has("cpu", targets.PDL)
    assert targets.has("gfx1250", targets.TDM) and not targets.has("nope", targets.PDL)
    with pytest.raises(ValueError, match="unknown target 'sm_75'; known: cpu"):
        targets.get("sm_75")


def test_one_datasheet_per_target_everywhere():
    """fsdp_overlap's cost model and nvMatmulHeuristics agree on which part a target means."""
    from inductor_ext.autotune import nvmmh_policy
    from inductor_ext.comms_passes.fsdp.overlap import current_settings

    for preset in ("hopper", "blackwell", "gfx950"):
        config = presets.resolve({"preset": preset})
        sheet = targets.datasheet(config.target)
        assert current_settings(config).gpu == sheet.name
        if targets.has(config.target, targets.NVMMH):
            assert nvmmh_policy.resolve_gpu(config.target).startswith(sheet.name)


def test_the_host_cpu_is_named_by_model_isa_and_threads(monkeypatch):
    """What CPU autotune records are keyed by: a decision timed on one CPU is no evidence on another."""
    from inductor_ext.targets import cpu

    threads = torch.get_num_threads()
    name = cpu.host_name()
    assert name.startswith(cpu._model_name() + ", ") and name.endswith(f"{threads} thread" + "s" * (threads != 1))
    assert torch.backends.cpu.get_cpu_capability() in name
    # ATEN_CPU_CAPABILITY set below the host's ISA (an AVX2 host: to "default")
    lower = "DEFAULT" if torch.backends.cpu.get_cpu_capability() == "AVX2" else "AVX2"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: lower)
    assert cpu.host_name() != name and f", {lower}, " in cpu.host_name()
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert "AVX512 AMX" in cpu.host_name()


def test_gpu_records_name_the_gpu_not_the_device_type(monkeypatch):
    """XPU and MPS records are keyed by the GPU's name, as CUDA's are: one GPU's decisions do not
    serve another model's."""
    from inductor_ext.targets import apple

    monkeypatch.setattr(torch.xpu, "get_device_name", lambda device=None: "Intel(R) Data Center GPU Max 1550")
    assert targets.device_name(torch.device("xpu")) == "Intel(R) Data Center GPU Max 1550"
    apple.chip_name.cache_clear()
    monkeypatch.setattr(apple.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0, stdout="Apple M2 Pro\n"))
    assert targets.device_name(torch.device("mps")) == "Apple M2 Pro"
    apple.chip_name.cache_clear()
    monkeypatch.setattr(apple.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=1, stdout=""))
    assert apple.chip_name() == "mps"  # macOS did not say: the device type, as before
    apple.chip_name.cache_clear()
