"""Autotune cache keys are honest through the real lowering path: a cached winner is reused,
and editing a template (its module's source hash) misses the cache instead of reusing a winner
chosen for other code, as does running on another CPU."""

import pytest

from _script_runner import interpret_env, run_json_script

pytestmark = pytest.mark.interp


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("template_edit")
    return run_json_script("_template_edit_script.py", str(tmp), env=interpret_env(tmp), timeout=900)


def test_winner_is_benchmarked_then_reused(results):
    (tuned,), (reused,) = results["tuned"], results["reused"]
    assert tuned["reason"] != "cache" and tuned["key"] is not None
    # the same kernel: a Triton choice's generated name (triton_ext_gemm_2) counts the process's choices
    assert reused["reason"] == "cache" and reused["served"] == tuned["served"], (tuned, reused)


def test_a_cached_template_winner_is_served_as_its_config(results):
    (reused,) = results["template_reused"]
    assert reused["reason"] == "cache" and reused["served"] == results["template_cached"], reused


def test_editing_the_template_misses_the_cache(results):
    (tuned,), (edited,), (retuned,) = results["tuned"], results["edited"], results["edited_tuned"]
    assert edited["reason"] == "fallback: cache-only and no cache entry", edited
    assert retuned["reason"] != "cache" and retuned["key"] != tuned["key"]


def test_a_record_from_another_cpu_misses_the_cache(results):
    """CPU records name the host (model, ISA, threads): one timed with other threads, or on an
    AVX-512 host for an AVX2 one (whose micro-kernels it cannot build), is not served."""
    (other,) = results["other_host"]
    assert other["reason"] == "fallback: cache-only and no cache entry", other
