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


class DryRun:
    """A family's ``call()`` on CPU tensors under COMPILE_ONLY: FlyDSL compiles the launcher with the
    very arguments ``call()`` passes (a wrong count or type fails here) and launches nothing."""

    def __init__(self, family, problem, config, target, tensors):
        self.family, self.args = family, (problem, config, target, *tensors)

    def __call__(self):
        self.out = self.family.call(*self.args)

    @property
    def _last_compiled(self):
        (launcher,) = [f for f in _launchers(self.family) if f._last_compiled is not None]
        return launcher._last_compiled


def _launchers(family):
    import gc

    return [o for o in gc.get_objects() if type(o).__name__ == "JitFunction"
            and getattr(o, "func", None) is not None and o.func.__module__ == family.__name__]


def dry_run_job(job):
    import importlib

    family = importlib.import_module(job["family"])
    problem = getattr(family, job["problem_cls"])(**job["problem"])
    config = getattr(family, job["config_cls"])(**job["config"])
    tensors = []
    for spec in job["tensors"]:
        shape, dtype, transpose = spec
        t = torch.zeros(shape, dtype=getattr(torch, dtype)) if dtype != "offs" else torch.tensor(shape, dtype=torch.int32)
        tensors.append(t.t() if transpose else t)
    return DryRun(family, problem, config, job["target"], tensors), ()
