"""``inductor_ext::mkl_packed_mm``: MKL's packed sgemm with the weight packed once and kept only
while it is the same weight (kernels/mkl_packed_ops.py). The lowering side (offered as an ATen
choice for frozen fp32 weights, served from the cache) is tested in test_cpp_gemm.py."""

from __future__ import annotations

import gc

import pytest
import torch

from inductor_ext.kernels import mkl_packed_ops

pytestmark = pytest.mark.skipif(not mkl_packed_ops.available(), reason="this torch build has no MKL (non-x86 build)")

OP = torch.ops.inductor_ext.mkl_packed_mm


def _weight(n, k, seed=0):
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("m, k, n", [(1, 288, 768), (1, 70, 45), (5, 37, 129), (8, 64, 1000)])
def test_matches_mm(m, k, n):
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(1))
    w = _weight(n, k)
    got = OP(x, w.t())
    assert got.shape == (m, n) and got.dtype == torch.float32
    # fp32 accumulation in another order: far tighter than a bf16 or tf32 mistake would be
    torch.testing.assert_close(got, x @ w.t(), rtol=1e-5, atol=1e-5)


def test_non_contiguous_activation():
    x = torch.randn(4, 96)[:, ::3]  # (4, 32), row stride 96
    w = _weight(16, 32)
    torch.testing.assert_close(OP(x, w.t()), x @ w.t(), rtol=1e-5, atol=1e-5)


def test_weight_packed_once_per_batch_and_dropped_with_the_weight():
    gc.collect()
    before = len(mkl_packed_ops._packed)
    w, x = _weight(24, 40), torch.randn(3, 40)
    storage = w.untyped_storage()
    OP(x, w.t())
    OP(x, w.t())  # a new view of the same weight: the packed copy is reused
    assert len(mkl_packed_ops._packed[storage]) == 1
    OP(x[:1], w.t())  # MKL packs for a batch size
    assert len(mkl_packed_ops._packed[storage]) == 2
    assert len(mkl_packed_ops._packed) == before + 1
    del w, storage
    gc.collect()
    assert len(mkl_packed_ops._packed) == before  # no packed copy outlives its weight


def test_an_in_place_write_repacks():
    w, x = _weight(24, 40), torch.randn(2, 40)
    OP(x, w.t())
    w.mul_(-2)  # an optimizer step, a load_state_dict: the version counter moves
    torch.testing.assert_close(OP(x, w.t()), x @ w.t(), rtol=1e-5, atol=1e-5)
    assert len(mkl_packed_ops._packed[w.untyped_storage()]) == 1  # the stale copy went


def test_inference_tensor_weight_is_never_cached():
    with torch.inference_mode():
        w = _weight(8, 16)
    x = torch.randn(2, 16)
    torch.testing.assert_close(OP(x, w.t()), x @ w.t(), rtol=1e-5, atol=1e-5)
    assert w.untyped_storage() not in mkl_packed_ops._packed


def test_other_dtypes_are_plain_mm():
    x, w = torch.randn(2, 16, dtype=torch.bfloat16), _weight(8, 16).bfloat16()
    assert torch.equal(OP(x, w.t()), x @ w.t())
