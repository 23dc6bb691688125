"""Chrome / Perfetto trace files (the JSON "Trace Event Format") for the communication reports.

One process per (report row, arm), one thread per stream (a rank's compute, its communication
lanes), complete events ("X") for work, counters ("C") for live buffer bytes. Open the file in
https://ui.perfetto.dev or chrome://tracing. Times are microseconds; the writer emits every track
in time order, and ``problems`` checks a file against ``SCHEMA`` and that order (the test runs it
on what the report and the pipeline benchmark write).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

__all__ = ["ChromeTrace", "SCHEMA", "problems"]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
        "traceEvents": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "ph", "pid"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "ph": {"enum": ["X", "C", "M"]},
                    "pid": {"type": "integer", "minimum": 0},
                    "tid": {"type": "integer", "minimum": 0},
                    "ts": {"type": "number", "minimum": 0},
                    "dur": {"type": "number", "minimum": 0},
                    "cat": {"type": "string"},
                    "args": {"type": "object"},
                },
                "allOf": [
                    {"if": {"properties": {"ph": {"const": "X"}}},
                     "then": {"required": ["tid", "ts", "dur"]}},
                    {"if": {"properties": {"ph": {"const": "C"}}},
                     "then": {"required": ["ts", "args"],
                              "properties": {"args": {"additionalProperties": {"type": "number"}}}}},
                    {"if": {"properties": {"ph": {"const": "M"}}},
                     "then": {"required": ["args"],
                              "properties": {"name": {"enum": ["process_name", "thread_name",
                                                               "process_sort_index", "thread_sort_index"]}}}},
                ],
            },
        },
    },
}


class ChromeTrace:
    """Collects processes, threads, slices and counters; ``write`` sorts each track by time."""

    def __init__(self, **other_data: Any) -> None:
        self._meta: list[dict[str, Any]] = []
        self._events: list[dict[str, Any]] = []
        self._pids: dict[str, int] = {}
        self._tids: dict[tuple[int, str], int] = {}
        self.other_data = dict(other_data)

    def process(self, name: str) -> int:
        if name not in self._pids:
            pid = self._pids[name] = len(self._pids)
            self._meta.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
            self._meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}})
        return self._pids[name]

    def thread(self, pid: int, name: str) -> int:
        key = (pid, name)
        if key not in self._tids:
            tid = self._tids[key] = sum(1 for p, _ in self._tids if p == pid)
            self._meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            self._meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                               "args": {"sort_index": tid}})
        return self._tids[key]

    def slice(self, pid: int, tid: int, name: str, ts_us: float, dur_us: float, cat: str = "",
              **args: Any) -> None:
        ev = {"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": max(0.0, float(ts_us)),
              "dur": max(0.0, float(dur_us))}
        if cat:
            ev["cat"] = cat
        if args:
            ev["args"] = args
        self._events.append(ev)

    def counter(self, pid: int, name: str, ts_us: float, **values: float) -> None:
        self._events.append({"name": name, "ph": "C", "pid": pid, "ts": max(0.0, float(ts_us)),
                             "args": {k: float(v) for k, v in values.items()}})

    def lanes(self, pid: int, prefix: str, spans: list[tuple[float, float, str, dict[str, Any]]],
              cat: str = "") -> None:
        """Slices that may overlap, each on the first lane (thread ``prefix``, ``prefix 2``, ...)
        free at its start, so every thread track holds a proper sequence."""
        free: list[float] = []
        for start, end, name, args in sorted(spans, key=lambda s: (s[0], s[1])):
            lane = next((i for i, f in enumerate(free) if f <= start), None)
            if lane is None:
                lane = len(free)
                free.append(0.0)
            free[lane] = end
            tid = self.thread(pid, prefix if lane == 0 else f"{prefix} {lane + 1}")
            self.slice(pid, tid, name, start, end - start, cat, **args)

    def merge(self, other: dict[str, Any]) -> None:
        """Add the processes, threads and events of another trace (``to_json()`` of one built
        elsewhere, e.g. in a worker process), matching processes and threads by name."""
        names = {e["pid"]: e["args"]["name"] for e in other["traceEvents"] if e["name"] == "process_name"}
        threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in other["traceEvents"]
                   if e["name"] == "thread_name"}
        pid_of = {old: self.process(name) for old, name in names.items()}
        tid_of = {key: self.thread(pid_of[key[0]], name) for key, name in threads.items()}
        for e in other["traceEvents"]:
            if e["ph"] == "M":
                continue
            moved = dict(e, pid=pid_of[e["pid"]])
            if "tid" in e:
                moved["tid"] = tid_of[(e["pid"], e["tid"])]
            self._events.append(moved)

    def to_json(self) -> dict[str, Any]:
        events = sorted(self._events, key=lambda e: (e["pid"], e.get("tid", -1), e["name"] if e["ph"] == "C"
                                                     else "", e["ts"], -e.get("dur", 0.0)))
        return {"traceEvents": self._meta + events, "displayTimeUnit": "ms", "otherData": self.other_data}

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f)


def problems(trace: dict[str, Any]) -> list[str]:
    """What is wrong with ``trace`` (a loaded trace file): schema violations, events on an
    undeclared process, tracks out of time order. Empty when it is fine."""
    import jsonschema

    out = [f"schema: {e.message} at {list(e.absolute_path)}"
           for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(trace)]
    if out:
        return out
    events = trace["traceEvents"]
    named = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    last: dict[tuple, float] = defaultdict(lambda: -1.0)
    for e in events:
        if e["ph"] == "M":
            continue
        if e["pid"] not in named:
            out.append(f"event {e['name']!r} on pid {e['pid']}, which has no process_name")
        track = (e["pid"], e.get("tid"), e["name"]) if e["ph"] == "C" else (e["pid"], e["tid"])
        if e["ts"] < last[track]:
            out.append(f"track {track}: ts {e['ts']} after {last[track]} (not in time order)")
        last[track] = e["ts"]
    return out
