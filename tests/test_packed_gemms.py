"""The ATen-side packed GEMMs, each with the weight packed once and kept only while it is the
same weight (kernels/packed_weights.py): ``inductor_ext::mkl_packed_mm`` (MKL's packed sgemm,
fp32) and ``inductor_ext::mkldnn_packed_mm`` (oneDNN's linear, bf16), and their ``*_packed_addmm``
(a linear with its bias, which the library adds). The lowering side (offered
as ATen choices for frozen weights, served from the cache) is tested in test_cpp_gemm.py."""

from __future__ import annotations

import gc
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
import torch

from inductor_ext.kernels import mkl_packed_ops, mkldnn_packed_ops


@dataclass(frozen=True)
class Packed:
    ops: ModuleType
    op: Any
    dtype: torch.dtype
    tol: float  # relative and absolute, against an fp32 reference
    why_not: str  # the skip reason where ops.available() is False
    addmm: Any = None  # the op with a bias


PACKED = {
    # fp32 accumulation in another order: far tighter than a bf16 or tf32 mistake would be
    "mkl": Packed(mkl_packed_ops, torch.ops.inductor_ext.mkl_packed_mm, torch.float32, 1e-5,
                  "this torch build has no MKL (non-x86 build)", torch.ops.inductor_ext.mkl_packed_addmm),
    # bf16 out, fp32 accumulation: within bf16 rounding (an fp16 or fp32 result would not be bf16)
    "mkldnn": Packed(mkldnn_packed_ops, torch.ops.inductor_ext.mkldnn_packed_mm, torch.bfloat16, 2**-7,
                     "oneDNN has no bf16 GEMM on this CPU (needs AVX-512 or AMX bf16)",
                     torch.ops.inductor_ext.mkldnn_packed_addmm),
}


@pytest.fixture(params=list(PACKED))
def packed(request) -> Packed:
    p = PACKED[request.param]
    if not p.ops.available():
        pytest.skip(p.why_not)
    return p


def _weight(n, k, dtype, seed=0):
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _assert_matches(p: Packed, got, x, w_t):
    assert got.dtype == p.dtype
    torch.testing.assert_close(got.float(), x.float() @ w_t.float(), rtol=p.tol, atol=p.tol)


@pytest.mark.parametrize("m, k, n", [(1, 288, 768), (1, 70, 45), (5, 37, 129), (8, 64, 1000)])
def test_matches_mm(packed, m, k, n):
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(1)).to(packed.dtype)
    w = _weight(n, k, packed.dtype)
    got = packed.op(x, w.t())
    assert got.shape == (m, n)
    _assert_matches(packed, got, x, w.t())


@pytest.mark.parametrize("m, k, n", [(1, 288, 768), (5, 37, 129), (16, 64, 1000)])
@pytest.mark.parametrize("bias_shape", ["row", "expanded", "one_row"])
def test_addmm_adds_a_linears_bias(packed, m, k, n, bias_shape):
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(1)).to(packed.dtype)
    w = _weight(n, k, packed.dtype)
    b = torch.randn(n, generator=torch.Generator().manual_seed(2)).to(packed.dtype)
    bias = {"row": b, "expanded": b.expand(m, n), "one_row": b[None]}[bias_shape]  # as addmm's lowering hands it
    got = packed.addmm(bias, x, w.t())
    assert got.shape == (m, n) and got.dtype == packed.dtype
    torch.testing.assert_close(got.float(), b.float() + x.float() @ w.t().float(), rtol=packed.tol, atol=packed.tol)
    assert w.untyped_storage() in packed.ops._packed  # the library served it, not ATen's addmm


def test_addmm_with_a_full_bias_matrix_is_atens(packed):
    """The packed linears add one row to every row; any other addmm input is ATen's addmm."""
    x, w = torch.randn(3, 16).to(packed.dtype), _weight(8, 16, packed.dtype)
    full = torch.randn(3, 8).to(packed.dtype)
    assert torch.equal(packed.addmm(full, x, w.t()), torch.addmm(full, x, w.t()))
    assert w.untyped_storage() not in packed.ops._packed


def test_non_contiguous_activation(packed):
    x = torch.randn(4, 96).to(packed.dtype)[:, ::3]  # (4, 32), row stride 96
    w = _weight(16, 32, packed.dtype)
    _assert_matches(packed, packed.op(x, w.t()), x, w.t())


def test_weight_packed_once_per_batch_and_dropped_with_the_weight(packed):
    cache = packed.ops._packed
    gc.collect()
    before = len(cache)
    w, x = _weight(24, 40, packed.dtype), torch.randn(3, 40).to(packed.dtype)
    storage = w.untyped_storage()
    packed.op(x, w.t())
    packed.op(x, w.t())  # a new view of the same weight: the packed copy is reused
    assert len(cache[storage]) == 1
    packed.op(x[:1], w.t())  # packed for a batch size
    assert len(cache[storage]) == 2
    assert len(cache) == before + 1
    del w, storage
    gc.collect()
    assert len(cache) == before  # no packed copy outlives its weight


def test_an_in_place_write_repacks(packed):
    w, x = _weight(24, 40, packed.dtype), torch.randn(2, 40).to(packed.dtype)
    packed.op(x, w.t())
    w.mul_(-2)  # an optimizer step, a load_state_dict: the version counter moves
    _assert_matches(packed, packed.op(x, w.t()), x, w.t())
    assert len(packed.ops._packed[w.untyped_storage()]) == 1  # the stale copy went


def test_inference_tensor_weight_is_never_cached(packed):
    with torch.inference_mode():
        w = _weight(8, 16, packed.dtype)
    x = torch.randn(2, 16).to(packed.dtype)
    _assert_matches(packed, packed.op(x, w.t()), x, w.t())
    assert w.untyped_storage() not in packed.ops._packed


@pytest.mark.parametrize("name, other", [("mkl", torch.bfloat16), ("mkldnn", torch.float32)])
def test_other_dtypes_are_plain_mm(name, other):
    x, w = torch.randn(2, 16, dtype=other), _weight(8, 16, other)
    assert torch.equal(PACKED[name].op(x, w.t()), x @ w.t())


@pytest.mark.parametrize("library, kernels", [("MKL", mkl_packed_ops), ("oneDNN", mkldnn_packed_ops)])
def test_autotuning_times_the_packed_gemm_without_the_ops_dispatch(library, kernels):
    """Where a packed GEMM wins, the graph calls the library on a weight packed at compile time
    (no op of ours): the timed callable is the op's body, not the op."""
    from inductor_ext.lowering import aten_choices

    served = {g.op: g for g in aten_choices.PACKED_GEMMS if g.library == library}
    assert served["mm"].choice.to_callable() is kernels.packed_mm
    assert served["addmm"].choice.to_callable() is kernels.packed_addmm
    assert all(g.choice.kernel_creator is not None for g in served.values())


def test_only_inductors_failure_to_pickle_ext_opaque_constants_is_quietened():
    """The filter drops Inductor's 'unable to serialize' warning only for a graph ext gave an opaque
    oneDNN constant, and only for that error: any other failure to save stays Inductor's warning."""
    import logging
    import sys

    from inductor_ext.lowering import opaque_constants

    def record(error: BaseException) -> logging.LogRecord:
        try:
            raise error
        except BaseException:
            info = sys.exc_info()
        return logging.LogRecord(opaque_constants.INDUCTOR_CACHE_LOGGER, logging.WARNING, __file__, 1,
                                 opaque_constants.UNSERIALIZABLE, None, info)

    opaque = NotImplementedError("Cannot access storage of OpaqueTensorImpl")
    quiet = opaque_constants._FILTER.filter
    opaque_constants._pending.count = 0
    assert quiet(record(opaque))  # no opaque constant added by ext: Inductor's warning stands
    opaque_constants.added()
    assert quiet(record(TypeError("cannot pickle '_thread.lock' object")))  # another failure: stands
    assert not quiet(record(opaque))  # ext's constant: one ext log line instead
    assert quiet(record(opaque))  # once: the next graph's failure is its own
    assert opaque_constants._FILTER in logging.getLogger(opaque_constants.INDUCTOR_CACHE_LOGGER).filters
