"""ext's log artifacts, in PyTorch's logging system.

``torch._logging.set_logs(ext_autotune=True, ext_passes=True)`` turns them on from code.
TORCH_LOGS is parsed when torch is imported, before any out-of-tree package can register an
artifact name, so from the environment use the module names instead:
``TORCH_LOGS="+inductor_ext.autotune,+inductor_ext.passes"``.
"""

from __future__ import annotations

import logging

from torch._logging import _internal

ARTIFACTS = {
    "ext_autotune": "inductor_ext: every GEMM decision (candidates, timings vs ATen, winner, why)",
    "ext_passes": "inductor_ext: every graph pass run and its rewrite count",
}


def _artifact(name: str, module: str) -> logging.Logger:
    if name not in _internal.log_registry.artifact_names:
        _internal.register_artifact(name, ARTIFACTS[name], visible=True)
    try:
        return _internal.getArtifactLogger(module, name)
    except Exception:  # a torch without artifact loggers: a plain child logger still works
        return logging.getLogger(f"{module}.{name}")


autotune_log = _artifact("ext_autotune", "inductor_ext.autotune")
passes_log = _artifact("ext_passes", "inductor_ext.passes")
