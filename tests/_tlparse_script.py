"""Compiles a linear + relu on the cpu preset, ext's C++ GEMM family forced, under the
TORCH_TRACE the caller set; prints whether the result matched eager."""

from __future__ import annotations

import json

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
x = torch.randn(4, 16)
with torch.no_grad():
    expected = model(x)
    got = torch.compile(model, backend="ext", options={"preset": "cpu", "force_template": "cpp.gemm"})(x)
print(json.dumps({"matches": bool(torch.allclose(got, expected, rtol=1e-5, atol=1e-5))}))
