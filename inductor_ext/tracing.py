"""ext's structured-trace artifacts: what ``TORCH_TRACE=dir`` records of ext, beside Inductor's own.

``TORCH_TRACE=/tmp/trace python train.py`` then ``tlparse /tmp/trace/*.log`` shows, in each
compile's folder, one artifact per

* GEMM decision, ``inductor_ext_decision`` (JSON): node, op, problem, every candidate with its
  time, the winner and why;
* graph pass run, ``inductor_ext_pass`` (JSON): pass, stage, rewrites;
* kernel ext chose or generated, ``inductor_ext_kernel_<name>`` (its source, with the template
  family and config in an ``inductor_ext_kernels`` JSON beside it).

Each call is a no-op costing a look at the trace log's handlers unless a trace is being written,
and the payload is built only then.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Iterable

from torch._logging import trace_structured
from torch._logging._internal import LazyTraceHandler, trace_log

PREFIX = "inductor_ext_"


def enabled() -> bool:
    """Whether a structured trace is being written (``TORCH_TRACE`` or ``torch._logging`` set up one).
    torch installs a lazy handler in every process that drops itself at its first record when no
    trace directory is set: that one does not count."""
    return any(not isinstance(h, LazyTraceHandler) or h.root_dir is not None for h in trace_log.handlers)


def _json(data: Any) -> str:
    return json.dumps(data, indent=1, default=str)


def _artifact(name: str, payload: Callable[[], str], encoding: str = "json") -> None:
    trace_structured("artifact", metadata_fn=lambda: {"name": PREFIX + name, "encoding": encoding},
                     payload_fn=payload)


def decision(record: Any) -> None:
    """One autotune decision (``lowering/decision_record.Decision``, or any dataclass or dict holding
    node, op, problem, candidates, winner, reason)."""
    if not enabled():
        return

    def payload() -> str:
        fields = ({f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
                  if dataclasses.is_dataclass(record) else dict(record))
        # the autotune cache's key: the one it is written under, or the one it was served from
        key = fields.pop("key", None) or fields.pop("cached_under", None)
        fields.pop("cached_under", None)
        first = {k: fields.pop(k) for k in ("node", "op", "winner", "reason") if k in fields}  # what a reader looks for
        return _json({**first, **fields, "cache_key": dataclasses.asdict(key) if dataclasses.is_dataclass(key) else key})

    _artifact("decision", payload)


def graph_pass(name: str, stage: str, rewrites: int) -> None:
    """One run of an ext graph pass and how many rewrites it made."""
    if enabled():
        _artifact("pass", lambda: _json({"pass": name, "stage": stage, "rewrites": rewrites}))


def kernels(parse: Callable[[], Iterable[dict[str, Any]]]) -> None:
    """The kernels of one compiled graph that ext chose or generated: ``parse()`` returns them as
    ``dumps.parse_output_code`` does (``kernel``, ``language``, ``template``, ``config``,
    ``source``); called only when a trace is being written."""
    if not enabled():
        return
    listed = []
    for kernel in parse():
        if not _is_ext(kernel):
            continue  # Inductor's own kernels are in its inductor_output_code artifact
        source = kernel.get("source", "")
        _artifact(f"kernel_{kernel['kernel']}", lambda source=source: source, encoding="string")
        listed.append({k: kernel.get(k) for k in ("kernel", "language", "template", "config", "fx_nodes")})
    if listed:
        _artifact("kernels", lambda: _json(listed))


def _is_ext(kernel: dict[str, Any]) -> bool:
    """A kernel of ext's: from one of its template families ("<dsl>.<family>"), or in a language
    Inductor does not generate itself (ext's Metal and SYCL codegens)."""
    template = kernel.get("template") or ""
    return "." in template or kernel.get("language") not in ("triton", "cpp", "python", "extern", None)
