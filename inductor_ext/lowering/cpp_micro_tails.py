"""Fewer row-tail instantiations in Inductor's vector micro-GEMM, where M is known.

Inductor 2.15's ``CppMicroGemmFP32Vec`` (the AVX-512 and AVX2 micro-kernels of ``cpp.gemm``)
dispatches a row tail (fewer than ``block_m`` rows left) over a switch that instantiates its
fully unrolled kernel once per tail size, 1 .. block_m - 1, each with and without accumulation:
for the 16x16 fp32 kernel 30 instantiations no static M of a multiple of 16 ever calls, and about
1 s of a 1.6 s g++ build (measured one kernel at a time on a 2-core AVX-512 host: 1.6 s with
Inductor's switch, 0.7 s with one tail). A first compile builds one such kernel per GEMM.

Where M is static, the template calls the micro-kernel only with whole blocks and with the one
tail ``M % block_m`` (its M blocks are multiples of ``block_m`` but the last). The switch here
keeps that tail's case, and every other tail size (none is expected) runs the one-row kernel row
by row: correct for any M whatever the template passes, just slower. Where the switch in
Inductor's source is not the one this module knows (another torch), the kernel is left as Inductor
renders it.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch._inductor.lowering  # noqa: F401  (first: cpp_micro_gemm imported alone is a circular import in 2.15)
from torch._inductor.codegen.cpp_micro_gemm import CppMicroGemmFP32Vec

_TAIL_CASES = "{%- for b in range(block_m - 1, 0, -1) %}"
_TAIL_DEFAULT = """                    break;
{%- endfor %}
                default:
                    {{kernel.assert_function}}(false, "Unsupported block_m: {{block_m}}");
                }
"""
# Any other tail: the one-row kernel, once per row (the rows of a tail are independent).
_ROW_BY_ROW = """                    break;
{%- endfor %}
                default:
                    for (int64_t row = 0; row < block_m; ++row) {
                        {{kernel_name}}_kernel<1, {{block_n}}, accum, prefetch>(
                            A + (m + row) * lda,
                            B + n,
                            C + (m + row) * ldc + n,
                            K,
                            lda,
                            ldb,
                            ldc
                        );
                    }
                }
"""


def _narrowed_entry(template: str, tails: list[int]) -> str | None:
    """Inductor's entry template with the tail switch narrowed to ``tails``, or None where its
    text is not the one this module knows."""
    if template.count(_TAIL_CASES) != 1 or template.count(_TAIL_DEFAULT) != 1:
        return None
    return template.replace(_TAIL_CASES, "{%- for b in " + repr(tails) + " %}").replace(_TAIL_DEFAULT, _ROW_BY_ROW)


def narrow(micro_gemm: Any, m: Any) -> bool:
    """Narrow ``micro_gemm``'s row-tail switch to the tail a static ``m`` leaves (in place, for
    this one kernel); whether it did. Only Inductor's plain vector micro-kernel (no transposed B,
    no N tail) with a static M is narrowed."""
    if type(micro_gemm) is not CppMicroGemmFP32Vec or micro_gemm.trans_b or micro_gemm.tail_n:
        return False
    if not isinstance(m, (int, sympy.Integer)):
        return False
    block_m = micro_gemm.register_blocking.block_m
    tail = int(m) % block_m
    entry = _narrowed_entry(micro_gemm.TEMPLATE_ENTRY, [tail] if tail > 1 else [])
    if entry is None:
        return False
    micro_gemm.TEMPLATE_ENTRY = entry  # an instance attribute: the class keeps Inductor's template
    return True
