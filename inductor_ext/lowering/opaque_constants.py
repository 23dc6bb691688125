"""A graph holding oneDNN's or MKL's reordered weight is not saved in Inductor's FX graph cache, quietly.

Where oneDNN's packed linear wins a bf16 decision, or MKL's packed linear an fp32 one, ext adds the
weight reordered into the library's packed layout (an opaque MKLDNN tensor, no storage to pickle)
as a graph constant (``aten_choices.onednn_linear_on_packed_constant``,
``mkl_linear_on_packed_constant``). Inductor's own weight-prepack pass makes the
same constants before the FX graph cache computes its key, and bypasses the cache without a word;
ext's lowering adds them after, so Inductor compiles, tries to save, fails to pickle, and logs a
warning with a traceback on every such compile (a bf16 MLP under ``torch.no_grad()``). The graph is
correct either way and simply not cached, as Inductor's is not. ``added()`` marks the graph being
lowered on this thread; the filter then turns that one warning into one ext log line saying so.
Any other failure to save is Inductor's warning, untouched.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import torch
from torch._inductor.virtualized import V

from inductor_ext.logs import autotune_log

INDUCTOR_CACHE_LOGGER = "torch._inductor.codecache"
UNSERIALIZABLE = "fx graph cache unable to serialize compiled graph"

_pending = threading.local()  # opaque constants added by this thread's lowering since its last save


class _OpaqueConstantFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != UNSERIALIZABLE or not getattr(_pending, "count", 0):
            return True
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, NotImplementedError) or "OpaqueTensorImpl" not in str(error):
            return True
        count, _pending.count = _pending.count, 0
        autotune_log.info("graph not saved in Inductor's FX graph cache: it holds %d weight(s) reordered for "
                          "oneDNN's or MKL's packed linear (opaque tensors, which cannot be pickled; Inductor's own "
                          "prepacked graphs are not cached either)", count)
        return False


_FILTER = _OpaqueConstantFilter()


def added() -> None:
    """Record that the graph this thread lowers now holds an opaque oneDNN or MKL constant."""
    _pending.count = getattr(_pending, "count", 0) + 1
    logger = logging.getLogger(INDUCTOR_CACHE_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)


def add_constant(tensor: torch.Tensor) -> Any:
    """``tensor`` as a constant of the graph being lowered; an opaque one (MKLDNN layout: oneDNN's
    reordered weight, and MKL's packed one on torch 2.15) marks the graph (``added``)."""
    if tensor.is_mkldnn:
        added()
    return V.graph.add_tensor_constant(tensor)
