"""The frozen weights' values in the cache keys (lowering/frozen_weights_key.py); the end-to-end
case (a cached graph never serves another model's packed weights) is in test_cpp_gemm.py."""

from __future__ import annotations

import logging

import torch

from inductor_ext.lowering import frozen_weights_key
from inductor_ext.lowering.frozen_weights_key import current_digest, frozen_weights, weights_digest


def test_the_digest_follows_every_byte_the_dtype_and_the_shape():
    w = torch.randn(64, 33)
    base = weights_digest([w, torch.ones(3)])
    assert weights_digest([w.clone(), torch.ones(3)]) == base
    changed = w.clone()
    changed.view(-1)[-1] += 1  # the last element: no sampling
    assert weights_digest([changed, torch.ones(3)]) != base
    assert weights_digest([w.view(torch.int32), torch.ones(3)]) != base  # same bytes, another dtype
    assert weights_digest([w.reshape(33, 64), torch.ones(3)]) != base  # same bytes, another shape
    assert weights_digest([torch.ones(3), w]) != base  # another order


def test_a_non_contiguous_weight_is_hashed_by_its_values():
    w = torch.randn(8, 16)
    assert weights_digest([w.t()]) == weights_digest([w.t().contiguous()])
    assert weights_digest([w.t()]) != weights_digest([w])


def test_empty_and_bf16_weights_have_digests():
    a = weights_digest([torch.empty(0, 4), torch.randn(5, dtype=torch.bfloat16)])
    assert a != weights_digest([torch.empty(0, 4), torch.randn(5, dtype=torch.bfloat16)])


def test_the_digest_is_computed_once_and_only_when_a_key_asks(monkeypatch):
    calls = []
    monkeypatch.setattr(frozen_weights_key, "weights_digest", lambda t: calls.append(len(t)) or "d")
    assert current_digest() is None
    with frozen_weights([torch.ones(2)]):
        assert calls == []
        assert current_digest() == current_digest() == "d"
    assert calls == [1] and current_digest() is None


def test_an_unreadable_weight_turns_both_caches_off(caplog):
    class Marked(torch.Tensor):
        pass

    weight = torch.ones(4).as_subclass(Marked)
    with torch._inductor.config.patch(fx_graph_cache=True), torch._functorch.config.patch(enable_autograd_cache=True):
        with caplog.at_level(logging.INFO, logger="inductor_ext"), frozen_weights([torch.ones(2), weight]):
            assert not torch._inductor.config.fx_graph_cache and not torch._functorch.config.enable_autograd_cache
            assert current_digest() is None
        assert torch._inductor.config.fx_graph_cache and torch._functorch.config.enable_autograd_cache
    assert [r.getMessage() for r in caplog.records if "cache key" in r.getMessage()] == [
        "ext: a frozen weight of this graph is a Marked, whose values ext cannot put in a cache key: Inductor's FX "
        "graph and AOTAutograd caches are off for this compile"]
