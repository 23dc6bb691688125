"""FX node and user source line for the flight recorder's entries of compiled collectives.

What 2.15 allows: a flight-recorder entry (``torch._C._distributed_c10d._dump_fr_trace``, the
pickle dump, also what ``TORCH_NCCL_DUMP_ON_TIMEOUT`` writes) carries the Python ``frames`` of
the call that issued the collective; for a compiled graph one of them is the line of Inductor's
output module that issued it. Entries have no field a caller can fill in, so the FX node and the
source line cannot go into the recorder itself; ``annotate`` adds them to a dump afterwards:

* the collective check remembers, per output module, the graph's collectives in issue order
  (``agree._code_files``, filled at each graph's first call);
* the k-th collective call line of that module is the graph's k-th collective (Inductor's
  ``simple_overlap`` never reorders collectives among themselves).

Where 2.15 does not allow it: the JSON dump (``_dump_fr_trace_json``) has no frames, so nothing
can be added there; a module in which Inductor's own passes changed the number of collectives
(2.15's FX bucketing after ext's passes) gets ``ext_note`` instead of a node; collectives issued
by processes that never ran the check (it is off, or the graph was never called) stay as they are.
"""

from __future__ import annotations

import functools
import pickle
import re
from typing import Any

from inductor_ext.comms_passes.collective_check import agree
from inductor_ext.comms_passes.collective_check.fingerprint import GraphCollectives

__all__ = ["annotate", "dump"]

_COLLECTIVE_CALL = re.compile(r"torch\.ops\._c10d_functional\.(?!wait_tensor)\w+\.\w+\(")


@functools.lru_cache(maxsize=None)
def _collective_lines(path: str) -> tuple[int, ...]:
    """1-based numbers of the lines of an output module that issue a collective."""
    with open(path) as f:
        return tuple(i for i, text in enumerate(f, 1) if _COLLECTIVE_CALL.search(text))


def _annotate_entry(entry: dict[str, Any], graphs: dict[str, GraphCollectives]) -> None:
    for frame in entry.get("frames") or ():
        if frame.get("filename") == agree.__file__:
            entry["ext_note"] = "ext's collective check (one per graph and group, at its first call)"
            return
        graph = graphs.get(frame.get("filename", ""))
        if graph is None:
            continue
        lines = _collective_lines(frame["filename"])
        if len(lines) != len(graph.collectives):
            entry["ext_note"] = (f"compiled graph {graph.label}: its code issues {len(lines)} collectives, its "
                                 f"description {len(graph.collectives)} (changed after ext's passes)")
            return
        if frame.get("line") in lines:
            c = graph.collectives[lines.index(frame["line"])]
            entry.update(ext_graph=graph.label, ext_fx_node=c.node, ext_source=c.source,
                         ext_collective=c.what(), ext_bucket_of=list(c.bucket_of))
        return


def annotate(trace: dict[str, Any]) -> dict[str, Any]:
    """``trace`` (an unpickled flight-recorder dump) with ``ext_fx_node``, ``ext_source``,
    ``ext_graph`` and ``ext_collective`` added to each entry of a compiled collective that this
    process's collective check knows about. Changes ``trace`` in place and returns it."""
    graphs = dict(agree._code_files)
    for entry in trace.get("entries", ()):
        _annotate_entry(entry, graphs)
    return trace


def dump(backend: str = "gloo", only_active: bool = False) -> dict[str, Any]:
    """This process's flight-recorder dump for ``backend`` (with stack frames), annotated."""
    import torch

    raw = torch._C._distributed_c10d._dump_fr_trace(True, True, only_active, backend)
    return annotate(pickle.loads(raw))
