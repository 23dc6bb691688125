"""mode="max-autotune" on a GPU preset adds ext's GEMM candidates to Inductor's own instead of
replacing them, and `presets show auto` knows every device type the target registry does.
Checked on the config a compile would get; no GPU needed."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch._inductor import config as inductor_config

from inductor_ext import presets
from inductor_ext.backend import resolve_config
from inductor_ext.lowering import install


def _patches(preset: str, mode: str | None = None, **options: Any) -> dict[str, Any]:
    """The Inductor config patches ext_backend would compile with (mode's, then ext's over them)."""
    config, mode_patches = resolve_config([], {"preset": preset, **options}, mode)
    return {**mode_patches, **install.inductor_patches(config, False, mode_patches)}


def _gemm_backends(patches: dict[str, Any]) -> str:
    """What Inductor's GEMM lowerings will read: the patch, else the setting in force."""
    return patches.get("max_autotune_gemm_backends", inductor_config.max_autotune_gemm_backends)


@pytest.mark.parametrize("preset", ["hopper", "blackwell", "gfx950", "xpu"])
@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
def test_max_autotune_keeps_inductors_own_gemm_candidates(preset: str, mode: str) -> None:
    patches = _patches(preset, mode)
    assert patches["max_autotune"] is True
    assert "max_autotune_gemm_backends" not in patches  # Inductor's ATEN,TRITON(,CPP) stay
    assert "TRITON" in _gemm_backends(patches).upper()
    assert patches["inductor_choices_class"] is not None  # ...and ext's handler adds its templates


def test_max_autotune_keeps_the_users_own_backends() -> None:
    patches = _patches("hopper", "max-autotune", inductor={"max_autotune_gemm_backends": "ATEN,TRITON"})
    assert patches["max_autotune_gemm_backends"] == "ATEN,TRITON"
    with inductor_config.patch(max_autotune_gemm_backends="TRITON"):
        assert _gemm_backends(_patches("blackwell", "max-autotune")) == "TRITON"


def test_max_autotune_set_in_inductors_config_counts_too() -> None:
    assert "max_autotune_gemm_backends" not in _patches("hopper", inductor={"max_autotune_gemm": True})
    with inductor_config.patch(max_autotune=True):
        assert "max_autotune_gemm_backends" not in _patches("hopper")


def test_without_max_autotune_ext_alone_adds_to_aten() -> None:
    # Inductor would not autotune GEMMs at all: ext offers its templates against ATen only
    assert _patches("hopper")["max_autotune_gemm_backends"] == "ATEN"
    assert "max_autotune_gemm_backends" not in _patches("hopper", autotune="off")


def test_the_cpu_preset_keeps_aten_plus_ext_under_max_autotune() -> None:
    # ext's C++ family is Inductor's CPP template, Inductor's own pick among its configs
    assert _patches("cpu", "max-autotune")["max_autotune_gemm_backends"] == "ATEN"


@pytest.mark.parametrize(("device_type", "preset"), [("cpu", "cpu"), ("mps", "mps"), ("xpu", "xpu")])
def test_auto_on_this_machine_follows_torchs_accelerator(device_type: str, preset: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: device_type != "cpu")
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device(device_type))
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    name, device = presets.machine_preset()
    assert (name, device.type) == (preset, device_type)


def test_auto_on_a_device_no_target_knows_is_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("meta"))
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    assert presets.machine_preset()[0] == "aten"


def test_auto_here_is_the_cpu() -> None:
    assert presets.machine_preset() == ("cpu", torch.device("cpu"))  # these machines have no GPU


def test_presets_show_auto_names_the_accelerators_preset(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from inductor_ext.cli import main

    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("xpu"))
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    assert main(["presets", "show", "auto"]) == 0
    assert json.loads(capsys.readouterr().out)["preset"] == "xpu"  # it knew only cuda and cpu
