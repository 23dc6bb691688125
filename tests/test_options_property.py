"""Every option, thrown random values: a normalised value or an ExtOptionError naming the key,
never another exception, and never a NaN or infinity accepted."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inductor_ext import presets
from inductor_ext.config import OPTIONS, ExtOptionError, validate_options
from inductor_ext.lowering.passes import available_passes

available_passes()  # pass-owned options (fsdp_overlap) are registered on import

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["auto", "cpu", "hopper", "off", "quick", "full", "triton.gemm", "force"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


@pytest.mark.parametrize("key", sorted(OPTIONS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values)
def test_random_values_are_normalised_or_rejected_by_name(key, value):
    try:
        checked = validate_options({key: value})
    except ExtOptionError as e:
        assert repr(key) in str(e), str(e)
        return
    assert _finite(checked[key]), f"options[{key!r}] accepted {checked[key]!r}"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_margin_rejects_nan_and_infinity(bad):
    with pytest.raises(ExtOptionError, match=r"options\['template_margin'\] = (nan|inf|-inf): expected a finite number"):
        presets.resolve({"template_margin": bad})
