"""When a GEMM template is launched with programmatic dependent launch (PDL).

PDL (Hopper and later) lets kernel N+1 start while kernel N is still running: N calls
``griddepcontrol.launch_dependents`` once its main loop is done, N+1 runs its prologue (index and
pointer math, TMEM allocation, ...) and blocks in ``griddepcontrol.wait`` until N has finished and
its writes are visible. The templates do this when their problem has ``use_pdl`` (the ``USE_PDL``
constexpr; see ``inductor_ext/templates/triton/gemm.py``). What it can save is one kernel's
launch latency and prologue per GEMM, a few microseconds: worth it only where a kernel itself
takes a few microseconds, and only when the next kernel waits on this one's output.

The rule (``use_pdl``), for ``mode``:

- ``"off"``: never.
- ``"force"``: always (for experiments and ``bench/``; the caller still needs an NVIDIA sm_90+
  target, which ``render()`` checks).
- ``"auto"``: only for decode-shaped GEMMs, ``1 <= M <= AUTO_MAX_M`` (32), and only when the
  consumer reads the GEMM's output directly (``consumer_reads_output_directly``: the next kernel
  on the stream loads this output, e.g. a pointwise or norm kernel, or the next GEMM's A operand,
  and waits for it with ``gdc_wait()``). Otherwise off: M of 33 and more (including the whole
  33..128 batch band), and every GEMM whose output goes somewhere else first (a copy, a
  collective, a kernel of another stream, the graph's output), where there is no dependent
  prologue to overlap. ``n`` and ``k`` are checked (positive) but do not enter the rule yet.

Source: PyTorch 2.15's own policy for its NVFP4 CUTLASS GEMMs,
``torch/_inductor/heuristics/template/nv_universal_gemm.py::use_nvfp4_pdl`` (config
``torch._inductor.config.nvgemm_pdl``, ``TORCHINDUCTOR_NVGEMM_PDL`` = "0" / "auto" / "1"), which
enables PDL for M <= 256 with 1024 <= min(N, K) and max(N, K) <= 65536 *except* for
32 < M <= 64 with 2048 < min(N, K) < 4096, because forcing PDL there made hybrid models regress
(measured by PyTorch, as its source comment says: "Hybrid models regress in this
intermediate-width batch 33-64 band"). Inductor also continues a PDL chain only into the
scheduler-adjacent kernel that reads what the GEMM wrote (``TritonKernel._has_pdl_dependency``),
which is our "reads the output directly". Those measurements are for PyTorch's CUTLASS kernels,
not for our Triton templates, so this rule keeps only the band nobody measured a regression in,
M <= 32, and leaves 33..128 (and above) off until ``bench/`` measures our own kernels on a lent
GPU and says otherwise. The width limits are not copied for the same reason.
"""

from __future__ import annotations

NAME = "pdl"
MODES = ("off", "auto", "force")
AUTO_MAX_M = 32  # the largest M that "auto" launches with PDL


def use_pdl(mode: str, m: int, n: int, k: int, consumer_reads_output_directly: bool) -> bool:
    """Whether a GEMM of ``m x n x k`` is launched with PDL (the template's ``use_pdl``).

    ``mode`` is "off", "auto" or "force" (see the module docstring for the rule and its source).
    Raises ValueError for another mode or a non-positive size.
    """
    if mode not in MODES:
        raise ValueError(f"PDL mode {mode!r} is not one of {MODES}")
    if min(m, n, k) <= 0:
        raise ValueError(f"GEMM sizes must be positive, got M={m} N={n} K={k}")
    if mode == "off":
        return False
    if mode == "force":
        return True
    return bool(consumer_reads_output_directly) and m <= AUTO_MAX_M
