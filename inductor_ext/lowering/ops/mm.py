"""``mm`` and ``bmm``: Inductor's own lowerings ask ext's choices for them
(``ExtChoices.get_template_configs``), so this module holds only their glue.

OpSpec.inputs: (A, B); scalar ``fp32_precision`` ("tf32" or "ieee": ``fp32_matmul_precision()``).
"""

from __future__ import annotations

import functools
from typing import Any

from torch._inductor.kernel.mm_common import mm_args

from inductor_ext.lowering.ops._spec import OpInputs, box, fp32_matmul_precision, spec


def product(op: str, kernel_inputs: Any) -> OpInputs | str:
    """mm (A, B) or bmm (batched A, B): the plain product."""
    mat1, mat2 = (box(n) for n in kernel_inputs.nodes())
    m, n, k, layout, mat1, mat2 = mm_args(mat1, mat2)
    op_spec = spec(op, (mat1, mat2), layout, kernel_inputs.device_type, {"fp32_precision": fp32_matmul_precision()})
    return OpInputs(op_spec, (mat1, mat2), layout)


SPECS = {"mm": functools.partial(product, "mm"), "bmm": functools.partial(product, "bmm")}
