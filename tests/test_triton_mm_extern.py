"""``triton.mm_extern``: a second ``mm`` family, found and offered with no edit elsewhere."""

from __future__ import annotations

import torch

from inductor_ext.lowering import ext_choices
from inductor_ext.templates import registry
from inductor_ext.templates.triton import mm_extern


def test_it_is_offered_for_mm_on_hopper_and_matches_eager(interpreter, tmp_path) -> None:
    assert registry.get(mm_extern.NAME).choice_kind == "extern"
    torch._dynamo.reset()
    a, b = torch.randn(64, 48), torch.randn(48, 40)
    options = {"preset": "hopper", "interpret": True, "templates": ["triton.gemm", mm_extern.NAME],
               "force_template": mm_extern.NAME, "autotune_cache": str(tmp_path / "c.db"),
               "inductor": {"fx_graph_cache": False}}
    first = len(ext_choices.decisions)
    got = torch.compile(torch.mm, backend="ext", options=options)(a, b)
    torch.testing.assert_close(got, a @ b, rtol=1e-4, atol=1e-4)
    (decision,) = [d for d in ext_choices.decisions[first:] if d.op == "mm"]
    assert decision.reason == f"force_template={mm_extern.NAME}", decision.reason
