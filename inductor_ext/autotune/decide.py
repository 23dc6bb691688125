"""Which candidate serves an op, from its timings: the rule that a template must beat ATen.

Pure functions over candidate records (``Candidate``: its times, ATen's or a template, its family,
whether it is the family's default config or a packed library GEMM), so the rules are tested on
plain numbers (tests/test_decide.py). ``lowering/ext_choices.py`` turns Inductor's choices and
timings into records, asks ``pick``, and hands Inductor's choice for the winner back.

- The margin: a template must beat the fastest ATen choice by ``margin`` (``template_margin``);
  where every choice was also timed warm (the cpu preset), it must not be slower there by more.
- Default vs fastest (``prefer_default``): another config of a family must beat the family's
  default config by the margin, in both regimes where timed warm, and warm by at least
  ``CPU_CONFIG_MARGIN``; a default serving in place of the fastest must not lose to ATen.
- Packed (``prefer_packed``): under freezing Inductor calls the packed library GEMM unasked, so
  another ATen choice must beat it by the margin to serve instead.
- ``force_template``: the forced families' fastest finite candidate, else the rules above.
- The cache (``untimed``): a cached winner serves without timing; ``cache-only`` without an entry
  falls back to ATen's default.
- Regimes that disagree (``regimes_disagree``): a candidate timed flushed over ``DISAGREE_FACTOR``
  times its warm time (beyond ``COLD_ALLOWANCE_MS``) was timed waiting for the OS, not its caches;
  ``lowering/cold_timing.py`` re-times it, and if it still disagrees the decision is made on the
  warm timings of every candidate and says so (``pick``, ``decided_times``). A candidate whose
  every timed call in a regime was switched out (``disturbed``) has no time to compare: it is
  left out and the rest decide, as long as an ATen choice was timed clean; else ATen's choice
  serves. The reason says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

# Another micro-kernel replaces Inductor's pick for a GEMM timed in both regimes (the cpu preset)
# only when at least this much faster warm, and by the margin flushed. Measured in the decoder
# (bench/cpu_decode.py, decode b1 fp32): a 16x16 vocabulary micro-kernel that beat Inductor's 8x32
# by 9% flushed and by over 5% warm ran 10% slower inside the graph.
CPU_CONFIG_MARGIN = 0.15

# A flushed time this many times the warm one, and more than COLD_ALLOWANCE_MS over it, is no
# cache effect. Refetching a GEMM's operands and code from DRAM costs at most the bytes over the
# read bandwidth (a GEMM whose operands fit the last-level cache: < 1.1 ms at 31 GB/s, and then
# its warm time is rarely under 0.1 ms), and a small op's cold code path ~0.05-0.17 ms (measured:
# addmm 2x96x48, 4-8 us warm, 35-165 us flushed, 1 and 2 threads). What is left is the OS: a
# 2-thread ATen GEMM whose second thread waits for a core another process runs on measured
# 6-16 ms (a scheduler time slice) against 5-8 us warm.
DISAGREE_FACTOR = 10.0
COLD_ALLOWANCE_MS = 0.2


@dataclass(frozen=True, eq=False)
class Candidate:
    """One timed choice of a decision (compared by identity: two choices may time the same)."""

    name: str
    time_ms: float  # Inductor's timing (flushed on the cpu preset); inf when it failed
    warm_ms: float | None = None  # also timed warm (cpu: ``lowering/cold_timing.py``), else None
    kind: str = "template"  # "aten" or "template"
    family: str | None = None  # the template family ("aten" for ATen's), None when unknown
    default: bool = False  # the family's default config (its upstream heuristic's pick)
    packed: bool = False  # a packed library GEMM (``lowering/aten_choices.py``), ATen's default under freezing
    disturbed: bool = False  # every call timed in a regime was switched out by the OS (cold_timing.py)

    @property
    def is_aten(self) -> bool:
        return self.kind == "aten"

    @property
    def regimes_disagree(self) -> bool:
        """Timed flushed and warm, and the two cannot both be true (``regimes_disagree``)."""
        return self.warm_ms is not None and regimes_disagree(self.time_ms, self.warm_ms)


def regimes_disagree(flushed_ms: float, warm_ms: float) -> bool:
    """Whether a flushed time is more than ``DISAGREE_FACTOR`` times the warm one and more than
    ``COLD_ALLOWANCE_MS`` over it: no cache state explains that much (see the constants)."""
    return (math.isfinite(flushed_ms) and math.isfinite(warm_ms)
            and flushed_ms > warm_ms * DISAGREE_FACTOR and flushed_ms - warm_ms > COLD_ALLOWANCE_MS)


def disagreement_text(candidates: Sequence[Candidate]) -> str:
    """Why a decision was made on warm timings, naming the candidates whose regimes disagree:
    ``flushed and warm timings over 10x apart (addmm 6773.3us flushed, 7.9us warm): decided warm``."""
    apart = ", ".join(f"{c.name} {c.time_ms * 1000:.1f}us flushed, {c.warm_ms * 1000:.1f}us warm"
                      for c in candidates if c.regimes_disagree and c.warm_ms is not None)
    return f"flushed and warm timings over {DISAGREE_FACTOR:g}x apart ({apart}): decided warm"


def disturbed_text(candidates: Sequence[Candidate]) -> str | None:
    """Why no timing of ``candidates`` can be compared (some were ``disturbed`` and no ATen choice
    was timed clean), else None."""
    names = _disturbed_names(candidates)
    if not names or _clean_aten(candidates):
        return None
    return f"every timed call of {names} was switched out by the OS: ATen"


def left_out_text(candidates: Sequence[Candidate]) -> str | None:
    """Which ``disturbed`` candidates a decision leaves out, comparing the rest (an ATen choice
    among them was timed clean), else None."""
    names = _disturbed_names(candidates)
    return f"{names} left out: every timed call switched out by the OS" if names and _clean_aten(candidates) else None


def os_disturbed(reason: str) -> bool:
    """Whether a decision's reason says the OS switched out every timed call of some candidate
    (``disturbed_text``, ``left_out_text``): a loaded machine, not the kernels, set that outcome."""
    return "switched out by the OS" in reason


def _disturbed_names(candidates: Sequence[Candidate]) -> str:
    return ", ".join(c.name for c in candidates if c.disturbed)


def _clean_aten(candidates: Sequence[Candidate]) -> bool:
    """Whether some ATen choice was timed and not ``disturbed``. While voluntary context switches
    still counted (until df081f1), the decode lm_head's 2-thread plain mm (7.8 ms) was switched in
    every call; the fallback then served MKL's packed GEMM, timed clean at 4.3 ms, over a template
    timed clean at 2.0 ms. A choice that is disturbed is left out instead: it was no candidate to
    serve (the fallback never serves it either), and what serves is decided on clean timings alone."""
    return any(c.is_aten and not c.disturbed and math.isfinite(c.time_ms) for c in candidates)


def in_trusted_regime(candidates: Sequence[Candidate]) -> list[Candidate]:
    """``candidates`` as the rules read them: unchanged, unless one's regimes disagree and every
    candidate that ran was also timed warm; then each as its warm time alone (a flushed time the
    OS inflated says nothing about the others' flushed times, so none of them is compared so)."""
    if not any(c.regimes_disagree for c in candidates):
        return list(candidates)
    if any(c.warm_ms is None for c in candidates if math.isfinite(c.time_ms)):
        return list(candidates)  # no warm regime to fall back on (not a cpu-preset timing)
    return [c if c.warm_ms is None else replace(c, time_ms=c.warm_ms, warm_ms=None) for c in candidates]


def _fastest(candidates: Sequence[Candidate]) -> Candidate:
    """The fastest of ``candidates``, the first of equals."""
    return min(candidates, key=lambda c: c.time_ms)


def short_of_margin(challenger: Candidate, incumbents: Sequence[Candidate], margin: float, *,
                    warm_may_lose: bool = False, config_margin: float = 0.0) -> str | None:
    """None when ``challenger`` beats the fastest of ``incumbents`` by ``margin`` in Inductor's
    timings and, where all of them were also timed warm, in those too; else why not, as in
    "within margin 5% of" or "over 5% slower timed warm than".

    Timed warm, the margin is at least ``config_margin``, and with ``warm_may_lose`` the
    challenger need only not be slower than the incumbent by more than the margin there."""
    if challenger.time_ms * (1 + margin) >= min(c.time_ms for c in incumbents):
        return f"within margin {margin:.0%} of"
    warm = [c.warm_ms for c in (challenger, *incumbents)]
    if None in warm:
        return None
    mine, theirs = warm[0], min(w for w in warm[1:] if w is not None)
    assert mine is not None
    margin = max(margin, config_margin)
    if warm_may_lose:
        return f"over {margin:.0%} slower timed warm than" if mine > theirs * (1 + margin) else None
    return f"within margin {margin:.0%}, timed warm, of" if mine * (1 + margin) >= theirs else None


def slower_than(choice: Candidate, aten: Sequence[Candidate], margin: float) -> str | None:
    """Why ``choice`` loses to the fastest of ``aten``: slower in Inductor's timings, or where both
    were also timed warm, slower there by more than ``margin``; else None."""
    fastest = _fastest(aten)
    if choice.time_ms > fastest.time_ms:
        return "slower than"
    if choice.warm_ms is not None and fastest.warm_ms is not None and choice.warm_ms > fastest.warm_ms * (1 + margin):
        return f"over {margin:.0%} slower timed warm than"
    return None


def prefer_default(best: Candidate, candidates: Sequence[Candidate], margin: float) -> tuple[Candidate, str]:
    """``best``, unless it is another config of a family whose default config is within the
    margin of it: a difference that small, timed alone, is no evidence that it is faster inside
    the graph (measured on the cpu preset: micro-kernels that won by 2-15% alone ran 5-25% slower
    in a decoder than Inductor's pick). Where the choices were also timed warm, ``best`` must
    beat the default by the margin in both regimes, and warm by at least ``CPU_CONFIG_MARGIN``:
    each regime alone has ranked micro-kernels that lost in the decoder, and both together one
    that won by 9%."""
    if best.family is None:
        return best, "benchmark"
    defaults = [c for c in candidates if c.default and c.family == best.family and math.isfinite(c.time_ms)]
    if not defaults or best in defaults:
        return best, "benchmark"
    default = defaults[0]
    short = short_of_margin(best, [default], margin, config_margin=CPU_CONFIG_MARGIN)
    if short is not None:
        return default, f"{best.family} config {short} its default"
    return best, "benchmark"


def prefer_packed(chosen: Candidate, aten: Sequence[Candidate], margin: float, reason: str) -> tuple[Candidate, str]:
    """The packed library GEMM among ``aten``, unless ``chosen``, another ATen choice, beats it by
    the margin in both regimes: under freezing Inductor calls the packed GEMM unasked (default and
    max-autotune alike), so it is ATen's default there. Measured on the decoder's prefill fp32
    projections: ATen's mm won flushed by 7-8% where the packed sgemm was as fast or faster warm;
    ext/max-autotune ran 1.02-1.05 with mm on two or three of them, 0.99-1.02 with the packed
    sgemm on all four."""
    packed = [c for c in aten if c.packed and math.isfinite(c.time_ms)]
    if not packed or chosen in packed:
        return chosen, reason
    default = _fastest(packed)
    short = short_of_margin(chosen, [default], margin)
    return (chosen, reason) if short is None else (default, f"{chosen.name} {short} {default.name}")


def pick(best: Candidate, candidates: Sequence[Candidate], margin: float,
         forced_families: Sequence[str] = ()) -> tuple[Candidate, str]:
    """The candidate that serves (one of ``candidates``), and why: Inductor's fastest (``best``)
    through the forced families, the ATen margin, the family's default and the packed GEMM; all of
    them on warm timings where a candidate's flushed and warm timings disagree (the reason says so)."""
    aten = [c for c in candidates if c.is_aten]
    if any(c.family in forced_families for c in candidates):
        return _pick(best, candidates, margin, forced_families)  # forced is forced, in any regime
    if aten and (why := disturbed_text(candidates)):
        packed = [c for c in aten if c.packed and math.isfinite(c.time_ms)]
        return (packed[0] if packed else _fastest(aten)), f"fallback: {why}"
    if aten and (left := left_out_text(candidates)):
        clean = [c for c in candidates if not c.disturbed]
        chosen, reason = pick(_fastest(clean), clean, margin, forced_families)
        return chosen, f"{reason}; {left}"
    trusted = in_trusted_regime(candidates)
    if all(t is c for t, c in zip(trusted, candidates)):
        return _pick(best, candidates, margin, forced_families)
    original = {id(t): c for t, c in zip(trusted, candidates)}
    chosen, reason = _pick(_fastest(trusted), trusted, margin, forced_families)
    return original[id(chosen)], f"{reason}; {disagreement_text(candidates)}"


def decided_times(candidates: Sequence[Candidate], chosen: Candidate) -> tuple[float, float | None, str | None]:
    """The winner's and the fastest ATen choice's times (ms; None when no ATen choice was timed) in
    the regime the decision was made in, and why that is the warm one (None when it is not): what
    a speed-up over ATen may be computed from."""
    if why := disturbed_text(candidates):
        return chosen.time_ms, None, why  # no speed-up: the times measured the OS
    candidates = [c for c in candidates if not c.disturbed or c is chosen]  # left out of the comparison
    trusted = in_trusted_regime(candidates)
    warm = any(t is not c for t, c in zip(trusted, candidates))
    mine = next(t for t, c in zip(trusted, candidates) if c is chosen)
    aten = [t.time_ms for t in trusted if t.is_aten and math.isfinite(t.time_ms)]
    return mine.time_ms, min(aten, default=None), disagreement_text(candidates) if warm else None


def _pick(best: Candidate, candidates: Sequence[Candidate], margin: float,
          forced_families: Sequence[str]) -> tuple[Candidate, str]:
    aten = [c for c in candidates if c.is_aten]
    forced = [c for c in candidates if c.family in forced_families and c.time_ms != float("inf")]
    if forced:
        chosen = _fastest(forced)
        return chosen, f"force_template={chosen.family}"
    if not best.is_aten and aten and (short := short_of_margin(best, aten, margin, warm_may_lose=True)) is not None:
        chosen, reason = _fastest(aten), f"template {short} ATen"  # ATen is the safer choice
    else:
        # The family's fastest beat ATen; which of its configs serves is a question of its own.
        # Not the default against ATen: a default within the margin of a config that beat ATen
        # by it is as good as that config, as far as timings alone can tell (measured: the
        # decoder's vocabulary GEMM fell back to ATen that way, 19% slower in the graph).
        chosen, reason = prefer_default(best, candidates, margin)
        if chosen is not best and aten and (slower := slower_than(chosen, aten, margin)):
            # the default serves in place of a config that beat ATen, so it must not lose to ATen
            # (measured: a prefill fp32 GEMM's default, 8% slower than ATen flushed, ran its graph 6% slower)
            chosen, reason = _fastest(aten), f"{reason}, which is {slower} ATen"
    if chosen.is_aten:  # ATen's pick, by any rule above, then meets the packed GEMM's
        chosen, reason = prefer_packed(chosen, aten, margin, reason)
    return chosen, reason


def uses_cache(forced: bool) -> bool:
    """Whether a decision may be read from or written to the autotune cache: not when
    ``force_template`` names families (a cached winner must not stand in for benchmarking them,
    and a forced pick is no winner to remember)."""
    return not forced


def untimed(autotune: str, cached: bool) -> str | None:
    """The reason a decision is made without timing anything, or None to benchmark: "cache"
    when the cache holds the winner, a fallback to ATen's default under ``autotune="cache-only"``."""
    if cached:
        return "cache"
    if autotune == "cache-only":
        return "fallback: cache-only and no cache entry"
    return None
