"""Run by test_metal_block.py in a fresh process without TRITON_INTERPRET: a decoder block
(``inductor_ext/models/metal_block.py``: attention with an FP8 output projection, RMSNorm,
SwiGLU MLP, top-k MoE router with experts through torch._grouped_mm, LM head and a softmax over
the vocabulary) for four decode tokens,
compiled once with backend="ext", options={"preset": "mps", "interpret": True} on CPU tensors
and every Metal family forced, against eager; then a training step of the block without FP8.
Prints what happened as JSON."""

from __future__ import annotations

import copy
import json
import os
import sys

import torch
from torch._inductor.utils import run_and_get_code

from inductor_ext import dumps
from inductor_ext.lowering import decision_record
from inductor_ext.lowering.passes import base as pass_base
from inductor_ext.models.metal_block import DecoderBlock


METAL_FAMILIES = ["metal.scaled_mm", "metal.linear_gemv", "metal.grouped_mm", "metal.softmax"]


def options(dump_dir: str | None = None) -> dict:
    return {"preset": "mps", "interpret": True, "force_template": METAL_FAMILIES,
            **({"dump_dir": dump_dir} if dump_dir else {})}


def decisions_since(first: int) -> list[dict]:
    return [{"op": d.op, "node": d.node, "winner": d.winner, "reason": d.reason,
             "candidates": [c["name"] for c in d.candidates]} for d in decision_record.decisions[first:]]


def decode(dump_dir: str) -> dict:
    """bf16 inference with the FP8 projection: the decode step the Mac runs."""
    torch.manual_seed(0)
    model, x = DecoderBlock(torch.bfloat16, fp8=True).eval(), torch.randn(1, 4, 64, dtype=torch.bfloat16)
    reference = copy.deepcopy(model).float()  # the same weights in fp32: the truth
    reference.out_e4m3 = model.out_e4m3  # .float() widened the FP8 codes too
    first, passes = len(decision_record.decisions), len(pass_base.applied)
    with torch.no_grad():
        want, truth = model(x), reference(x.float())
        got, codes = run_and_get_code(torch.compile(model, backend="ext", options=options(dump_dir)), x)
    return {"err_vs_eager": (got - want).abs().max().item(), "err_vs_fp32": (got - truth).abs().max().item(),
            "eager_err_vs_fp32": (want - truth).abs().max().item(), "max_prob": want.max().item(),
            "decisions": decisions_since(first), "passes": pass_base.applied[passes:], "code": "\n".join(codes),
            "table": dumps.format_table(dumps.read_index(dump_dir))}


def train() -> dict:
    """An fp32 training step of the block without FP8 (_scaled_mm has no backward)."""
    torch.manual_seed(1)
    model, x = DecoderBlock(torch.float32, fp8=False), torch.randn(1, 4, 64)
    compiled_model = copy.deepcopy(model)
    weights = torch.linspace(-1, 1, 2048)  # a loss that weighs every probability differently
    first = len(decision_record.decisions)
    want = model(x)
    (want * weights).sum().backward()
    got = torch.compile(compiled_model, backend="ext", options=options())(x)
    (got * weights).sum().backward()
    grads = [(p.grad, q.grad) for p, q in zip(model.parameters(), compiled_model.parameters())]
    return {"forward_rel_err": ((got - want).abs().max() / want.abs().max()).item(),
            "grad_rel_err": max(((g - w).abs().max() / w.abs().max()).item() for w, g in grads),
            "grads": sum(g is not None for _, g in grads), "decisions": decisions_since(first)}


if __name__ == "__main__":
    assert "TRITON_INTERPRET" not in os.environ, "the test runs this without Triton's interpreter"
    print(json.dumps({"decode": decode(sys.argv[1]), "train": train()}))
