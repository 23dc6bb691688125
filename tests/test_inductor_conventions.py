"""ext follows PyTorch's switches where a user of torch.compile expects them to reach (issue 47, item 4).

``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1`` (``torch._inductor.config.force_disable_caches``) turns off
every cache Inductor keeps; a user who sets it to rule caches out expects ext's autotune cache off
too: no decision served "(cache)", nothing written.
"""

from __future__ import annotations

import torch
from torch._inductor import config as inductor_config

from inductor_ext import tune
from inductor_ext.autotune import policy
from inductor_ext.lowering import decision_record


def _decide(options: dict) -> list[decision_record.Decision]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(24, 16).eval(), torch.randn(2, 24)
    first = len(decision_record.decisions)
    with tune.fresh_inductor_caches(), torch.no_grad():
        got = torch.compile(layer, backend="ext", options=options)(x)
    torch.testing.assert_close(got, layer(x), rtol=1e-5, atol=1e-5)
    return decision_record.decisions[first:]


def test_force_disable_caches_also_bypasses_ext_autotune_cache(tmp_path, monkeypatch):
    monkeypatch.setitem(policy.EFFORT_BUDGET, "quick", 1)  # one micro-kernel beside ATen: one C++ build
    db = tmp_path / "autotune.db"
    options = {"preset": "cpu", "autotune": "quick", "autotune_cache": str(db)}
    cold = _decide(options)
    assert cold and all(d.reason != "cache" for d in cold), [d.reason for d in cold]
    cached = _decide(options)
    assert [d.reason for d in cached] == ["cache"] * len(cold)  # the cache serves them
    # under the key they were found by (the trace's cache_key), and nothing is written again
    assert [d.cached_under for d in cached] == [d.key for d in cold] and all(d.key is None for d in cached)
    wal = db.with_name(db.name + "-wal")
    written = lambda: (db.read_bytes(), wal.read_bytes() if wal.exists() else b"")  # noqa: E731
    before = written()
    with inductor_config.patch(force_disable_caches=True):
        uncached = _decide(options)
    assert len(uncached) == len(cold)
    assert all(d.reason != "cache" for d in uncached), [d.reason for d in uncached]  # timed again
    assert written() == before  # and nothing written


def test_a_graph_served_by_inductors_caches_says_so_under_ext_autotune(tmp_path, monkeypatch, caplog):
    """A compile Inductor's FX graph cache (or AOTAutograd's) serves makes no decision: one line per
    graph says its choices came with the cached graph, where there used to be silence."""
    import logging

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # cold, then warm
    monkeypatch.setitem(policy.EFFORT_BUDGET, "quick", 1)
    options = {"preset": "cpu", "autotune": "quick", "autotune_cache": str(tmp_path / "autotune.db")}
    layer, x = torch.nn.Linear(24, 16).eval(), torch.randn(2, 24)

    def compile_once() -> list[str]:
        torch._dynamo.reset()
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="inductor_ext.autotune"), torch.no_grad():
            torch.compile(layer, backend="ext", options=options)(x)
        return [r.getMessage() for r in caplog.records if "served by" in r.getMessage()]

    first = len(decision_record.decisions)
    assert compile_once() == [] and len(decision_record.decisions) > first  # decided, not served
    # the autotune cache gained the winners, which keys a new graph: decided again, from that cache
    assert compile_once() == [] and {d.reason for d in decision_record.decisions[first:]} > {"cache"}
    first = len(decision_record.decisions)
    served = compile_once()  # nothing changed since: Inductor hands back the whole graph
    assert len(decision_record.decisions) == first
    assert len(served) == 1 and "cache" in served[0] and "made when it was first compiled" in served[0], served


def test_a_cached_decision_carries_its_cache_key_into_the_trace(monkeypatch):
    import json

    from inductor_ext import tracing
    from inductor_ext.autotune.cache_entry import ProblemKey
    from inductor_ext.lowering.decision_record import Decision

    key = ProblemKey(op="mm", shapes=[[8, 16], [16, 32]], strides=[[16, 1], [32, 1]], dtypes=["float32"] * 2,
                     device_name="cpu", arch="cpu")
    written = []
    monkeypatch.setattr(tracing, "enabled", lambda: True)
    monkeypatch.setattr(tracing, "_artifact", lambda name, payload, encoding="json": written.append(json.loads(payload())))
    tracing.decision(Decision(node="mm", op="mm", problem={}, winner="mm", reason="cache", cached_under=key))
    tracing.decision(Decision(node="mm", op="mm", problem={}, winner="mm", reason="benchmark", key=key))
    tracing.decision(Decision(node="mm", op="mm", problem={}, winner="mm", reason="fallback: off"))
    assert [w["cache_key"] and w["cache_key"]["op"] for w in written] == ["mm", "mm", None]
    assert all("cached_under" not in w for w in written)
