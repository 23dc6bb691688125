"""The demo tells the truth: compile times on equal terms (both cold), speed with its spread,
and "within noise" instead of a ratio when the arms overlap."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from inductor_ext import demo
from inductor_ext.runtime.timing import Timing, compare, interleaved, overlap


def test_overlapping_arms_are_within_noise():
    a, b = Timing(1.00e-3, 0.95e-3, 1.05e-3, 20), Timing(1.07e-3, 1.02e-3, 1.12e-3, 20)
    assert overlap(a, b) and "within noise" in compare(a, b, "ext", "inductor")
    assert "1.07x faster" not in compare(a, b, "ext", "inductor")


def test_separated_arms_get_a_ratio():
    fast, slow = Timing(1.0e-3, 0.98e-3, 1.02e-3, 20), Timing(2.0e-3, 1.9e-3, 2.1e-3, 20)
    assert compare(fast, slow, "ext", "eager") == "ext 2.00x faster than eager"
    assert compare(slow, fast, "ext", "eager") == "ext 2.00x slower than eager"


def test_interleaved_gives_every_arm_its_samples():
    calls = []
    timings = interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, reps=5, warmup=1)
    assert calls == ["a", "b"] * 6 and {t.samples for t in timings.values()} == {5}
    assert all(t.p25 <= t.median <= t.p75 for t in timings.values())


def test_interleaved_lead_in_times_the_second_of_each_pair():
    """With ``lead_in`` each timed call follows an untimed call of its own arm: a first call made
    slow by the other arm (here: a sleep) is never the one timed."""
    last = []

    def arm(name: str) -> Any:
        def call() -> None:
            if last and last[-1] != name:
                time.sleep(0.02)  # what the other arm left behind costs this call
            last.append(name)
        return call

    timings = interleaved({"a": arm("a"), "b": arm("b")}, reps=3, warmup=0, lead_in=1)
    assert last == ["a", "a", "b", "b"] * 3
    assert all(t.median < 0.02 for t in timings.values())  # no timed call paid for the other arm
    cold = interleaved({"a": arm("a"), "b": arm("b")}, reps=3, warmup=0)
    assert all(t.median >= 0.02 for t in cold.values())


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    lines: list[str] = []
    result = demo.run("cpu", str(tmp_path_factory.mktemp("demo")), reps=5, out=lines.append,
                      size={"batch": 1, "seq": 8, "dim": 32})
    return result, lines


def test_demo_checks_numbers_and_reports_spread_and_cold_compiles(demo_run):
    result, lines = demo_run
    text = "\n".join(lines)
    assert result["ok"] and result["kernels"] > 0
    assert "both cold: fresh Inductor caches" in text
    speed = next(line for line in lines if line.startswith("speed"))
    assert speed.count("IQR") == 3
    ratios = next(line for line in lines if line.startswith("ratios"))
    for arm in ("eager", "inductor"):
        t_ext, t_arm = result["timings"]["ext"], result["timings"][arm]
        expected = "within noise" if overlap(t_ext, t_arm) else ("faster" if t_arm.median > t_ext.median else "slower")
        assert expected in ratios.split(";")[0 if arm == "eager" else 1], ratios


def test_the_header_names_the_device_it_runs_on(monkeypatch):
    """--device mps|xpu printed "cpu" as the device's name."""
    monkeypatch.setattr(torch.xpu, "get_device_name", lambda device=None: "Intel Arc B580")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    assert demo.device_description("mps") == "Apple GPU (MPS)"
    assert demo.device_description("xpu") == "Intel Arc B580"
    assert demo.device_description("cuda:0") == "NVIDIA H200"
    assert demo.device_description("cpu") == "cpu"
