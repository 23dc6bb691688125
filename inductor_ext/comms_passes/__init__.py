"""Compiled collectives: the SimpleFSDP front end and its overlap pass (``fsdp/``), the collective
check (``collective_check/``), the pipeline buffer planner (``pipeline/``) and the cost model.

``PASSES`` names this package's graph passes (pass name -> module, relative to this package):
the pass registry (``lowering/passes/__init__.py``) imports exactly these when it is first
asked, so a new comms pass is its module plus one line here, and the rest of the package (the
planners, the trace tools) is not imported to find them.
"""

PASSES = {
    "fsdp_overlap": "fsdp.overlap",
    "collective_check": "collective_check.graph_pass",
}
