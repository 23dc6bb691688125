"""A standalone Triton consumer: the pointwise kernel after a PDL GEMM.

tests/test_pdl.py compiles this file's text for sm_90a / sm_100a (tier I) and runs it in the
interpreter after a GEMM (tier C); bench/gpu_nvfp4.py times the GEMM -> consumer chain with
and without PDL on a GPU. Only triton is imported, so it runs on older stacks too.
"""

import triton
import triton.language as tl


@triton.jit
def pdl_consumer_kernel(X, OUT, n, BLOCK: tl.constexpr, USE_PDL: tl.constexpr):
    # OUT = silu(X) + 1, elementwise over n values; X is the previous kernel's output. With
    # USE_PDL this kernel may start while that kernel's epilogue still writes X: compute the
    # offsets, then wait (griddepcontrol.wait returns once the previous grid finished and its
    # writes are visible), and only then load X.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    if USE_PDL:
        # the loads are issued: a kernel after this one may start its prologue
        tl.extra.cuda.gdc_launch_dependents()
    tl.store(OUT + offs, (x * tl.sigmoid(x) + 1.0).to(OUT.dtype.element_ty), mask=mask)
