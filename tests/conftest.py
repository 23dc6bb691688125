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

# Autotune results must not leak between runs (a cached winner skips the benchmarks tests
# look at), so each session gets its own autotune cache directory; subprocesses inherit it.
import tempfile  # noqa: E402

os.environ["INDUCTOR_EXT_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor_ext_test_cache_")
