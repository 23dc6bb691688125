"""Settings are never replaced or ignored without a word: dropping one pass of a preset, and a
preset chosen for another device than the inputs'."""

from __future__ import annotations

import logging

import pytest
import torch

from _logs import records_of
from inductor_ext import backend, presets
from inductor_ext.config import ExtOptionError


def test_disable_passes_drops_one_pass_and_keeps_the_rest() -> None:
    full = presets.resolve({"preset": "cpu"}).passes
    assert len(full) >= 2
    dropped = presets.resolve({"preset": "cpu", "disable_passes": [full[0]]}).passes
    assert dropped == full[1:]


def test_disable_passes_names_what_it_could_drop() -> None:
    full = presets.resolve({"preset": "cpu"}).passes
    with pytest.raises(ExtOptionError, match=r"disable_passes: 'rms_norm_opp' is not among .*" + full[0]):
        presets.resolve({"preset": "cpu", "disable_passes": ["rms_norm_opp"]})


def test_a_preset_for_another_device_warns_once_naming_both(caplog: pytest.LogCaptureFixture,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "_mismatches_told", set())
    inputs = [torch.ones(2, 2)]
    with records_of(caplog, "inductor_ext", logging.WARNING):
        backend.warn_device_mismatch(presets.resolve({"preset": "hopper"}), inputs)
        backend.warn_device_mismatch(presets.resolve({"preset": "hopper"}), inputs)  # a recompile: said already
        backend.warn_device_mismatch(presets.resolve({"preset": "hopper", "interpret": True}), inputs)  # CPU tensors meant
        backend.warn_device_mismatch(presets.resolve({"preset": "cpu"}), inputs)
    lines = [r.getMessage() for r in caplog.records if "preset" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "'hopper' is for cuda tensors" in lines[0] and "inputs are on cpu" in lines[0] and "'cpu'" in lines[0]
