"""Pass manager: stage placement, uuids, and Inductor's FX graph cache across processes."""

import json
from pathlib import Path

import pytest
import torch

from inductor_ext import presets
from inductor_ext.lowering import passes as pass_manager
from inductor_ext.lowering.passes.base import STAGES, ExtGraphPass
from _script_runner import run_json_script


class _Probe(ExtGraphPass):
    name = "probe"
    stage = "joint_post"

    def run(self, graph: torch.fx.Graph) -> int:
        return 0


def _config(**options):
    return presets.resolve({"preset": "cpu", **options})


def test_each_stage_goes_to_its_inductor_slot():
    assert set(pass_manager.STAGE_SLOTS) == set(STAGES)
    from torch._inductor import config as inductor_config

    for slot in pass_manager.STAGE_SLOTS.values():
        assert hasattr(inductor_config, slot), slot


def test_uuid_depends_on_config_preset_and_source(monkeypatch):
    base = _Probe(_config()).uuid()
    assert base == _Probe(_config()).uuid()  # stable
    assert base != _Probe(_config(dump_dir="/tmp/x")).uuid()  # config
    assert base != _Probe(presets.resolve({"preset": "hopper"})).uuid()  # preset
    monkeypatch.setattr("inductor_ext.lowering.passes.base.current_rank", lambda: 3)
    assert base != _Probe(_config()).uuid()  # rank


def test_uuid_follows_the_modules_a_pass_inherits_from(monkeypatch):
    import inspect

    from inductor_ext.lowering.passes import decode_attention_op, prefill_attention_op

    base = prefill_attention_op.PrefillAttentionOp(_config()).uuid()
    real = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda m: real(m) + ("# edited" if m is decode_attention_op else ""))
    assert prefill_attention_op.PrefillAttentionOp(_config()).uuid() != base  # its checks live there


def test_unknown_stage_is_rejected():
    class Bad(_Probe):
        stage = "post-grad"

    with pytest.raises(ValueError, match="post-grad.*pre_grad"):
        Bad(_config())


def _run(tmp_path: Path, options: dict) -> dict:
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           # Exercise Inductor's FX graph cache itself: AOTAutograd's cache would answer first.
           "TORCHINDUCTOR_AUTOGRAD_CACHE": "0", "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}
    return run_json_script("_cache_script.py", json.dumps(options), env=env, timeout=300)


@pytest.fixture(scope="module")
def cache_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fxcache")
    first = _run(tmp, {})
    second = _run(tmp, {})
    changed = _run(tmp, {"template_margin": 0.5})  # another config: another uuid
    return first, second, changed


def test_pass_runs_and_rewrites(cache_runs):
    first, _, _ = cache_runs
    assert first["ok"]
    assert first["applied"] == [["test_double_negation", "post_grad_pre", 1]]
    assert first["misses"] == 1 and first["hits"] == 0


def test_fresh_process_hits_fx_graph_cache_with_passes_installed(cache_runs):
    _, second, _ = cache_runs
    assert second["ok"]
    assert second["hits"] == 1 and second["misses"] == 0
    assert second["applied"] == []  # served from the cache: the pass did not need to run


def test_changed_config_misses(cache_runs):
    _, _, changed = cache_runs
    assert changed["ok"] and changed["misses"] == 1 and changed["hits"] == 0
