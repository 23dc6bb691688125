"""Run by test_pdl.py with TRITON_INTERPRET=1: which of Inductor's kernels wait on ext's PDL
producer, in the code a real compile generates.

``softmax(x @ w)`` with M=16 (a decode shape: ``pdl="auto"`` turns on USE_PDL) and ext's GEMM
template forced. Inductor emits PDL only for CUDA devices of sm_90+, so the device check of
``TritonKernel._enable_pdl_codegen`` is answered as on a Hopper GPU; everything else in it
(Inductor's selective rule and ext's producer predicate) runs as written. The generated
kernels then run in the interpreter, where the gdc calls are no-ops.
"""

import json
from unittest import mock

import torch
from torch._inductor.codegen.triton import TritonKernel
from torch._inductor.graph import GraphLowering
from torch._inductor.utils import run_and_get_code

from inductor_ext.lowering import decision_record

_real_enable_pdl_codegen = TritonKernel._enable_pdl_codegen


def _as_if_on_hopper() -> bool:
    with mock.patch.object(GraphLowering, "get_current_device_or_throw", lambda self: torch.device("cuda")), \
            mock.patch("torch.cuda.get_device_capability", return_value=(9, 0)):
        return _real_enable_pdl_codegen()


TritonKernel._enable_pdl_codegen = staticmethod(_as_if_on_hopper)


def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x @ w, dim=-1)


def kernels(code: str) -> dict[str, str]:
    """Generated Triton kernels by name: their source, with their triton_meta."""
    out = {}
    for chunk in code.split("async_compile.triton('")[1:]:
        name, body = chunk.split("'", 1)
        out[name] = body.split("''', device_str=")[0]
    return out


def main() -> dict:
    x, w = torch.randn(16, 64), torch.randn(64, 48)
    want = f(x, w)
    result = {}
    for pdl in ("auto", "off"):
        torch._dynamo.reset()
        options = {"preset": "hopper", "interpret": True, "pdl": pdl, "templates": ["triton.gemm"],
                   "force_template": "triton.gemm", "autotune": "quick", "inductor": {"fx_graph_cache": False}}
        got, codes = run_and_get_code(torch.compile(f, backend="ext", options=options), x, w)
        result[pdl] = {"max_err": (got - want).abs().max().item(), "winner": decision_record.decisions[-1].winner,
                       "kernels": kernels("\n".join(codes))}
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
