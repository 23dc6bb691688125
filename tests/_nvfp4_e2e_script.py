"""Run by test_nvfp4_e2e.py with TRITON_INTERPRET=1: a ModelOpt-style NVFP4 linear stack
compiled with backend="ext" in interpret mode, against the same model run eagerly with a
reference _scaled_mm (fp4 _scaled_mm cannot run on CPU)."""

import copy
import json

import torch
import torch.nn.functional as F

from inductor_ext.kernels import nvfp4, nvfp4_ops
from inductor_ext.lowering import decision_record
from inductor_ext.lowering.passes import base as pass_base

FP4 = torch.float4_e2m1fn_x2


class NvFp4Linear(torch.nn.Module):
    """Weights stored as NVFP4; activations quantized on the fly; alpha, bias, act after the GEMM."""

    def __init__(self, k: int, n: int, act, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        w = nvfp4.quantize_nvfp4(torch.randn(n, k) / k**0.5)
        self.register_buffer("w", w.qdata.view(FP4))
        self.register_buffer("w_scale", nvfp4.to_blocked(w.scales))
        self.register_buffer("w_global", w.global_scale)
        self.bias = torch.nn.Parameter(torch.randn(n, dtype=torch.bfloat16) / 4)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = nvfp4.quantize_nvfp4(x, check=False)
        y = torch._scaled_mm(q.qdata.view(FP4), self.w.t(), nvfp4.to_blocked(q.scales), self.w_scale,
                             out_dtype=torch.bfloat16)
        return self.act(y * (q.global_scale * self.w_global).to(torch.bfloat16) + self.bias)


def stack() -> torch.nn.Module:
    return torch.nn.Sequential(NvFp4Linear(64, 96, torch.relu, 0), NvFp4Linear(96, 48, F.silu, 1),
                               NvFp4Linear(48, 32, F.gelu, 2))


def reference_scaled_mm(a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    one = torch.tensor(1.0)
    return nvfp4_ops.reference(a, b, scale_a, scale_b, one, None, "none", out_dtype, torch.float32)


PRESET_OF = {"triton.nvfp4_gemm": "blackwell", "triton.nvfp4_dequant_gemm": "hopper"}


def main(family: str | None) -> dict:
    torch.manual_seed(3)
    model, x = stack(), torch.randn(8, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        real = torch._scaled_mm
        torch._scaled_mm = reference_scaled_mm  # the eager reference: the model as written
        try:
            want = model(x)
            first_want = model[0](x)
        finally:
            torch._scaled_mm = real
        # Interpret mode of the preset whose target the family claims: its device's kernels on CPU tensors.
        options = {"preset": PRESET_OF.get(family, "hopper"), "interpret": True, "autotune": "quick" if family else "off",
                   "inductor": {"fx_graph_cache": False}}
        if family:
            options["force_template"] = family
        first = len(decision_record.decisions)
        got = torch.compile(copy.deepcopy(model), backend="ext", options=options)(x)
        first_got = torch.compile(copy.deepcopy(model[0]), backend="ext", options=options)(x)
    return {
        "out": got.float().tolist(),
        "max_err": (got.float() - want.float()).abs().max().item(),
        "max_ref": want.float().abs().max().item(),
        "first_layer_close": bool(torch.allclose(first_got.float(), first_want.float(), rtol=2**-7, atol=1e-2)),
        "first_layer_err": (first_got.float() - first_want.float()).abs().max().item(),
        "passes": [p for p in pass_base.applied],
        "decisions": [{"op": d.op, "winner": d.winner, "reason": d.reason} for d in decision_record.decisions[first:]],
    }


if __name__ == "__main__":
    print(json.dumps({fam or "aten": main(fam) for fam in
                      ("triton.nvfp4_gemm", "triton.nvfp4_dequant_gemm", None)}))
