"""Run by test_cache_is_data.py with TRITON_INTERPRET=1: issue 27's attack replayed end to end.

A cache shipped to this machine holds a ``triton.gemm`` winner whose ``num_stages`` is Python
code that creates a marker file. A two-layer MLP is compiled with ``{"preset": "hopper",
"interpret": True, "autotune": "cache-only"}``: the first GEMM's entry arrives as an exported JSON
loaded with ``inductor-ext tune import``, the second's is a row of the SQLite file rewritten with
sqlite3. Each entry is written for the exact key the compile looks up, at the moment it looks it
up (as if it had been built for this machine elsewhere; the compile then reads the file again as
its read-only layer). Prints what happened as JSON.
"""

import contextlib
import copy
import io
import json
import sqlite3
import sys
import warnings
from pathlib import Path

import torch

from inductor_ext import cli, tune
from inductor_ext.autotune import cache_layers
from inductor_ext.autotune.cache import SCHEMA_VERSION, AutotuneCache, Entry
from inductor_ext.lowering import decision_record

VALID = {"block_m": 16, "block_n": 16, "block_k": 16, "group_m": 8, "num_warps": 4, "num_stages": 2}


def attack(marker: Path) -> str:
    return f"4 if __import__('os').system('touch {marker}') == 0 else 4"


def main(out: Path) -> dict:
    db = out / "cache.db"
    markers = {"import": out / "marker_import", "sqlite": out / "marker_sqlite"}
    shipped: list[str] = []
    import_output = io.StringIO()
    real_get = cache_layers.DecisionSources.get
    AutotuneCache(db).close()  # the shipped file, still empty when the compile starts

    def get(self: cache_layers.DecisionSources, key):  # noqa: ANN001, ANN202
        if len(shipped) == 0:  # first GEMM: an exported cache, loaded with `inductor-ext tune import`
            entry = Entry(key, winner="triton.gemm", config={**VALID, "num_stages": attack(markers["import"])},
                          winner_time_us=1.0, aten_time_us=2.0)
            doc = {"format": "inductor_ext.autotune", "schema_version": SCHEMA_VERSION, "entries": [entry.to_dict()]}
            (out / "shipped.json").write_text(json.dumps(doc))
            with contextlib.redirect_stdout(import_output):
                cli.main(["tune", "import", str(out / "shipped.json"), "-o", str(db), "--update"])
            shipped.append("import")
        elif len(shipped) == 1:  # second GEMM: a valid row, then its JSON rewritten in the file
            with AutotuneCache(db) as writer:
                writer.put(Entry(key, winner="triton.gemm", config=VALID, winner_time_us=1.0, aten_time_us=2.0))
            with sqlite3.connect(db) as conn:
                (body,) = conn.execute("SELECT entry_json FROM entries WHERE digest = ?", (key.digest(),)).fetchone()
                body = json.loads(body)
                body["config"]["num_stages"] = attack(markers["sqlite"])
                conn.execute("UPDATE entries SET entry_json = ? WHERE digest = ?", (json.dumps(body), key.digest()))
            shipped.append("sqlite")
        self.layers = [cache_layers.load_layer(db)]  # the file as shipped for this key
        return real_get(self, key)

    cache_layers.DecisionSources.get = get
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8, bias=False))
    x = torch.randn(8, 24)
    options = {"preset": "hopper", "interpret": True, "autotune": "cache-only", "templates": ["triton.gemm"],
               "autotune_cache": str(db)}
    first = len(decision_record.decisions)
    with warnings.catch_warnings(record=True) as caught, tune.fresh_inductor_caches(), torch.no_grad():
        warnings.simplefilter("always")
        got = torch.compile(copy.deepcopy(model), backend="ext", options=options)(x)
        want = model(x)
    layer = cache_layers.load_layer(db)
    return {
        "shipped": shipped,
        "markers": {name: path.exists() for name, path in markers.items()},
        "max_err": (got - want).abs().max().item(),
        "decisions": [{"winner": d.winner, "reason": d.reason} for d in decision_record.decisions[first:]],
        "import_output": import_output.getvalue(),
        "warnings": [str(w.message) for w in caught if "autotune cache" in str(w.message)],
        "invalid_on_lookup": layer.skipped,
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
