"""Memory a wide op's dead output leaves, written by its next output (``kernels/reused_outputs.py``):
reused once nothing refers to it, never while a tensor, a view, a storage or a numpy array does;
only from ``REUSE_FROM`` bytes on the CPU; at most ``SLOTS`` kept; private to the process.

``REUSE_FROM`` (32 MiB) is made 4 KiB here so that small tensors take the pooled path."""

from __future__ import annotations

import ctypes
import os

import pytest
import torch

from inductor_ext.kernels import panel_gemm_ops, reused_outputs

SMALL = 4096


@pytest.fixture(autouse=True)
def pooled_from_4k(monkeypatch):
    monkeypatch.setattr(reused_outputs, "REUSE_FROM", SMALL)
    reused_outputs.release()
    yield
    reused_outputs.release()


def _like(dtype=torch.float32):
    return torch.empty(0, dtype=dtype)


def test_a_dropped_outputs_memory_is_written_by_the_next_output_of_its_size():
    first = reused_outputs.empty(_like(), (32, 64))
    ptr = first.data_ptr()
    del first
    again = reused_outputs.empty(_like(), (64, 32))  # another shape of the same size
    assert again.data_ptr() == ptr and again.shape == (64, 32) and again.is_contiguous()
    other = reused_outputs.empty(_like(), (32, 65))  # another size: new memory
    assert other.data_ptr() != ptr


@pytest.mark.parametrize("holder", ["tensor", "view", "storage", "numpy", "tensor_on_its_storage"])
def test_memory_anything_still_refers_to_is_never_written(holder):
    out = reused_outputs.empty(_like(), (32, 64)).fill_(3.0)
    ptr = out.data_ptr()
    held = {"tensor": lambda: out, "view": lambda: out[:, -1], "storage": lambda: out.untyped_storage(),
            "numpy": lambda: out.numpy(), "tensor_on_its_storage": lambda: torch.empty(0).set_(out.untyped_storage())}[holder]()
    del out
    second = reused_outputs.empty(_like(), (32, 64))
    assert second.data_ptr() != ptr
    second.fill_(-1.0)
    seen = torch.frombuffer(bytearray(ctypes.string_at(ptr, 32 * 64 * 4)), dtype=torch.float32)
    assert torch.equal(seen, torch.full((32 * 64,), 3.0)), holder
    second_ptr = second.data_ptr()
    del held, second  # both mappings come back once their last holders die
    a, b = reused_outputs.empty(_like(), (32, 64)), reused_outputs.empty(_like(), (32, 64))
    assert {a.data_ptr(), b.data_ptr()} == {ptr, second_ptr}


def test_any_kept_mapping_of_the_size_serves_not_only_the_newest():
    a = reused_outputs.empty(_like(), (32, 64))
    b = reused_outputs.empty(_like(), (32, 65))
    ptr = a.data_ptr()
    del a, b  # kept: a's, then b's
    assert reused_outputs.empty(_like(), (32, 64)).data_ptr() == ptr


def test_below_reuse_from_and_off_the_cpu_outputs_are_new_empty_tensors():
    small = reused_outputs.empty(_like(), (SMALL // 4 - 1,))
    assert small.untyped_storage().resizable()  # an ordinary allocation
    del small
    assert not reused_outputs._unused
    meta = reused_outputs.empty(torch.empty(0, device="meta"), (64, 64))
    assert meta.device.type == "meta" and meta.shape == (64, 64)
    pooled = reused_outputs.empty(_like(), (SMALL // 4,))
    assert not pooled.untyped_storage().resizable()  # the size from which it pools


def test_the_dtype_is_the_likes_and_its_size_counts_in_bytes():
    out = reused_outputs.empty(_like(torch.bfloat16), (32, 64))
    assert out.dtype == torch.bfloat16 and out.untyped_storage().nbytes() == 32 * 64 * 2
    ptr = out.data_ptr()
    del out
    assert reused_outputs.empty(_like(torch.float32), (16, 64)).data_ptr() == ptr  # the same bytes


def test_at_most_slots_unused_mappings_are_kept_the_newest_and_release_frees_them():
    outs = [reused_outputs.empty(_like(), (32, 64 + i)) for i in range(reused_outputs.SLOTS + 1)]
    sizes = [o.untyped_storage().nbytes() for o in outs]
    while outs:  # dropped oldest first
        outs.pop(0)
    assert [len(b) for b in reused_outputs._unused] == sizes[1:]
    reused_outputs.release()
    assert not reused_outputs._unused


def test_an_output_made_under_inference_mode_is_reused_outside_it():
    with torch.inference_mode():
        out = reused_outputs.empty(_like(), (32, 64))
        assert out.is_inference()
        ptr = out.data_ptr()
        del out
    again = reused_outputs.empty(_like(), (32, 64))
    assert again.data_ptr() == ptr and not again.is_inference()
    again.add_(1)  # an ordinary tensor: in-place ops work


def test_a_forked_child_writing_a_reused_output_never_writes_the_parents():
    out = reused_outputs.empty(_like(), (32, 64)).fill_(3.0)
    pid = os.fork()
    if pid == 0:  # no torch in the child: a raw write over the output's bytes
        ctypes.memset(out.data_ptr(), 0xFF, 32 * 64 * 4)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and torch.equal(out, torch.full((32, 64), 3.0))


def test_a_panel_gemm_over_reused_memory_writes_every_element():
    x, w_t = torch.randn(16, 24), torch.randn(24, 300)
    stale = panel_gemm_ops.panel_mm(x, w_t)
    stale.fill_(float("nan"))
    ptr = stale.data_ptr()
    del stale
    got = panel_gemm_ops.panel_mm(x, w_t)
    assert got.data_ptr() == ptr
    torch.testing.assert_close(got, torch.mm(x, w_t), rtol=1e-6, atol=1e-6)
    bias = torch.randn(300)
    ptr = got.data_ptr()
    got.fill_(float("nan"))
    del got
    again = panel_gemm_ops.panel_addmm(bias, x, w_t)
    assert again.data_ptr() == ptr
    torch.testing.assert_close(again, torch.addmm(bias, x, w_t), rtol=1e-6, atol=1e-6)
