"""The frozen weights' values in the cache keys (lowering/frozen_weights_key.py); the end-to-end
case (a cached graph never serves another model's packed weights) is in test_cpp_gemm.py."""

from __future__ import annotations

import logging
import types

import torch

from inductor_ext.lowering import frozen_params, frozen_weights_key
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


class _Placed:
    """A stand-in weight on ``device`` (no GPU here): ``.cpu()`` gives ``host``, and fails where
    the weight is on the host already (read in place, never copied); its bytes are read only on
    the host."""

    def __init__(self, host: torch.Tensor, device: str) -> None:
        self.host, self.shape, self.device = host, host.shape, types.SimpleNamespace(type=device)

    def detach(self):
        return self

    def cpu(self):
        assert self.device.type != "cpu", "a host weight is copied to be hashed"
        return self.host

    def contiguous(self):
        assert self.device.type == "cpu", "a device weight's bytes read without a host copy"
        return self.host.contiguous()


def test_a_device_weight_is_hashed_by_its_host_copy_and_a_host_weight_in_place():
    w = torch.randn(6, 5)
    host = frozen_weights_key._tensor_digest(w)
    assert frozen_weights_key._tensor_digest(_Placed(w, "cuda")) == host
    assert frozen_weights_key._tensor_digest(_Placed(w, "cpu")) == host


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


# ---------------------------------------------------------------- which compiles carry the digest


def _static(t):
    torch._dynamo.mark_static_address(t, guard=False)
    return t


def _digests(gm, inputs):
    """What each compile compile_frozen makes sees as the key's digest, (freeze, digest)."""
    seen = []

    def compile(g, compile_inputs, freeze):
        seen.append((freeze, current_digest()))
        return g

    run = frozen_params.compile_frozen(gm, inputs, compile)
    return seen, run


def _matmul():
    return torch.fx.symbolic_trace(lambda x, w: x @ w)


def test_a_frozen_compile_keys_on_its_weights_values_and_not_its_activations():
    w = _static(torch.randn(3, 4))
    (first,), _ = _digests(_matmul(), [torch.randn(2, 3), w])
    (again,), _ = _digests(_matmul(), [torch.randn(2, 3), _static(w.clone())])  # other activations
    (other,), _ = _digests(_matmul(), [torch.randn(2, 3), _static(w + 1)])
    assert first[0] and first[1] == weights_digest([w])
    assert again == first and other[1] != first[1]


def test_the_thawed_compile_has_no_digest(capfd):
    x, w = torch.randn(2, 3), _static(torch.randn(3, 4))
    seen, run = _digests(_matmul(), [x, w])
    w.mul_(2)  # a weight changed: recompiled without freezing
    run(x, w)
    assert [freeze for freeze, _ in seen] == [True, False] and seen[1][1] is None


def test_graph_attributes_frozen_by_the_users_own_freezing_are_in_the_digest():
    class Net(torch.nn.Module):
        def __init__(self, w):
            super().__init__()
            self.w = torch.nn.Parameter(w)

        def forward(self, x):
            return x @ self.w

    w = torch.randn(3, 4)
    (frozen,), _ = _digests(torch.fx.symbolic_trace(Net(w)), [torch.randn(2, 3)])
    (other,), _ = _digests(torch.fx.symbolic_trace(Net(w + 1)), [torch.randn(2, 3)])
    assert frozen == (True, weights_digest([w])) and other[1] != frozen[1]


def test_nested_inputs_put_every_tensor_in_the_digest():
    gm = torch.fx.symbolic_trace(lambda xs: xs[0] @ xs[1])
    x, w = torch.randn(2, 3), torch.randn(3, 4)
    (seen,), _ = _digests(gm, [[x, w]])
    assert seen == (True, weights_digest([x, w]))
