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
from inductor_ext.lowering import ext_choices


def _decide(options: dict) -> list[ext_choices.Decision]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(24, 16).eval(), torch.randn(2, 24)
    first = len(ext_choices.decisions)
    with tune.fresh_inductor_caches(), torch.no_grad():
        got = torch.compile(layer, backend="ext", options=options)(x)
    torch.testing.assert_close(got, layer(x), rtol=1e-5, atol=1e-5)
    return ext_choices.decisions[first:]


def test_force_disable_caches_also_bypasses_ext_autotune_cache(tmp_path, monkeypatch):
    monkeypatch.setitem(policy.EFFORT_BUDGET, "quick", 1)  # one micro-kernel beside ATen: one C++ build
    db = tmp_path / "autotune.db"
    options = {"preset": "cpu", "autotune": "quick", "autotune_cache": str(db)}
    cold = _decide(options)
    assert cold and all(d.reason != "cache" for d in cold), [d.reason for d in cold]
    assert [d.reason for d in _decide(options)] == ["cache"] * len(cold)  # the cache serves them
    wal = db.with_name(db.name + "-wal")
    written = lambda: (db.read_bytes(), wal.read_bytes() if wal.exists() else b"")  # noqa: E731
    before = written()
    with inductor_config.patch(force_disable_caches=True):
        uncached = _decide(options)
    assert len(uncached) == len(cold)
    assert all(d.reason != "cache" for d in uncached), [d.reason for d in uncached]  # timed again
    assert written() == before  # and nothing written
