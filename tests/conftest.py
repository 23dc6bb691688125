"""Test session setup.

Triton decides once per process, when triton.language is first imported, whether kernels run
in its interpreter. The suite runs tier C kernels in-process, so interpret mode is switched on
before anything imports Triton; ISA gates (tier I) then compile in a subprocess without it
(inductor_ext.testing.isa does that by itself).
"""

import os
import sys

if "triton" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")
