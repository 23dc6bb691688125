"""Run by test_cutedsl_lowering.py in a subprocess: an NVFP4 Linear compiled with backend="ext"
whose GEMM is served by the CuTeDSL choice, on CPU.

quack's kernel needs an sm_100 GPU, so this process stands in for one: the choice is allowed on
CPU, and the op's CPU kernel runs ``launch`` with quack's entry point replaced by its contract in
plain torch. What is checked is ext's side: Inductor benchmarks the choice, the generated
wrapper calls the op with the winning config, and the numbers are the reference's.
"""

import dataclasses
import json

import torch
from torch._inductor.utils import run_and_get_code

from inductor_ext.lowering import cutedsl_nvfp4, decision_record
from inductor_ext.templates import registry
from inductor_ext.templates.cutedsl import nvfp4_gemm as template
from test_cutedsl_lowering import _fake_launch_quack
from _nvfp4_e2e_script import NvFp4Linear, reference_scaled_mm

template.DEVICE_TYPES = ("cuda", "cpu")
# this process's CPU kernel of the op (below) stands in for the GPU
template.FAMILY = dataclasses.replace(template.FAMILY, runs_on_cpu=True)
_fake_launch_quack.calls = []
template._launch_quack = _fake_launch_quack
registry._scan.cache_clear()  # the registry reads each family's record once: read the stand-in


@torch.library.impl("inductor_ext::nvfp4_gemm_cutedsl", "CPU")
def _cpu(a, b, scale_a, scale_b, alpha, bias, tile_m, tile_n, cluster_m, cluster_n, dynamic_persistent,
         use_pdl=False):
    config = template.NvFp4GemmConfig(tile_m, tile_n, cluster_m, cluster_n, dynamic_persistent)
    return cutedsl_nvfp4.launch(a, b, scale_a, scale_b, alpha, bias, config, use_pdl=use_pdl)


def main() -> dict:
    layer = NvFp4Linear(64, 96, lambda y: y, 0)
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    options = {"preset": "blackwell", "interpret": True, "templates": ["cutedsl.nvfp4_gemm"], "passes": ["nvfp4_alpha_fold"],
               "autotune": "quick", "force_template": "cutedsl.nvfp4_gemm", "inductor": {"fx_graph_cache": False}}
    with torch.no_grad():
        real = torch._scaled_mm
        torch._scaled_mm = reference_scaled_mm
        try:
            want = layer(x)
        finally:
            torch._scaled_mm = real
        first = len(decision_record.decisions)
        got, codes = run_and_get_code(torch.compile(layer, backend="ext", options=options), x)
    return {
        "max_err": (got.float() - want.float()).abs().max().item(),
        "max_ref": want.float().abs().max().item(),
        "code": "\n".join(codes),
        "decisions": [{"op": d.op, "winner": d.winner, "reason": d.reason,
                       "candidates": [c["name"] for c in d.candidates]} for d in decision_record.decisions[first:]],
        "quack_calls": len(_fake_launch_quack.calls),
        "quack_use_pdl": sorted({c["use_pdl"] for c in _fake_launch_quack.calls}),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
