"""bench/cpu_decode.py times each arm's second call in a row: the timed call finds the caches its
own arm left (as a loop serving one model does), not the last arm's, while the rounds still rotate
so load from other processes hits every arm alike."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import cpu_decode  # noqa: E402


def test_each_timed_call_follows_an_untimed_call_of_its_own_arm():
    calls: list[str] = []

    def arm(name: str) -> Callable[[], Any]:
        def call() -> None:
            if calls and calls[-1] != name:
                time.sleep(0.02)  # what the other arm left behind costs this call
            calls.append(name)
        return call

    result = cpu_decode.time_interleaved({"a": arm("a"), "b": arm("b")}, reps=4)
    timed = calls[4:]  # after the two warm-up rounds
    assert timed == ["a", "a", "b", "b", "b", "b", "a", "a"] * 2  # pairs, rotating who goes first
    assert all(r["median_ms"] < 20 for r in result.values()), result  # no timed call paid for the other arm
