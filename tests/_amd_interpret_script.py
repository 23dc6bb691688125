"""Run by test_amd_interpret.py in a subprocess (TRITON_INTERPRET=1 from the start): real
``backend="ext"`` compiles under the AMD presets in interpret mode, on CPU tensors.

- gfx1250: an ``nn.Linear`` (mm, x @ W.T) and a row-wise fp8 ``torch._scaled_mm`` with a bias,
  served by ``triton.tdm_gemm`` (forced): Inductor renders the family's one template for both ops
  and Triton's interpreter runs it;
- gfx950: ``nn.RMSNorm`` under ``torch.no_grad``: the ``rms_norm_op`` pass keeps it one op and
  ``helion.rmsnorm`` (forced) serves it through Helion's Triton backend in the interpreter;
- gfx950: an MoE router's ``torch.topk`` (bf16 logits, 64 experts): the ``topk_op`` pass makes it
  ``inductor_ext::topk_indices`` + a gather, ``triton.topk`` (forced) serves the indices in the
  interpreter.

Prints one JSON object: per case the result's error against the plain-torch reference, the
decisions ext took, and whether the generated code calls the family's kernel.
"""

import json

import torch
from torch._inductor.utils import run_and_get_code

from inductor_ext.kernels.norms import rms_norm_reference
from inductor_ext.kernels.scaled_gemm import scaled_mm_reference
from inductor_ext.kernels.topk import topk_reference
from inductor_ext.lowering import decision_record


def _compile(fn, args, preset: str, family: str):
    # only the family under test beside ATen: each choice is benchmarked in the interpreter
    options = {"preset": preset, "interpret": True, "templates": [family], "force_template": family,
               "inductor": {"fx_graph_cache": False}}
    first = len(decision_record.decisions)
    torch._dynamo.reset()
    with torch.no_grad():
        got, codes = run_and_get_code(torch.compile(fn, backend="ext", options=options), *args)
    decisions = [{"op": d.op, "winner": d.winner, "reason": d.reason,
                  "families": sorted({c["family"] for c in d.candidates})} for d in decision_record.decisions[first:]]
    return got, "\n".join(codes), decisions


def _case(fn, args, want, preset: str, family: str) -> dict:
    got, code, decisions = _compile(fn, args, preset, family)
    return {"max_err": (got.float() - want.float()).abs().max().item(), "max_ref": want.float().abs().max().item(),
            "dtype": str(got.dtype), "decisions": decisions, "code": code}


def main() -> dict:
    gen = torch.Generator().manual_seed(0)
    out = {}

    linear = torch.nn.Linear(256, 72, bias=False).to(torch.bfloat16)
    x = torch.randn(33, 256, generator=gen).to(torch.bfloat16)
    with torch.no_grad():
        out["gfx1250_linear"] = _case(linear, (x,), linear(x), "gfx1250", "triton.tdm_gemm")

    a = (torch.randn(33, 256, generator=gen) * 4).to(torch.float8_e4m3fn)
    w = (torch.randn(72, 256, generator=gen) * 4).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(33, 1, generator=gen) + 0.5, torch.rand(1, 72, generator=gen) + 0.5
    bias = torch.randn(72, generator=gen).to(torch.bfloat16)

    def scaled(a, w, sa, sb, bias):
        return torch._scaled_mm(a, w.t(), sa, sb, bias, out_dtype=torch.bfloat16)

    want = scaled_mm_reference(a, w, alpha=sa * sb, bias=bias, out_dtype=torch.bfloat16)
    out["gfx1250_scaled_mm"] = _case(scaled, (a, w, sa, sb, bias), want, "gfx1250", "triton.tdm_gemm")

    norm = torch.nn.RMSNorm(1000, eps=1e-5).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(1000, generator=gen))
    h = torch.randn(2, 3, 1000, generator=gen).to(torch.bfloat16)
    out["gfx950_rms_norm"] = _case(norm, (h,), rms_norm_reference(h, norm.weight, 1e-5), "gfx950", "helion.rmsnorm")

    def route(logits):
        weights, experts = torch.topk(logits, 6)
        return weights, experts

    logits = torch.randn(4, 6, 64, generator=gen).to(torch.bfloat16)
    (values, indices), code, decisions = _compile(route, (logits,), "gfx950", "triton.topk")
    want_values, want_indices = topk_reference(logits, 6)
    out["gfx950_topk"] = {"values_equal": torch.equal(values, want_values),
                          "indices_equal": torch.equal(indices, want_indices), "dtypes": [str(values.dtype), str(indices.dtype)],
                          "decisions": decisions, "code": code}
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
