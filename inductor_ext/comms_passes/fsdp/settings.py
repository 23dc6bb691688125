"""The settings of the ``fsdp_overlap`` pass (``overlap.py``): ``OverlapSettings``, the
``options={"fsdp_overlap": {...}}`` option this module registers, and ``configure(...)``, which
overrides them for passes built inside its ``with`` block. Without a ``gpu``, the ExtConfig
target's datasheet (``targets``: sm_90a -> H200, sm_100a -> B200, gfx950 -> MI355X) names the cost
model's GPU, H100 for a target without one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import math
from dataclasses import dataclass
from typing import Any, Iterator

from inductor_ext import targets
from inductor_ext.config import ExtConfig, ExtOptionError, OptionSpec, register_option


@dataclass(frozen=True)
class OverlapSettings:
    """Knobs of the pass. Sizes are bytes; None means "derive it from the cost model"."""

    gpu: str | None = None  # datasheet for the cost model; None: from the ExtConfig target
    bucket_all_gathers: bool = True
    bucket_reduce_scatters: bool = True
    bucket_cap_bytes: int | None = None  # None: the size at which latency is <= 5% of a collective
    reorder: bool = True  # prefetch all-gathers and place reduce-scatter waits by the cost model
    max_prefetch: int = 2  # all-gather buckets issued ahead of the one being used
    max_in_flight_bytes: int | None = None  # inputs + outputs of issued, not yet waited collectives
    pin_order: bool = True  # control_deps keep the planned order through Inductor's scheduler
    memory_budget_bytes: int = 0  # extra estimated peak memory allowed over the input graph
    memory_budget_ratio: float = 0.0  # ... or this fraction of the input graph's peak (the larger)
    default_world_size: int = 8  # for groups whose size cannot be resolved

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def check(cls, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` checked field by field (``options={"fsdp_overlap": {...}}``); raises
        ValueError naming the bad key or value and what is allowed."""
        from inductor_ext.comms_passes.cost_model import GPUS

        if not isinstance(values, dict):
            raise ValueError(f"expected a dict of fsdp_overlap settings, got {values!r}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for key, value in values.items():
            if key not in fields:
                close = difflib.get_close_matches(str(key), fields, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"unknown fsdp_overlap setting {key!r}{hint}; valid: {', '.join(sorted(fields))}")
            kind = fields[key].type
            if key == "gpu":
                ok = value is None or (isinstance(value, str) and value.upper() in GPUS)
                allowed = f"None or one of {', '.join(GPUS)}"
            elif kind == "bool":
                ok, allowed = isinstance(value, bool), "True or False"
            elif kind == "float":
                ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
                      and math.isfinite(value) and value >= 0)
                allowed = "a finite number >= 0"
            else:  # int or int | None: sizes in bytes and counts
                ok = (value is None and "None" in kind) or (isinstance(value, int) and not isinstance(value, bool)
                                                            and value >= (1 if key == "default_world_size" else 0))
                allowed = "an int >= 0" + (" or None" if "None" in kind else "")
            if not ok:
                raise ValueError(f"fsdp_overlap setting {key}={value!r}: expected {allowed}")
        return dict(values)


OPTION = "fsdp_overlap"

# What pin_order asks of Inductor's scheduler besides the control_deps (see FsdpOverlapPass).
PLANNED_ORDER_PATCHES = {"reorder_for_peak_memory": False,
                         "aten_distributed_optimizations.enable_simple_overlap": False}


def _check_option(key: str, value: Any) -> dict[str, Any]:
    try:
        return OverlapSettings.check(value)
    except ValueError as e:
        raise ExtOptionError(f"options[{key!r}]: {e}") from None


register_option(OPTION, OptionSpec("settings of the fsdp_overlap pass, e.g. {'bucket_cap_bytes': 64 << 20, "
                                   "'max_prefetch': 2, 'memory_budget_ratio': 0.1}", _check_option))


_overrides: list[dict[str, Any]] = []


@contextlib.contextmanager
def configure(**overrides: Any) -> Iterator[None]:
    """Override ``OverlapSettings`` fields for passes created inside the block."""
    unknown = set(overrides) - {f.name for f in dataclasses.fields(OverlapSettings)}
    if unknown:
        raise ValueError(f"unknown fsdp_overlap settings {sorted(unknown)}; "
                         f"valid: {[f.name for f in dataclasses.fields(OverlapSettings)]}")
    _overrides.append(overrides)
    try:
        yield
    finally:
        _overrides.pop()

def current_settings(config: ExtConfig | None = None) -> OverlapSettings:
    values: dict[str, Any] = {}
    if config is not None:
        values.update(config.plugin_options.get(OPTION, {}))  # options={"fsdp_overlap": {...}}; configure() wins
    for o in _overrides:
        values.update(o)
    s = OverlapSettings(**values)
    if s.gpu is None:
        target = getattr(config, "target", "") if config is not None else ""
        sheet = targets.datasheet(target)
        s = dataclasses.replace(s, gpu=sheet.name if sheet is not None else "H100")
    return s
