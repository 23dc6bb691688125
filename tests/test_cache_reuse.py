"""A compile answers every decision from the cache an earlier compile filled (issue 29, item 3).

The autotune cache key holds the source hash of the code that decides and generates the kernels
(``template_keys.templates_hash``). That hash is of the code this process loaded: a source file
edited on disk while the process runs (a shared checkout, a branch switch) used to move the key
mid-process: a compile timed again problems the process had just decided, under a hash of code it
does not run (bench/compile_time.py's cold compile of the cpu bench model, run while a seam module
was edited in the checkout, put one problem under two hashes). A fresh process that loads edited
code misses rightly; what it loaded is what its keys name.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from inductor_ext import tune
from inductor_ext.autotune import policy
from inductor_ext.lowering import decision_record, template_keys


def _compile(layer: torch.nn.Module, x: torch.Tensor, options: dict) -> list[decision_record.Decision]:
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    with tune.fresh_inductor_caches(), torch.no_grad():  # lowering (and so deciding) runs every time
        got = torch.compile(layer, backend="ext", options=options)(x)
    torch.testing.assert_close(got, layer(x), rtol=1e-5, atol=1e-5)  # fp32: a bf16 slip fails this
    return decision_record.decisions[first:]


@pytest.fixture
def seam_module(tmp_path, monkeypatch):
    """A module of the lowering seam (part of the key) whose file can be edited on disk."""
    path = tmp_path / "_reuse_seam.py"
    path.write_text("ROWS = 1\n")
    spec = importlib.util.spec_from_file_location("_reuse_seam", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "_reuse_seam", module)
    seam = template_keys.seam_modules()
    monkeypatch.setattr(template_keys, "seam_modules", lambda: (*seam, module))
    monkeypatch.setitem(policy.EFFORT_BUDGET, "quick", 1)  # one micro-kernel beside ATen: one C++ build
    return path


def test_second_compile_answers_every_decision_from_the_cache(tmp_path, seam_module):
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(24, 16).eval(), torch.randn(2, 24)
    options = {"preset": "cpu", "autotune_cache": str(tmp_path / "autotune.db")}
    cold = _compile(layer, x, {**options, "autotune": "quick"})
    assert cold and all(d.key is not None for d in cold), [(d.op, d.reason) for d in cold]
    seam_module.write_text("ROWS = 2  # edited on disk after this process loaded it\n")
    cached = _compile(layer, x, {**options, "autotune": "cache-only"})  # a miss says so in its reason
    assert [d.reason for d in cached] == ["cache"] * len(cold), [(d.op, d.problem, d.reason) for d in cached]
