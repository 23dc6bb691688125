"""Conformance builder for ``layer_norm`` (``inductor_ext::layer_norm``, what the ``layer_norm_op``
pass makes of ``F.layer_norm``): rows of the case's layout; weight and bias both given, or
neither (variant), so both the affine and the plain kernel are drawn; fp64 too, which the Triton
family refuses (ATen serves it)."""

from __future__ import annotations

import torch

from _conformance_kit import Built, Case, last_dim_input, spec
from inductor_ext.kernels import layer_norm_ops  # noqa: F401 - registers inductor_ext::layer_norm

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def build(case: Case, freezing: bool) -> Built:
    x = last_dim_input(case, case.n)
    affine = case.variant % 2 == 0
    w = torch.randn(case.n).to(case.dtype) if affine else None
    b = torch.randn(case.n).to(case.dtype) if affine and case.bias else None
    want = torch.nn.functional.layer_norm(x, [case.n], w, b, 1e-5)
    return Built(torch.ops.inductor_ext.layer_norm, (x, w, b, [case.n], 1e-5), want, spec(
        "layer_norm", (x, w, b), want, {"normalized_shape": [case.n], "eps": 1e-5}))
