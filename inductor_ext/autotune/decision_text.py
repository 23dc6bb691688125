"""One GEMM decision as text people read (the autotune log, the demo, ``dumps show``).

A decision's winner is the name Inductor gave the chosen kernel (``cpp_CppMicroGemmFP32Vec_0``,
``triton_tem_fused_mm_3``); what it means is its candidate's family and config
(``cpp.gemm avx512_8x48x1``), which is what these show.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from inductor_ext.autotune import decide


def problem_text(problem: Mapping[str, Any]) -> str:
    """``{"op": "addmm", "shapes": [[64], [8, 64], [64, 64]], "dtype": "float32"}`` ->
    ``addmm 64 8x64 64x64 float32``; other fields as ``name=value``."""
    shapes = " ".join("x".join(map(str, s)) or "scalar" for s in problem.get("shapes") or [])
    rest = [str(v) if k == "dtype" else f"{k}={v}" for k, v in problem.items()
            if k not in ("op", "shapes") and v not in (None, "", [], {})]
    return " ".join(p for p in (str(problem.get("op", "")), shapes, *rest) if p)


def winner_text(winner: str, candidates: Sequence[Mapping[str, Any]]) -> str:
    """The winner as its template config (``cpp.gemm avx512_8x48x1``); an ATen winner by name."""
    candidate = next((c for c in candidates if c.get("name") == winner), None)
    if candidate is not None and candidate.get("kind") != "aten" and candidate.get("config"):
        return str(candidate["config"])
    return winner


def time_text(candidate: Mapping[str, Any]) -> str:
    """``11.2us``; a time that disagrees with the same call timed warm (``decide.regimes_disagree``)
    as ``6773.3us (7.9us warm: over 10x apart, not compared)``, never as a speed-up."""
    flushed, warm = candidate["time_us"], candidate.get("warm_time_us")
    if warm is not None and decide.regimes_disagree(flushed / 1000, warm / 1000):
        return f"{flushed:.1f}us ({warm:.1f}us warm: over {decide.DISAGREE_FACTOR:g}x apart, not compared)"
    return f"{flushed:.1f}us"


def timings_text(candidates: Sequence[Mapping[str, Any]]) -> str:
    """``addmm 7.3us, cpp.gemm avx512_8x48x1 11.2us, ...`` for the candidates that were timed."""
    return ", ".join(f"{winner_text(c['name'], [c])} {time_text(c)}" for c in candidates
                     if c.get("time_us") is not None)


def speedup_vs_aten(winner: str, reason: str, candidates: Sequence[Mapping[str, Any]]) -> float | None:
    """The fastest ATen candidate's time over the winner's, in the regime the decision was made in
    (warm where a candidate's regimes disagree, ``autotune/decide.py``); None where either was not
    timed, or where every call of one was switched out by the OS (no time was compared)."""
    if decide.os_disturbed(reason):
        return None
    warm = any(c.get("warm_time_us") is not None and c.get("time_us") is not None
               and decide.regimes_disagree(c["time_us"] / 1000, c["warm_time_us"] / 1000) for c in candidates)
    times = {c["name"]: c.get("warm_time_us" if warm else "time_us") for c in candidates}
    aten = [c.get("warm_time_us" if warm else "time_us") for c in candidates if c.get("kind") == "aten"]
    aten = [t for t in aten if t]
    won = times.get(winner)
    return min(aten) / won if aten and won else None


def decision_line(node: str, problem: Mapping[str, Any], winner: str, reason: str,
                  candidates: Sequence[Mapping[str, Any]]) -> str:
    """``addmm_1 (addmm 32 8x64 64x32 float32): cpp.gemm avx512_16x16x1 (benchmark); timings``."""
    timed = timings_text(candidates)
    return (f"{node} ({problem_text(problem)}): {winner_text(winner, candidates)} ({reason})"
            + (f"; {timed}" if timed else ""))
