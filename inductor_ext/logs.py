"""ext's log artifacts, in PyTorch's logging system.

``TORCH_LOGS=ext_autotune,ext_passes`` turns them on (the names are registered while torch is
imported, through the ``torch.backends`` entry point, before TORCH_LOGS is parsed); from code,
``torch._logging.set_logs(modules={"ext_autotune": True})``. The module loggers work too:
``TORCH_LOGS="+inductor_ext.autotune"``.
"""

from __future__ import annotations

import logging

from torch._logging import _internal

ARTIFACTS = {
    "ext_autotune": "inductor_ext: every GEMM decision (candidates, timings vs ATen, winner, why)",
    "ext_passes": "inductor_ext: every graph pass run and its rewrite count",
}


def register_artifacts() -> None:
    # The artifacts' parent log: torch attaches its handler (stderr / TORCH_LOGS_OUT) to it.
    if not _internal.log_registry.is_log("inductor_ext"):
        _internal.register_log("inductor_ext", "inductor_ext")
    for name, description in ARTIFACTS.items():
        if name not in _internal.log_registry.artifact_names:
            _internal.register_artifact(name, description, visible=True)


def _artifact(name: str, module: str) -> logging.Logger:
    register_artifacts()
    try:
        return _internal.getArtifactLogger(module, name)
    except Exception:  # a torch without artifact loggers: a plain child logger still works
        return logging.getLogger(f"{module}.{name}")


autotune_log = _artifact("ext_autotune", "inductor_ext.autotune")
passes_log = _artifact("ext_passes", "inductor_ext.passes")
