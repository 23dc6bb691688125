"""Run by test_tf32_precision.py in a process started with TRITON_INTERPRET=1.

Compiles a small fp32 MLP (inference) with backend="ext" in interpret mode of the hopper preset,
triton.gemm forced, twice: under PyTorch's default fp32 matmul precision ("highest") and under
``torch.set_float32_matmul_precision("high")``. Prints, per compile,
the error against eager (computed once, at full fp32), the input precision of every generated
template kernel, and the decisions' problems and autotune keys.
"""

import json
import re
import sys
from pathlib import Path

import torch

from inductor_ext.lowering import decision_record


class MLP(torch.nn.Module):
    # K=70 is no multiple of any BLOCK_K, so the masked K tail runs too.
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(70, 48)
        self.down = torch.nn.Linear(48, 40, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def run(model: torch.nn.Module, x: torch.Tensor, want: torch.Tensor, precision: str, dump: Path) -> dict:
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    options = {"preset": "hopper", "interpret": True, "autotune": "quick", "force_template": "triton.gemm",
               "dump_dir": str(dump)}
    torch.set_float32_matmul_precision(precision)
    try:
        with torch.no_grad():
            got = torch.compile(model, backend="ext", options=options)(x)
    finally:
        torch.set_float32_matmul_precision("highest")
    sources = "".join(p.read_text() for p in dump.rglob("*.py"))
    decisions = decision_record.decisions[first:]
    return {
        "max_rel_err": ((got - want).abs().max() / want.abs().max()).item(),
        "input_precisions": sorted(set(re.findall(r"INPUT_PRECISION : tl.constexpr = '(\w+)'", sources))),
        "problems": [d.problem for d in decisions],
        "winners": [d.winner for d in decisions],
        "keys": [None if d.key is None else {"fp32_precision": d.key.fp32_precision, "digest": d.key.digest(),
                                             "describe": d.key.describe()} for d in decisions],
    }


if __name__ == "__main__":
    out = Path(sys.argv[1])
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(37, 70)
    with torch.no_grad():
        want = model(x)  # eager at PyTorch's default: full fp32
    results = {"default": run(model, x, want, "highest", out / "default"),
               "high": run(model, x, want, "high", out / "high")}
    print(json.dumps(results))
