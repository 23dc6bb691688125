"""Tiny FlyDSL kernels for tests/test_flydsl_runtime.py (imported by the compile subprocess,
which finds this folder through PYTHONPATH)."""

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch


def _elementwise(body):
    @flyc.kernel
    def probe(X: fx.Tensor, Y: fx.Tensor, N: fx.Int32):
        tid = fx.thread_idx.x + fx.block_idx.x * 64
        rs_x = fx.rocdl.get_buffer_rsrc(fx.rocdl.make_buffer_ptr(fx.get_iter(X), fx.Int64(N * 4)))
        rs_y = fx.rocdl.get_buffer_rsrc(fx.rocdl.make_buffer_ptr(fx.get_iter(Y), fx.Int64(N * 4)))
        x = fx.Float32(fx.rocdl.raw_ptr_buffer_load(fx.T.f32, rs_x, tid * 4, fx.Int32(0), 0))
        from flydsl._mlir.dialects import rocdl

        rocdl.raw_ptr_buffer_store(fx.Float32(body(x)).ir_value(), rs_y, (tid * 4).ir_value(), fx.Int32(0).ir_value())

    @flyc.jit
    def launch(X: fx.Tensor, Y: fx.Tensor, N: fx.Int32, stream: fx.Stream = fx.Stream(None)):
        probe(X, Y, N).launch(grid=((N + 63) // 64, 1, 1), block=(64, 1, 1), stream=stream)

    return launch, (torch.zeros(64), torch.zeros(64), 64)


def scale_job(job):
    return _elementwise(lambda x: x * 2.0 + 1.0)


def tanh_job(job):
    # fx.math.tanh lowers to a libcall LLVM has no AMDGPU implementation for: FlyDSL still
    # writes a code object and only stderr says "no libcall available for ftanh".
    return _elementwise(lambda x: fx.math.tanh(x))


def broken_job(job):
    raise ValueError("this builder fails on purpose")
