"""Run by test_shipped_cache.py: one cpu-preset compile of a small linear layer against the caches
named on the command line, as a process of a machine the cache was shipped to.

    python _shipped_cache_script.py AUTOTUNE [--shared-inductor-cache] CACHE [CACHE ...]

Prints, as JSON: the decisions (op, winner, reason), the largest error against eager, and every
warning ext gave (cache warnings and WARNING log lines). With ``--shared-inductor-cache`` the
compile uses the Inductor cache of ``$TORCHINDUCTOR_CACHE_DIR`` with its FX graph cache on, as a
user's process does (a graph found there is not lowered again, so it records no decision);
otherwise it lowers afresh.
"""

import contextlib
import json
import logging
import sys
import warnings

import torch

from inductor_ext import tune
from inductor_ext.autotune import policy
from inductor_ext.lowering import decision_record


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(24, 16).eval()


def example() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(2, 24)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run(autotune: str, caches: list[str], shared: bool) -> dict:
    policy.EFFORT_BUDGET["quick"] = 1  # one micro-kernel beside ATen: one C++ build
    handler = _Lines()
    logging.getLogger("inductor_ext").addHandler(handler)
    first = len(decision_record.decisions)
    layer, x = model(), example()
    inductor = (torch._inductor.config.patch(fx_graph_cache=True) if shared else tune.fresh_inductor_caches())
    with warnings.catch_warnings(record=True) as caught, inductor, torch.no_grad():
        warnings.simplefilter("always")
        options = {"preset": "cpu", "autotune": autotune,
                   "autotune_cache": caches[0] if len(caches) == 1 else caches}
        got = torch.compile(layer, backend="ext", options=options)(x)
    return {
        "decisions": [{"op": d.op, "winner": d.winner, "reason": d.reason} for d in decision_record.decisions[first:]],
        "max_err": (got - layer(x)).abs().max().item(),
        "warnings": [str(w.message) for w in caught if "inductor_ext" in str(w.message)] + handler.lines,
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    shared = "--shared-inductor-cache" in args
    args = [a for a in args if a != "--shared-inductor-cache"]
    with contextlib.redirect_stdout(sys.stderr):  # only the JSON line on stdout
        result = run(args[0], args[1:], shared)
    print(json.dumps(result))
