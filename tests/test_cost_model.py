"""The cost model for problems no decision table covers (``autotune/cost_model.py``), on plain
numbers: no Inductor, no compile. Its rule is checked by its definition: a template is picked only
where the predicted ratio to ATen, made worse by the model's error, beats ATen by the margin."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inductor_ext.autotune import cost_model
from inductor_ext.autotune.cache_entry import Entry, ProblemKey
from inductor_ext.autotune.cost_model import CostModel, Observation

FORM = "AVX512, 2 threads"
CONFIG = {"isa": "avx512", "block_m": 16, "block_n": 16, "block_k": 1, "cache_m": 0, "cache_n": 0, "cache_k": 0}


def key(m: int, n: int, k: int, dtype: str = "float32", op: str = "mm", device: str = FORM) -> ProblemKey:
    return ProblemKey(op=op, shapes=((m, k), (k, n)), strides=((k, 1), (1, k)), dtypes=(dtype, dtype),
                      device_name=device, arch="cpu", preset="cpu",
                      fp32_precision="ieee" if dtype == "float32" else "")


def entry(m: int, n: int, k: int, aten_us: float, template_us: float | None, **kw: str) -> Entry:
    """A table entry: the template wins when it is faster."""
    won = template_us is not None and template_us < aten_us
    candidates = [{"name": "mm", "time_us": aten_us, "policy": None, "error": None}]
    if template_us is not None:
        candidates.append({"name": "cpp_gemm_0", "time_us": template_us, "policy": "default", "error": None})
    return Entry(key=key(m, n, k, **kw), winner="cpp.gemm" if won else "aten",
                 config=dict(CONFIG) if won else {"name": "mm"},
                 winner_time_us=template_us if won else aten_us, aten_time_us=aten_us, candidates=candidates)


def grid(ratio: float, dtype: str = "float32") -> list[Entry]:
    """Entries at M = 1..512 x N in {768, 2048}, K=768, the template at ``ratio`` of ATen's time."""
    return [entry(m, n, 768, 100.0 * m, 100.0 * m * ratio, dtype=dtype) for m in (1, 4, 16, 64, 256, 512)
            for n in (768, 2048)]


def test_no_observation_of_the_kind_predicts_nothing_and_serves_aten() -> None:
    model = CostModel.from_entries(grid(0.5))
    for other in (key(16, 768, 768, dtype="bfloat16"), key(16, 768, 768, op="addmm"),
                  key(16, 768, 768, device="AVX2, 2 threads")):
        p = model.predict(other)
        assert p.log_ratio is None and not p.template_wins(0.0)
        assert "no table entry of this kind" in p.text()


def test_far_problems_are_not_predicted() -> None:
    model = CostModel.from_entries(grid(0.5))
    p = model.predict(key(16, 768 * 32, 768 * 16))  # 5 + 4 doublings away
    assert p.log_ratio is None and "within 3" in p.text()


def test_a_consistent_win_is_served_with_the_neighbours_config() -> None:
    model = CostModel.from_entries(grid(0.5))
    p = model.predict(key(32, 1024, 768))
    assert p.log_ratio == pytest.approx(math.log(0.5))
    assert p.error == pytest.approx(0.0, abs=1e-9)  # every leave-one-out prediction was exact
    assert p.template_wins(0.05)
    assert p.configs and p.configs[0] == ("cpp.gemm", CONFIG)
    assert p.aten_us is not None and p.template_us == pytest.approx(p.aten_us * 0.5)


def test_a_win_inside_the_margin_is_not_served() -> None:
    model = CostModel.from_entries(grid(0.97))
    p = model.predict(key(32, 1024, 768))
    assert p.log_ratio < 0 and not p.template_wins(0.05)
    assert p.template_wins(0.0)


def test_a_loss_never_serves_a_template() -> None:
    model = CostModel.from_entries(grid(1.3))
    p = model.predict(key(32, 1024, 768))
    assert not p.template_wins(0.0) and p.configs == ()  # ATen won everywhere: no config to serve


def test_entries_where_no_template_was_timed_count_as_losses() -> None:
    entries = [entry(m, 768, 768, 100.0, None) for m in (1, 4, 16, 64)]
    model = CostModel.from_entries(entries)
    p = model.predict(key(8, 768, 768))
    assert p.log_ratio == pytest.approx(cost_model.NOT_OFFERED)
    assert not p.template_wins(0.0)


def test_the_error_is_the_leave_one_out_miss_and_can_veto_a_predicted_win() -> None:
    # Alternating wins and losses along M: each left-out entry is predicted from neighbours of the
    # other sign, so the model's error is large and a mean that favours the template is not trusted.
    entries = [entry(m, 768, 768, 100.0, 40.0 if i % 2 else 150.0) for i, m in enumerate((1, 2, 4, 8, 16, 32, 64))]
    model = CostModel.from_entries(entries)
    p = model.predict(key(8, 768, 768))
    assert p.error > 0.3
    assert not p.template_wins(0.05)


def test_entries_without_an_aten_time_are_not_observations() -> None:
    e = entry(16, 768, 768, 100.0, 50.0)
    e.aten_time_us = None
    assert cost_model.observe(e) is None


def test_work_scales_predicted_times() -> None:
    model = CostModel.from_entries(grid(0.5))
    small, large = model.predict(key(64, 768, 768)), model.predict(key(128, 768, 768))
    assert small.aten_us is not None and large.aten_us is not None
    assert large.aten_us > small.aten_us  # twice the rows, more predicted time


_ratio = st.floats(min_value=0.2, max_value=5.0)


@settings(max_examples=60, deadline=None)
@given(ratios=st.lists(_ratio, min_size=3, max_size=10), margin=st.sampled_from([0.0, 0.05, 0.2]),
       m=st.integers(1, 1024))
def test_the_rule_by_its_definition(ratios: list[float], margin: float, m: int) -> None:
    """Whatever the table says, a template is served only where the prediction plus the model's
    error beats ATen by the margin, never where every neighbour lost, and always with a config
    some neighbour won with."""
    entries = [entry(2 ** i, 768, 768, 100.0, 100.0 * r) for i, r in enumerate(ratios)]
    model = CostModel.from_entries(entries)
    p = model.predict(key(m, 768, 768))
    if p.template_wins(margin):
        assert p.log_ratio is not None and p.log_ratio + p.error < -math.log1p(margin)
        assert any(r < 1.0 for r in ratios)
        assert p.configs and p.configs[0][0] == "cpp.gemm"
    if all(r >= 1.0 for r in ratios):
        assert not p.template_wins(margin)


def test_observations_compare_only_their_kind() -> None:
    o = cost_model.observe(entry(16, 768, 768, 100.0, 50.0))
    assert isinstance(o, Observation)
    transposed = ProblemKey(op="mm", shapes=((16, 768), (768, 768)), strides=((768, 1), (768, 1)),
                            dtypes=("float32", "float32"), device_name=FORM, arch="cpu", preset="cpu",
                            fp32_precision="ieee")
    assert cost_model.kind_of(transposed) != o.kind  # a weight stored the other way is another kind


# ------------------------------------------------------------------ the parts, on numbers worked by hand
# (each pins what a mutant of cost_model.py changed and no test above saw: scripts/mutate_changes.py)


def test_work_is_a_gemms_multiply_adds_and_anything_elses_root_of_its_sizes() -> None:
    assert cost_model._work(key(16, 768, 64)) == pytest.approx(math.log2(16 * 768 * 64))
    bmm = ProblemKey(op="bmm", shapes=((4, 16, 64), (4, 64, 32)), strides=((1024, 64, 1), (2048, 32, 1)),
                     dtypes=("float32", "float32"), device_name=FORM, arch="cpu", preset="cpu", fp32_precision="ieee")
    assert cost_model._work(bmm) == pytest.approx(math.log2(4 * 16 * 64 * 32))
    attention = ProblemKey(op="prefill_attention", shapes=((1, 2, 8, 64),) * 3, strides=((1024, 512, 64, 1),) * 3,
                           dtypes=("float32",) * 3, device_name=FORM, arch="cpu", preset="cpu")
    assert cost_model._work(attention) == pytest.approx(0.5 * 3 * math.log2(1 * 2 * 8 * 64))


def test_a_contiguous_three_d_input_is_contiguous() -> None:
    assert cost_model._is_contiguous((4, 16, 64), (1024, 64, 1))
    assert not cost_model._is_contiguous((4, 16, 64), (1024, 1, 16))
    assert cost_model._is_contiguous((1, 16, 64), (7, 64, 1))  # a size-1 dim's stride says nothing


def test_sub_microsecond_aten_times_are_observations() -> None:
    assert cost_model.observe(entry(1, 8, 8, 0.5, 0.25)) is not None


def test_predicted_times_scale_with_the_work() -> None:
    """ATen's time exactly proportional to M*N*K in the table: the prediction at an unseen size is exact."""
    entries = [entry(m, n, 768, m * n * 768 / 1e4, m * n * 768 / 2e4) for m in (1, 4, 16, 64) for n in (768, 2048)]
    p = CostModel.from_entries(entries).predict(key(8, 1024, 768))
    assert p.aten_us == pytest.approx(8 * 1024 * 768 / 1e4) and p.template_us == pytest.approx(8 * 1024 * 768 / 2e4)
    assert p.neighbours == cost_model.NEIGHBOURS


def test_neighbours_weigh_by_the_inverse_square_of_one_plus_their_distance() -> None:
    near, far = entry(4, 768, 768, 100.0, 50.0), entry(16, 768, 768, 100.0, 200.0)  # distance 1 and 1 from M=8
    farther = entry(64, 768, 768, 100.0, 300.0)  # distance 3
    p = CostModel.from_entries([near, far, farther]).predict(key(8, 768, 768))
    w = [1 / 2 ** 2, 1 / 2 ** 2, 1 / 4 ** 2]
    want = (w[0] * math.log(0.5) + w[1] * math.log(2.0) + w[2] * math.log(3.0)) / sum(w)
    assert p.log_ratio == pytest.approx(want)


def test_the_error_is_the_quantile_of_the_misses_not_the_largest() -> None:
    entries = [entry(2 ** i, 768, 768, 100.0, 50.0) for i in range(10)] + [entry(1024, 768, 768, 100.0, 400.0)]
    model = CostModel.from_entries(entries)
    kind = cost_model.kind_of(key(1, 768, 768))
    group = model._by_kind[kind]
    misses = sorted(abs(cost_model._nearest(group[:i] + group[i + 1:], o.sizes, o.work)[0] - o.log_ratio)
                    for i, o in enumerate(group))
    assert model.error(kind) == pytest.approx(misses[int(cost_model.ERROR_QUANTILE * len(misses))])
    assert model.error(kind) < misses[-1]


def test_a_winning_neighbour_at_the_radius_still_lends_its_config() -> None:
    at_radius = entry(64, 768, 768, 100.0, 50.0)  # M=64 is log2 distance 3 from M=8
    p = CostModel.from_entries([at_radius, entry(2, 768, 768, 100.0, 50.0), entry(1, 768, 768, 100.0, 50.0)]
                               ).predict(key(8, 768, 768))
    assert len(p.configs) == 1  # the same config from all three, once
    only_far = CostModel.from_entries([at_radius]).predict(key(8, 768, 768))
    assert only_far.configs == (("cpp.gemm", CONFIG),)


def test_a_prediction_exactly_at_the_margin_does_not_win() -> None:
    p = cost_model.Prediction(-math.log1p(0.05), 0.0, 100.0, 100 / 1.05, (("cpp.gemm", CONFIG),), 4)
    assert not p.template_wins(0.05) and p.template_wins(0.04)


def test_timing_is_pruned_only_where_the_template_loses_even_with_the_error_in_its_favour() -> None:
    assert CostModel.from_entries(grid(1.3)).predict(key(32, 1024, 768)).template_loses(0.05)
    assert not CostModel.from_entries(grid(0.5)).predict(key(32, 1024, 768)).template_loses(0.05)
    assert not CostModel.from_entries(grid(1.3)).predict(key(16, 768, 768, dtype="bfloat16")).template_loses(0.0)
    # exactly at the bound: at its optimistic ratio the template would tie the margin, not beat it;
    # a smaller margin it would beat, so it is timed
    at = cost_model.Prediction(-math.log1p(0.05) + 0.1, 0.1, 100.0, 100.0, (), 4)
    assert at.template_loses(0.05) and not at.template_loses(0.04)
    assert not cost_model.Prediction(1.0, math.inf, 100.0, 100.0).template_loses(0.0)  # no model: no pruning


@settings(max_examples=60, deadline=None)
@given(ratios=st.lists(_ratio, min_size=3, max_size=10), margin=st.sampled_from([0.0, 0.05, 0.2]),
       m=st.integers(1, 1024))
def test_pruning_never_drops_what_the_model_would_serve(ratios: list[float], margin: float, m: int) -> None:
    """The two sides of one bound: a prediction that serves a template never prunes its timing,
    and pruning means that even the optimistic ratio does not beat ATen by the margin."""
    p = CostModel.from_entries([entry(2 ** i, 768, 768, 100.0, 100.0 * r) for i, r in enumerate(ratios)]
                               ).predict(key(m, 768, 768))
    assert not (p.template_wins(margin) and p.template_loses(margin))
    if p.template_loses(margin):
        assert p.log_ratio is not None and p.log_ratio - p.error >= -math.log1p(margin)


def test_configs_of_names_one_familys_winners_nearest_first() -> None:
    other = {"block_m": 4}
    p = cost_model.Prediction(-1.0, 0.0, 100.0, 40.0, (("cpp.gemm", CONFIG), ("cpp.flash", other),
                                                      ("cpp.gemm", {**CONFIG, "block_m": 32})), 3)
    assert p.configs_of("cpp.gemm") == (CONFIG, {**CONFIG, "block_m": 32})
    assert p.configs_of("cpp.flash") == (other,) and p.configs_of("triton.gemm") == ()


def _with_aten_side(e: Entry, name: str, time_us: float | None) -> Entry:
    """``e`` with one more ATen-side candidate (no template policy), as a packed or panel GEMM is recorded."""
    candidates = [*e.candidates, {"name": name, "time_us": time_us, "policy": None, "error": None}]
    return Entry(key=e.key, winner=e.winner, config=e.config, winner_time_us=e.winner_time_us,
                 aten_time_us=e.aten_time_us, candidates=candidates)


def test_where_aten_serves_the_nearest_entrys_faster_aten_side_choice_is_picked_past_the_margin() -> None:
    # ATen wins everywhere (the template 2x slower); at 512 rows the panel GEMM ran in 60% of mm's time
    entries = [_with_aten_side(e, "ext_panel_mm", 60.0 * 512 if e.key.shapes[0][0] == 512 else None)
               for e in grid(2.0)]
    model = CostModel.from_entries(entries)
    near = model.predict(key(384, 2048, 768))  # nearest: 512 rows, N 2048
    assert near.aten_choice == ("ext_panel_mm", pytest.approx(math.log(100 / 60)))
    assert near.aten_pick(0.05) == "ext_panel_mm"
    assert near.aten_pick(100 / 60 - 1) is None  # a gain exactly at the margin does not count
    assert near.aten_pick(0.7) is None
    far = model.predict(key(24, 2048, 768))  # nearest: 16 rows, where the panel was not timed
    assert far.aten_choice is None and far.aten_pick(0.0) is None


def _own_pick(e: Entry) -> tuple[str, float] | None:
    """The ATen-side choice ``e`` alone lends (its fastest but the op, where it beat the op)."""
    return cost_model._aten_choice([(0.0, cost_model.observe(e))])[0]


def test_the_op_itself_fastest_or_untimed_is_no_aten_pick() -> None:
    slower = _with_aten_side(entry(16, 768, 768, 100.0, 200.0), "ext_mkl_packed_mm", 120.0)
    assert _own_pick(slower) is None
    untimed_op = entry(16, 768, 768, 100.0, 200.0)
    untimed_op = Entry(key=untimed_op.key, winner="aten", config={"name": "ext_mkl_packed_mm"}, winner_time_us=50.0,
                       aten_time_us=50.0, candidates=[{"name": "mm", "time_us": None, "policy": None, "error": None},
                                                      {"name": "ext_mkl_packed_mm", "time_us": 50.0, "policy": None,
                                                       "error": None}])
    assert _own_pick(untimed_op) is None
    template_faster = _with_aten_side(entry(16, 768, 768, 100.0, 20.0), "ext_mkl_packed_mm", 80.0)
    assert _own_pick(template_faster) == ("ext_mkl_packed_mm", pytest.approx(math.log(100 / 80)))


def test_an_entry_atens_side_won_lends_no_family_or_config() -> None:
    """Its config names ATen's choice (``{"name": ...}``), which no family could read."""
    o = cost_model.observe(_with_aten_side(entry(16, 768, 768, 100.0, 200.0), "ext_mkl_packed_mm", 80.0))
    assert o.family is None and o.config is None
    won = cost_model.observe(entry(16, 768, 768, 100.0, 50.0))
    assert won.family == "cpp.gemm" and won.config == CONFIG


def _varied(k: ProblemKey, *, returned: bool = False, dynamic: bool = False) -> ProblemKey:
    """``k`` returned by its graph and/or with symbolic rows (the first input's first dim)."""
    return dataclasses.replace(k, returned=returned, dynamic=((0,), ()) if dynamic else ())


def _widened_grid() -> list[Entry]:
    """bf16 entries (static, not returned) where ATen's op serves and the widened GEMM ran in a
    fifth of its time from 16 rows."""
    return [_with_aten_side(e, "ext_widened_mm", 20.0 * e.key.shapes[0][0] if e.key.shapes[0][0] >= 16 else None)
            for e in grid(2.0, dtype="bfloat16")]


@pytest.mark.parametrize("returned,dynamic,differs", [(True, False, "an output not returned"),
                                                     (False, True, "static sizes"),
                                                     (True, True, "an output not returned and static sizes")])
def test_a_kind_with_no_entry_borrows_the_aten_side_pick_of_its_library_kind(returned: bool, dynamic: bool,
                                                                               differs: str) -> None:
    model = CostModel.from_entries(_widened_grid())
    p = model.predict(_varied(key(128, 2048, 768, dtype="bfloat16"), returned=returned, dynamic=dynamic))
    assert p.log_ratio is None and not p.template_wins(0.0)  # the template side is not borrowed
    assert p.aten_pick(0.05) == "ext_widened_mm" and p.aten_choice_from == differs
    assert p.aten_choice == ("ext_widened_mm", pytest.approx(math.log(5.0)))
    assert "no table entry of this kind" in p.text()


def test_the_problems_own_kind_is_preferred_and_the_library_kind_still_needs_to_be_near() -> None:
    own = [_varied(e.key, returned=True) for e in grid(2.0, dtype="bfloat16")]  # returned, the op fastest
    entries = _widened_grid() + [Entry(key=k, winner="aten", config={"name": "mm"}, winner_time_us=100.0,
                                       aten_time_us=100.0, candidates=[{"name": "mm", "time_us": 100.0,
                                                                        "policy": None, "error": None}])
                                 for k in own]
    model = CostModel.from_entries(entries)
    p = model.predict(_varied(key(128, 2048, 768, dtype="bfloat16"), returned=True))
    assert p.aten_choice is None and p.aten_choice_from == ""  # its own kind's nearest: the op itself
    far = model.predict(_varied(key(128, 2048 * 16, 768, dtype="bfloat16"), dynamic=True))  # 4 doublings of N
    assert far.aten_choice is None and far.aten_pick(0.0) is None
    other_dtype = model.predict(_varied(key(128, 2048, 768), dynamic=True))  # fp32: another library kind
    assert other_dtype.aten_choice is None


def test_an_own_kind_entry_too_far_away_still_lets_the_library_kind_lend_its_pick() -> None:
    far_own = _varied(key(1, 768 * 64, 768, dtype="bfloat16"), dynamic=True)
    model = CostModel.from_entries(_widened_grid() + [entry(1, 768 * 64, 768, 100.0, 200.0, dtype="bfloat16")])
    model = CostModel([*model.observations, dataclasses.replace(model.observations[-1],
                                                                kind=cost_model.kind_of(far_own))])
    p = model.predict(_varied(key(128, 2048, 768, dtype="bfloat16"), dynamic=True))
    assert "within 3" in p.text() and p.aten_pick(0.05) == "ext_widened_mm" and p.aten_choice_from == "static sizes"


def test_the_library_kind_is_the_kind_less_returned_and_dynamic() -> None:
    k = key(16, 768, 768, dtype="bfloat16")
    kinds = {cost_model.kind_of(_varied(k, returned=r, dynamic=d)) for r in (False, True) for d in (False, True)}
    assert len(kinds) == 4 and len({cost_model.library_kind_of(kd) for kd in kinds}) == 1
    others = [key(16, 768, 768), key(16, 768, 768, dtype="bfloat16", op="addmm"),
              key(16, 768, 768, dtype="bfloat16", device="AVX2, 2 threads"), dataclasses.replace(k, arch="cuda"),
              dataclasses.replace(k, preset="aten")]
    assert len({cost_model.library_kind_of(cost_model.kind_of(o)) for o in [k, *others]}) == 6


def test_a_win_beyond_the_radius_lends_no_config() -> None:
    near_losses = [entry(m, 768, 768, 100.0, 200.0) for m in (4, 8, 16)]
    p = CostModel.from_entries([*near_losses, entry(512, 768, 768, 100.0, 50.0)]).predict(key(8, 768, 768))
    assert p.neighbours == 3 and p.configs == ()  # 512 rows are 6 doublings from 8


def test_nothing_of_the_kind_near_has_no_error_and_says_why() -> None:
    model = CostModel.from_entries(grid(0.5))
    none = model.predict(key(16, 768, 768, dtype="bfloat16"))
    far = model.predict(key(16, 768 * 32, 768 * 16))
    assert none.error == math.inf and far.error == math.inf
    assert none.why_none == "no table entry of this kind of problem"


def test_the_difference_is_said_from_the_entry_lent_both_ways() -> None:
    """Static entries lend to a problem with symbolic rows and a returned output, and such entries
    to a static one whose output is not returned; each pick says how its entry differs."""
    lender = [_with_aten_side(e, "ext_widened_mm", 20.0 * e.key.shapes[0][0]) for e in grid(2.0, dtype="bfloat16")]
    varied = [dataclasses.replace(e, key=_varied(e.key, returned=True, dynamic=True)) for e in lender]
    plain = key(128, 2048, 768, dtype="bfloat16")
    assert CostModel.from_entries(varied).predict(plain).aten_choice_from == "a returned output and symbolic sizes"
    assert CostModel.from_entries(lender).predict(_varied(plain, returned=True, dynamic=True)).aten_choice_from == (
        "an output not returned and static sizes")


def test_an_entry_of_the_library_kind_at_the_radius_still_lends_its_pick() -> None:
    at_radius = _with_aten_side(entry(64, 768, 768, 100.0, 200.0, dtype="bfloat16"), "ext_widened_mm", 20.0)
    p = CostModel.from_entries([at_radius]).predict(_varied(key(8, 768, 768, dtype="bfloat16"), dynamic=True))
    assert p.aten_pick(0.05) == "ext_widened_mm"  # M=64 is log2 distance 3 from M=8


def _aten_side(m: int, gains: dict[str, float], dtype: str = "float32") -> Entry:
    """An entry at ``m`` rows (N 768, K 768) where ATen's op served (the template 2x slower) and
    each named ATen-side choice ran at the op's time divided by its gain."""
    e = entry(m, 768, 768, 100.0, 200.0, dtype=dtype)
    for name, gain in gains.items():
        e = _with_aten_side(e, name, 100.0 / gain)
    return e


def test_the_aten_side_pick_is_the_mean_gain_of_the_nearest_not_the_nearest_alone() -> None:
    """The packed GEMM 10% faster in the nearest entry (64 rows) and 10% slower in the three next to
    it: at 48 rows the weighted mean is below 0 and the op serves (the nearest alone would have
    served the packed GEMM)."""
    entries = [_aten_side(64, {"ext_mkl_packed_mm": 1.1}),
               *(_aten_side(m, {"ext_mkl_packed_mm": 1 / 1.1}) for m in (32, 128, 256))]
    model = CostModel.from_entries(entries)
    assert _own_pick(entries[0]) == ("ext_mkl_packed_mm", pytest.approx(math.log(1.1)))
    weights = [1 / (1 + abs(math.log2(m / 48))) ** 2 for m in (64, 32, 128, 256)]
    assert weights[0] == max(weights)  # 64 rows is the nearest
    mean = sum(w * s * math.log(1.1) for w, s in zip(weights, (1, -1, -1, -1))) / sum(weights)
    assert mean < 0
    p = model.predict(key(48, 768, 768))
    assert p.aten_choice is None and p.aten_choice_entries == 0 and p.aten_pick(0.0) is None
    # where the nearest weighs more than the rest together (its own size), the mean follows it
    exact = model.predict(key(64, 768, 768))
    assert exact.aten_choice[0] == "ext_mkl_packed_mm" and exact.aten_choice_entries == 4


def test_the_mean_is_over_the_entries_that_timed_the_choice_and_the_largest_mean_wins() -> None:
    entries = [_aten_side(64, {"ext_mkl_packed_mm": 1.2, "ext_panel_mm": 1.5}),
               _aten_side(128, {"ext_mkl_packed_mm": 1.4}),  # the panels not timed here
               _aten_side(32, {"ext_mkl_packed_mm": 1.3, "ext_panel_mm": 1.1})]
    p = CostModel.from_entries(entries).predict(key(64, 768, 768))
    w = 1 / (1 + 1) ** 2  # 32 and 128 rows are one doubling from 64
    panel = (math.log(1.5) + w * math.log(1.1)) / (1 + w)
    packed = (math.log(1.2) + w * math.log(1.4) + w * math.log(1.3)) / (1 + 2 * w)
    assert panel > packed
    assert p.aten_choice == ("ext_panel_mm", pytest.approx(panel)) and p.aten_choice_entries == 2
    assert p.aten_pick(math.exp(panel) - 1.001) == "ext_panel_mm" and p.aten_pick(math.exp(panel) - 0.999) is None


def test_only_the_neighbours_count_toward_the_mean() -> None:
    """A fifth entry, farther than the four nearest, does not pull the mean (nor one past the radius)."""
    four = [_aten_side(m, {"ext_mkl_packed_mm": 1.2}) for m in (64, 32, 128, 256)]
    fifth = _aten_side(16, {"ext_mkl_packed_mm": 1 / 100})
    p = CostModel.from_entries([*four, fifth]).predict(key(64, 768, 768))
    assert p.aten_choice == ("ext_mkl_packed_mm", pytest.approx(math.log(1.2))) and p.aten_choice_entries == 4


def test_a_borrowed_pick_is_the_mean_of_the_library_kinds_nearest_too() -> None:
    lenders = [_aten_side(64, {"ext_widened_mm": 5.0}, dtype="bfloat16"),
               _aten_side(128, {"ext_widened_mm": 1 / 10.0}, dtype="bfloat16")]
    p = CostModel.from_entries(lenders).predict(_varied(key(64, 768, 768, dtype="bfloat16"), dynamic=True))
    w = 1 / (1 + 1) ** 2
    mean = (math.log(5.0) + w * math.log(1 / 10.0)) / (1 + w)
    assert mean > 0 and p.aten_choice == ("ext_widened_mm", pytest.approx(mean)) and p.aten_choice_entries == 2
    assert p.aten_choice_from == "static sizes"
    lenders[1] = _aten_side(128, {"ext_widened_mm": 1 / 1000.0}, dtype="bfloat16")  # the mean now below 0
    p = CostModel.from_entries(lenders).predict(_varied(key(64, 768, 768, dtype="bfloat16"), dynamic=True))
    assert p.aten_choice is None and p.aten_pick(0.0) is None


def test_an_observation_keeps_every_aten_side_gain_and_its_pick_is_the_largest_above_zero() -> None:
    o = cost_model.observe(_aten_side(16, {"ext_mkl_packed_mm": 0.8, "ext_panel_mm": 1.25}))
    assert o.aten_gains == pytest.approx({"ext_mkl_packed_mm": math.log(0.8), "ext_panel_mm": math.log(1.25)})
    assert cost_model._aten_choice([(0.0, o)])[0] == ("ext_panel_mm", pytest.approx(math.log(1.25)))
    assert _own_pick(_aten_side(16, {"ext_mkl_packed_mm": 0.8})) is None
    assert _own_pick(_aten_side(16, {"ext_mkl_packed_mm": 1.0})) is None  # a tie is no gain


def test_a_mean_gain_of_zero_is_no_choice_and_an_exact_tie_keeps_the_first_timed() -> None:
    tie = CostModel.from_entries([_aten_side(64, {"ext_mkl_packed_mm": 1.0})]).predict(key(64, 768, 768))
    assert tie.aten_choice is None and tie.aten_choice_entries == 0
    both = CostModel.from_entries([_aten_side(64, {"ext_mkl_packed_mm": 1.25, "ext_panel_mm": 1.25})])
    assert both.predict(key(64, 768, 768)).aten_choice[0] == "ext_mkl_packed_mm"  # in the entry's order
