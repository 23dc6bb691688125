"""Side-by-side timing for the demo and ``bench/``: arms run interleaved in one process, each
reported with its median and spread, and compared as "within noise" when the spreads overlap.

Runs anywhere (CPU, a lent GPU with an older torch): standard library only, plus the caller's
``sync`` (e.g. ``torch.cuda.synchronize``) around each timed call.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one arm: median and interquartile range over the samples."""

    median: float
    p25: float
    p75: float
    samples: int

    @classmethod
    def of(cls, seconds: list[float]) -> "Timing":
        if not seconds:
            raise ValueError("no samples")
        if len(seconds) == 1:
            return cls(seconds[0], seconds[0], seconds[0], 1)
        q1, _, q3 = statistics.quantiles(seconds, n=4, method="inclusive")
        return cls(statistics.median(seconds), q1, q3, len(seconds))

    def as_dict(self) -> dict[str, float | int]:
        return {"median_s": self.median, "p25_s": self.p25, "p75_s": self.p75, "samples": self.samples}

    def text(self) -> str:
        return f"{self.median * 1e3:.3f} ms (IQR {self.p25 * 1e3:.3f}-{self.p75 * 1e3:.3f}, n={self.samples})"


def interleaved(fns: dict[str, Callable[[], Any]], reps: int, sync: Callable[[], None] | None = None,
                warmup: int = 1, lead_in: int = 0) -> dict[str, Timing]:
    """Each fn timed ``reps`` times in alternating rounds, so load from other processes hits
    every arm alike. ``lead_in``: untimed calls of the same fn right before each timed one, so
    the timed call finds the caches and TLB its own arm left, as in a loop that runs one model,
    not those of the arm before it (hf_generate's bf16 decode: 97.6 ms interleaved against
    74.6 ms in a loop, ext and Inductor alike)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            for _ in range(lead_in):
                fn()
            if sync:
                sync()
            t0 = time.perf_counter()
            fn()
            if sync:
                sync()
            samples[name].append(time.perf_counter() - t0)
    return {name: Timing.of(s) for name, s in samples.items()}


def overlap(a: Timing, b: Timing) -> bool:
    """Whether the two arms' interquartile ranges overlap: no difference shown."""
    return a.p25 <= b.p75 and b.p25 <= a.p75


def compare(a: Timing, b: Timing, a_name: str = "ext", b_name: str = "baseline") -> str:
    """``"ext 1.23x faster than baseline"``, or ``"... within noise"`` when the spreads overlap."""
    if overlap(a, b):
        return f"{a_name} vs {b_name}: within noise ({b.median / a.median:.2f}x by medians)"
    ratio = b.median / a.median
    if ratio >= 1:
        return f"{a_name} {ratio:.2f}x faster than {b_name}"
    return f"{a_name} {1 / ratio:.2f}x slower than {b_name}"
