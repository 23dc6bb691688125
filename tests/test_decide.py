"""autotune/decide.py: the rules that pick the winner, on candidate records alone (no Inductor,
no compile). Each reason string a decision can carry is pinned here; tests/test_ext_choices.py
checks the same rules through ExtChoices.override_best_choice."""

import pytest

from inductor_ext.autotune import decide
from inductor_ext.autotune.decide import Candidate

INF = float("inf")


def aten(time_ms, warm_ms=None, name="aten", packed=False):
    return Candidate(name, time_ms, warm_ms, "aten", "aten", packed=packed)


def template(name, time_ms, warm_ms=None, default=False, family="triton.gemm"):
    return Candidate(name, time_ms, warm_ms, "template", family, default=default)


def pick(*candidates, margin=0.05, forced=()):
    best = min(candidates, key=lambda c: c.time_ms)
    chosen, reason = decide.pick(best, candidates, margin, forced)
    return chosen.name, reason


@pytest.mark.parametrize("template_ms, margin, winner, reason", [
    (0.90, 0.05, "t0", "benchmark"),                               # 10% faster beats a 5% margin
    (0.97, 0.05, "aten", "template within margin 5% of ATen"),     # 3% faster does not
    (1.00, 0.0, "aten", "benchmark"),                              # a tie: ATen is Inductor's best
    (0.99, 0.0, "t0", "benchmark"),
    (0.953, 0.05, "aten", "template within margin 5% of ATen"),    # 0.953 * 1.05 >= 1.0
    (0.95, 0.05, "t0", "benchmark"),                               # just beyond
])
def test_a_template_must_beat_aten_by_the_margin(template_ms, margin, winner, reason):
    assert pick(aten(1.0), template("t0", template_ms), margin=margin) == (winner, reason)


def test_a_tie_is_no_win_even_when_inductor_ranks_the_template_first():
    assert pick(template("t0", 1.0), aten(1.0), margin=0.0) == ("aten", "template within margin 0% of ATen")
    assert decide.short_of_margin(template("t0", 2.0, 1.0), [aten(4.0, 1.0)], 0.0) == "within margin 0%, timed warm, of"


@pytest.mark.parametrize("warm, winner, reason", [
    ((1.0, 1.04), "t0", "benchmark"),                                        # warm: not slower by over 5%
    ((1.0, 1.06), "aten", "template over 5% slower timed warm than ATen"),   # warm: slower by over 5%
    ((None, 2.0), "t0", "benchmark"),                                        # ATen not timed warm: flushed alone
])
def test_timed_warm_a_template_must_not_lose_to_aten_there(warm, winner, reason):
    assert pick(aten(1.0, warm[0]), template("t0", 0.80, warm[1])) == (winner, reason)


@pytest.mark.parametrize("other_ms, winner, reason", [
    (0.80, "t1", "benchmark"),                                                # 20% faster than the default
    (0.97, "t0", "triton.gemm config within margin 5% of its default"),      # upstream's pick stays
    (0.953, "t0", "triton.gemm config within margin 5% of its default"),
    (0.95, "t1", "benchmark"),
])
def test_another_config_must_beat_the_familys_default_by_the_margin(other_ms, winner, reason):
    assert pick(aten(5.0), template("t0", 1.0, default=True), template("t1", other_ms)) == (winner, reason)


@pytest.mark.parametrize("warm, winner, reason", [
    ((1.0, 0.80), "t1", "benchmark"),                                                       # 20% faster warm too
    ((1.0, 0.90), "t0", "triton.gemm config within margin 15%, timed warm, of its default"),  # warm needs 15%
    ((1.0, 1.10), "t0", "triton.gemm config within margin 15%, timed warm, of its default"),
])
def test_timed_warm_another_config_must_beat_the_default_by_the_cpu_config_margin(warm, winner, reason):
    candidates = (aten(5.0, 5.0), template("t0", 1.0, warm[0], default=True), template("t1", 0.80, warm[1]))
    assert pick(*candidates) == (winner, reason)


@pytest.mark.parametrize("times, warm, winner, reason", [  # times and warm: ATen, the default t0, t1
    ((1.0, 0.96, 0.95), (None, None, None), "t0", "triton.gemm config within margin 5% of its default"),
    ((1.0, 1.2, 0.5), (1.0, 1.0, 0.95), "aten",  # flushed, t1 beat both; warm, it is within 15% of the default
     "triton.gemm config within margin 15%, timed warm, of its default, which is slower than ATen"),
    ((1.0, 0.96, 0.80), (1.0, 1.10, 1.0), "aten",
     "triton.gemm config within margin 15%, timed warm, of its default, which is over 5% slower timed warm than ATen"),
])
def test_a_default_serving_for_the_familys_fastest_must_not_lose_to_aten(times, warm, winner, reason):
    candidates = (aten(times[0], warm[0]), template("t0", times[1], warm[1], default=True),
                  template("t1", times[2], warm[2]))
    assert pick(*candidates) == (winner, reason)


def test_a_failed_default_does_not_serve():
    assert pick(aten(5.0), template("t0", INF, default=True), template("t1", 0.99)) == ("t1", "benchmark")


def test_the_default_is_of_the_winners_family_only():
    candidates = (aten(5.0), template("t0", 1.0, default=True, family="cutedsl.gemm"), template("t1", 0.99))
    assert pick(*candidates) == ("t1", "benchmark")


PACKED = "ext_mkl_packed_mm"


@pytest.mark.parametrize("times, warm, winner, reason", [
    ((0.93, 1.0), (1.0, 0.97), PACKED, f"aten within margin 5%, timed warm, of {PACKED}"),  # faster flushed only
    ((0.97, 1.0), (0.90, 1.0), PACKED, f"aten within margin 5% of {PACKED}"),               # within flushed
    ((0.90, 1.0), (0.90, 1.0), "aten", "benchmark"),                                        # beyond in both
    ((0.90, 1.0), (None, None), "aten", "benchmark"),                                       # flushed alone
    ((1.0, 0.98), (None, None), PACKED, "benchmark"),                                       # the packed was fastest
    ((0.5, INF), (None, None), "aten", "benchmark"),                                        # it failed
])
def test_mm_must_beat_the_packed_gemm_freezing_would_call_by_the_margin(times, warm, winner, reason):
    assert pick(aten(times[0], warm[0]), aten(times[1], warm[1], name=PACKED, packed=True)) == (winner, reason)


def test_a_template_that_loses_to_aten_falls_to_the_packed_gemm_by_the_same_rule():
    candidates = (aten(0.97), aten(1.0, name=PACKED, packed=True), template("t0", 0.96))
    assert pick(*candidates) == (PACKED, f"aten within margin 5% of {PACKED}")


def test_force_template_picks_the_forced_familys_fastest_even_when_slower():
    candidates = (aten(1.0), template("t0", 3.0), template("t1", 2.0), template("c0", 0.5, family="cutedsl.gemm"))
    assert pick(*candidates, forced=("triton.gemm",)) == ("t1", "force_template=triton.gemm")


def test_force_template_falls_back_to_the_rules_when_every_forced_candidate_failed():
    assert pick(aten(1.0), template("t0", INF), forced=("triton.gemm",)) == ("aten", "benchmark")


def test_candidates_are_told_apart_by_identity_not_by_equal_fields():
    twin_a, twin_b = template("t", 1.0), template("t", 1.0)
    chosen, _ = decide.pick(twin_b, [aten(5.0), twin_a, twin_b], 0.05)
    assert chosen is twin_b


@pytest.mark.parametrize("autotune, cached, reason", [
    ("full", True, "cache"), ("cache-only", True, "cache"), ("cache-only", False, "fallback: cache-only and no cache entry"),
    ("full", False, None), ("default", False, None)])
def test_the_cache_decides_without_timing(autotune, cached, reason):
    assert decide.untimed(autotune, cached) == reason


def test_a_forced_compile_neither_reads_nor_writes_the_cache():
    assert decide.uses_cache(forced=False) and not decide.uses_cache(forced=True)


# ------------------------------------------------- flushed and warm timings that disagree (issue 29)

@pytest.mark.parametrize("flushed_ms, warm_ms, disagree", [
    (6.7733, 0.0079, True),     # the 1526x: ATen's GEMM waiting for a time slice
    (0.165, 0.0057, False),     # 29x, but 0.16 ms: a small op's operands and code from DRAM
    (0.079, 0.0079, False),     # exactly 10x
    (0.30, 0.02, True),         # 15x and 0.28 ms over
    (2.0, 0.25, False),         # 8x: a GEMM whose weights left the cache
    (float("inf"), 0.01, False),  # failed to run flushed: no timing to disagree with
])
def test_regimes_disagree_beyond_the_factor_and_the_cold_allowance(flushed_ms, warm_ms, disagree):
    assert decide.regimes_disagree(flushed_ms, warm_ms) is disagree
    assert aten(flushed_ms, warm_ms).regimes_disagree is disagree
    assert not aten(flushed_ms).regimes_disagree  # never timed warm: nothing to disagree with


def test_regimes_that_disagree_put_the_whole_decision_on_warm_timings():
    """The issue's decision: flushed, ATen 6773 us against the template's 4.4 us (a '1526x'
    speed-up); warm 7.9 us against 9.0 us, so ATen serves, and the reason says why."""
    candidates = (aten(6.7733, 0.0079), template("t0", 0.0044, 0.0090))
    assert pick(*candidates) == (
        "aten", "benchmark; flushed and warm timings over 10x apart (aten 6773.3us flushed, 7.9us warm): "
                "decided warm")
    chosen = decide.pick(candidates[1], candidates, 0.05)[0]
    assert chosen is candidates[0]  # the record the caller passed, not its warm copy
    assert decide.decided_times(candidates, chosen) == (0.0079, 0.0079, decide.disagreement_text(candidates))


def test_warm_timings_still_let_a_faster_template_win():
    candidates = (aten(6.7733, 0.0079), template("t0", 0.0044, 0.0050))
    assert pick(*candidates)[0] == "t0"
    winner_ms, aten_ms, why = decide.decided_times(candidates, candidates[1])
    assert (winner_ms, aten_ms) == (0.0050, 0.0079) and "decided warm" in why  # a 1.6x speed-up, not 1539x


def test_regimes_that_agree_decide_on_flushed_timings_as_before():
    candidates = (aten(0.165, 0.0057), template("t0", 0.050, 0.0055))
    assert pick(*candidates) == ("t0", "benchmark")
    assert decide.decided_times(candidates, candidates[1]) == (0.050, 0.165, None)


def test_without_warm_timings_for_every_candidate_nothing_is_switched():
    """A decision outside the cpu preset (no warm timings) keeps Inductor's timings."""
    candidates = (aten(6.7733, 0.0079), template("t0", 0.0044))
    assert decide.in_trusted_regime(candidates) == list(candidates)


def test_a_disturbed_timing_falls_back_to_aten_and_is_no_speed_up():
    """Every call of ATen's GEMM switched out (its time measured the OS): no timing is compared."""
    candidates = (Candidate("aten", 16.0, 16.0, "aten", "aten", disturbed=True), template("t0", 0.006, 0.004))
    assert pick(*candidates) == ("aten", "fallback: every timed call of aten was switched out by the OS: ATen")
    assert decide.decided_times(candidates, candidates[0])[1:] == (None, "every timed call of aten was switched out "
                                                                         "by the OS: ATen")


def test_a_disturbed_decision_prefers_the_packed_gemm_freezing_would_call():
    candidates = (aten(0.02, 0.01, name="mm"), aten(0.02, 0.01, name="packed", packed=True),
                  Candidate("t0", 12.0, 12.0, "template", "cpp.gemm", disturbed=True))
    assert pick(*candidates)[0] == "packed"
    assert pick(*candidates, forced=("cpp.gemm",))[0] == "t0"  # forced is forced


def test_a_forced_pick_says_only_that_whatever_the_regimes_say():
    """With real flushes a 21 us packed GEMM timed 224 us flushed (over 10x apart); a forced
    family's decision is still just forced (the conformance grid reads that reason)."""
    candidates = (aten(0.224, 0.0215, name="packed", packed=True), template("t0", 0.03, 0.02, family="cpp.gemm"))
    assert pick(*candidates, forced=("cpp.gemm",)) == ("t0", "force_template=cpp.gemm")


def test_a_disturbed_aten_choice_is_left_out_when_another_was_timed_clean():
    """The decode lm_head: MKL's 2-thread plain mm (7.8 ms) counted as switched in every call, its
    packed sgemm timed clean at 4.3 ms, a template clean at 2.0 ms: the template serves."""
    candidates = (Candidate("mm", 7.8, 7.7, "aten", "aten", disturbed=True), aten(4.3, 4.2, name="packed", packed=True),
                  template("t0", 2.0, 1.9, family="cpp.gemm"))
    assert pick(*candidates) == ("t0", "benchmark; mm left out: every timed call switched out by the OS")
    assert decide.decided_times(candidates, candidates[2]) == (2.0, 4.3, None)  # the speed-up is over the clean one
    slow = (candidates[0], candidates[1], template("t0", 4.2, 4.1, family="cpp.gemm"))
    assert pick(*slow)[0] == "packed"  # the rest decide by the usual rules: ATen within the margin serves


def test_a_reason_says_whether_the_os_disturbed_the_decision():
    """Tests that read a real timing's outcome accept a busy machine's through ``os_disturbed``."""
    fallback = (Candidate("aten", 16.0, 16.0, "aten", "aten", disturbed=True), template("t0", 0.006, 0.004))
    left_out = (Candidate("mm", 7.8, 7.7, "aten", "aten", disturbed=True), aten(4.3, 4.2, name="packed", packed=True))
    assert decide.os_disturbed(pick(*fallback)[1]) and decide.os_disturbed(pick(*left_out)[1])
    assert not decide.os_disturbed(pick(aten(1.0, 1.0), template("t0", 0.5, 0.5))[1])


def test_the_decision_line_flags_a_time_its_warm_timing_contradicts():
    """What the autotune log, the demo and ``dumps show`` print: the time, never a ratio from it."""
    from inductor_ext.autotune import decision_text

    candidates = [{"name": "addmm", "kind": "aten", "time_us": 6773.3, "warm_time_us": 7.9},
                  {"name": "t0", "kind": "template", "config": "cpp.gemm avx512_8x48x1", "time_us": 4.4,
                   "warm_time_us": 9.0}]
    assert decision_text.timings_text(candidates) == (
        "addmm 6773.3us (7.9us warm: over 10x apart, not compared), cpp.gemm avx512_8x48x1 4.4us")
    candidates[0]["warm_time_us"] = 2000.0
    assert decision_text.timings_text(candidates) == "addmm 6773.3us, cpp.gemm avx512_8x48x1 4.4us"
    # exactly 10x apart is not over 10x: the time stands unflagged
    assert decision_text.time_text({"time_us": 1000.0, "warm_time_us": 100.0}) == "1000.0us"


def test_a_speed_up_over_aten_comes_from_the_regime_the_decision_was_made_in():
    """``dumps show``'s "vs aten": the issue's '1526x' is 0.88x warm; none where the OS set a time."""
    from inductor_ext.autotune import decision_text

    candidates = [{"name": "addmm", "kind": "aten", "time_us": 6773.3, "warm_time_us": 7.9},
                  {"name": "t0", "kind": "template", "time_us": 4.4, "warm_time_us": 9.0}]
    assert decision_text.speedup_vs_aten("t0", "benchmark", candidates) == pytest.approx(7.9 / 9.0)
    candidates[0]["warm_time_us"] = 2000.0  # regimes agree: flushed, as decided
    assert decision_text.speedup_vs_aten("t0", "benchmark", candidates) == pytest.approx(6773.3 / 4.4)
    reason = "fallback: every timed call of addmm was switched out by the OS: ATen"
    assert decision_text.speedup_vs_aten("addmm", reason, candidates) is None
    assert decision_text.speedup_vs_aten("t0", "benchmark", candidates[1:]) is None  # no ATen timed
    # the rule's times are in ms, as decide's: 30us flushed vs 2us warm is within the cold allowance
    agree = [{"name": "addmm", "kind": "aten", "time_us": 30.0, "warm_time_us": 2.0},
             {"name": "t0", "kind": "template", "time_us": 4.0, "warm_time_us": 3.0}]
    assert decision_text.speedup_vs_aten("t0", "benchmark", agree) == pytest.approx(30.0 / 4.0)


def test_a_template_is_compared_with_the_fastest_aten_choice_not_the_first():
    """mm 1.0, the packed GEMM 0.93, a template 0.90 at 5%: 0.90 * 1.05 >= 0.93, so ATen serves."""
    winner, reason = pick(aten(1.0, name="mm"), aten(0.93, name="packed", packed=True), template("t0", 0.90))
    assert winner == "packed" and reason == "template within margin 5% of ATen"


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_times = st.floats(min_value=0.01, max_value=10.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(aten_ms=st.lists(_times, min_size=1, max_size=4),
       ratios=st.lists(st.floats(min_value=0.8, max_value=1.2, allow_nan=False), min_size=1, max_size=4),
       margin=st.sampled_from([0.0, 0.02, 0.05, 0.1]))
def test_a_template_serves_only_when_it_beats_every_aten_choice_by_the_margin(aten_ms, ratios, margin):
    """The rule's definition, over several ATen choices in any order (unwarmed timings, no default,
    none packed), with templates timed near the fastest ATen choice, where the margin decides: a
    template serves exactly when the fastest template beats the fastest ATen choice by the margin;
    otherwise the fastest ATen choice serves."""
    fastest_aten = min(aten_ms)
    template_ms = [fastest_aten * r for r in ratios]
    atens = [aten(t, name=f"a{i}") for i, t in enumerate(aten_ms)]
    templates = [template(f"t{i}", t) for i, t in enumerate(template_ms)]
    winner, _ = pick(*atens, *templates, margin=margin)
    fastest_template = min(template_ms)
    if fastest_template * (1 + margin) < fastest_aten:
        assert winner.startswith("t") and template_ms[int(winner[1:])] == fastest_template
    else:
        assert winner.startswith("a") and aten_ms[int(winner[1:])] == fastest_aten


def _warm(draw, time_ms, warm):
    """A warm timing near the flushed one (regimes that agree: the cpu preset times both), or none."""
    return time_ms * draw(st.floats(min_value=0.8, max_value=1.25)) if warm else None


def _several_aten(draw, times, packed=False, warm=False):
    """2-5 ATen choices (one of them the packed GEMM freezing calls, with ``packed``)."""
    n = draw(st.integers(2, 5))
    packs = draw(st.lists(st.booleans(), min_size=n, max_size=n)) if packed else [False] * n
    return [aten(t := draw(times), _warm(draw, t, warm), name=f"a{i}", packed=p) for i, p in enumerate(packs)]


def _in_any_order(draw, candidates):
    return draw(st.permutations(candidates))


@settings(max_examples=500, deadline=None)
@given(data=st.data(), margin=st.sampled_from([0.0, 0.02, 0.05, 0.1]), warm=st.booleans())
def test_a_served_template_beat_the_fastest_aten_choice_whatever_the_order(data, margin, warm):
    """The rule's definition over several ATen choices (the packed GEMM among them, any order,
    templates near them, failed ones, a family's default config; all timed warm too, or none):
    whatever serves is one of the candidates and finite; a template serves only when the fastest
    template beats the fastest ATen choice by the margin, and is itself no slower than that ATen
    choice (nor, timed warm, slower by over the margin: a default standing in for a config that
    beat it); ATen serves otherwise: its fastest choice, or the (fastest) packed GEMM that one does
    not beat by the margin in both regimes."""
    draw = data.draw
    atens = _several_aten(draw, _times, packed=True, warm=warm)
    fastest_ms = min(a.time_ms for a in atens)
    near = st.floats(min_value=0.8, max_value=1.2, allow_nan=False).map(lambda r: fastest_ms * r)
    templates = [template(f"t{i}", t, _warm(draw, t, warm), default=i == 0 and draw(st.booleans()))
                 for i, t in enumerate(draw(st.lists(st.one_of(near, st.just(INF)), min_size=1, max_size=4)))]
    candidates = _in_any_order(draw, atens + templates)
    fastest = min((c for c in candidates if c.is_aten), key=lambda c: c.time_ms)  # the first of equals
    best = min(candidates, key=lambda c: c.time_ms)
    chosen, reason = decide.pick(best, candidates, margin)
    assert any(chosen is c for c in candidates) and chosen.time_ms < INF, (chosen, reason)
    fastest_template = min(t.time_ms for t in templates)
    if fastest_template * (1 + margin) >= fastest.time_ms:
        assert chosen.is_aten, (chosen, reason)
    if chosen.is_aten:  # the fastest, or the packed GEMM, unless the fastest beats it by the margin in both regimes
        beaten = (fastest.time_ms * (1 + margin) < chosen.time_ms
                  and (not warm or fastest.warm_ms * (1 + margin) < chosen.warm_ms))
        fastest_packed = min((a.time_ms for a in atens if a.packed), default=None)
        assert chosen.time_ms == fastest.time_ms or (chosen.time_ms == fastest_packed and not beaten), (chosen, reason)
    else:
        assert fastest_template * (1 + margin) < fastest.time_ms and chosen.time_ms <= fastest.time_ms, (chosen, reason)
        assert not warm or chosen.warm_ms <= fastest.warm_ms * (1 + margin), (chosen, reason)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), margin=st.sampled_from([0.0, 0.02, 0.05, 0.1]))
def test_a_default_standing_in_for_a_faster_config_loses_to_no_aten_choice(data, margin):
    """Several ATen choices in any order, all timed warm too (the cpu preset); the family's fastest
    config beats the fastest ATen choice by the margin, and its default config is timed near it, so
    that it may stand in for it (within the margin of it, in either regime). Whichever template
    serves is no slower than the fastest ATen choice, nor over the margin slower than it warm;
    otherwise that ATen choice serves."""
    draw = data.draw
    ratio = st.floats(min_value=0.8, max_value=1.25)  # warm against flushed: the regimes agree
    fastest_ms = draw(_times)
    others = [fastest_ms * draw(st.floats(min_value=1.0, max_value=1.5)) for _ in range(draw(st.integers(1, 4)))]
    atens = [aten(t, t * draw(ratio), name=f"a{i}") for i, t in enumerate([fastest_ms, *others])]
    best_ms = fastest_ms / (1 + margin) * draw(st.floats(min_value=0.8, max_value=0.99))
    default_ms = fastest_ms * draw(st.floats(min_value=0.8, max_value=1.3))
    templates = [template("t0", default_ms, default_ms * draw(ratio), default=True),
                 template("t1", best_ms, best_ms * draw(ratio))]
    candidates = _in_any_order(draw, atens + templates)
    fastest = min((c for c in candidates if c.is_aten), key=lambda c: c.time_ms)  # the first of equals
    chosen, reason = decide.pick(min(candidates, key=lambda c: c.time_ms), candidates, margin)
    if chosen.is_aten:
        assert chosen is fastest, (chosen, reason)
    else:
        assert chosen.time_ms <= fastest.time_ms and chosen.warm_ms <= fastest.warm_ms * (1 + margin), (chosen, reason)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), margin=st.sampled_from([0.0, 0.05]))
def test_a_forced_familys_fastest_finite_candidate_serves(data, margin):
    """force_template over candidate sets: several ATen choices, two template families with
    failed (inf) candidates among theirs, in any order. With a forced family that has a finite
    candidate, the fastest finite candidate of the forced families serves, however slow, and says
    so; where every forced candidate failed, the rules decide among the rest (no failed one serves)."""
    draw = data.draw
    atens = _several_aten(draw, _times)
    templates = [template(f"{family}-{i}", t, family=family)
                 for family in ("triton.gemm", "cpp.gemm")
                 for i, t in enumerate(draw(st.lists(st.one_of(_times, st.just(INF)), min_size=1, max_size=3)))]
    forced = tuple(draw(st.lists(st.sampled_from(["triton.gemm", "cpp.gemm"]), min_size=1, max_size=2, unique=True)))
    candidates = _in_any_order(draw, atens + templates)
    best = min(candidates, key=lambda c: c.time_ms)
    chosen, reason = decide.pick(best, candidates, margin, forced)
    finite = [c for c in candidates if c.family in forced and c.time_ms < INF]
    if finite:
        assert any(chosen is c for c in finite), (chosen, reason)
        assert chosen.time_ms == min(c.time_ms for c in finite) and reason == f"force_template={chosen.family}"
    else:
        assert chosen.family not in forced and chosen.time_ms < INF and not reason.startswith("force_template"), \
            (chosen, reason)
