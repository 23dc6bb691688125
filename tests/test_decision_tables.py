"""Decision tables (``autotune/decision_tables.py``) and the untimed lookup order of
``autotune="model"``, the cpu preset's default: the user's cache (and shipped layers), then decision
tables, then the cost model, then ATen's default; nothing timed, one log line per decision.

A table is data, read like a foreign cache: a refused entry is one line and the rest still serve,
a refused file is one line and compiles run as without it."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from inductor_ext.autotune import cache_transfer, decision_tables
from inductor_ext.autotune.cache_entry import Entry, ProblemKey
from inductor_ext.autotune.decision_tables import TableSet, parse_table, portable, table_text
from inductor_ext.kernels import mkl_packed_ops
from inductor_ext.lowering import decision_record
from inductor_ext.targets import cpu

ROOT = Path(__file__).resolve().parents[1]
PROVENANCE = {"cpu": "test CPU", "form": "test", "date": "2026-12-06", "torch": torch.__version__,
              "inductor_ext": "0.1.0", "command": "tests/test_decision_tables.py"}
# the host's own vector micro-kernel: every machine this suite runs on has AVX-512 or AVX2
ISA = {"AVX512": "avx512", "AVX2": "avx2"}.get(torch.backends.cpu.get_cpu_capability())
GEMM_CONFIG = {"isa": ISA, "block_m": 16 if ISA == "avx512" else 4, "block_n": 16, "block_k": 1,
               "cache_m": 0, "cache_n": 0, "cache_k": 0}


def _key(m: int = 16, n: int = 96, k: int = 64, form: str = "AVX512, 2 threads") -> ProblemKey:
    return ProblemKey(op="mm", shapes=((m, k), (k, n)), strides=((k, 1), (1, k)), dtypes=("float32", "float32"),
                      device_name=form, arch="cpu", preset="cpu", fp32_precision="ieee")


def _entry(key: ProblemKey, winner: str = "cpp.gemm", aten_us: float = 10.0, template_us: float = 5.0) -> Entry:
    return Entry(key=key, winner=winner, config=dict(GEMM_CONFIG) if winner != "aten" else {"name": "mm"},
                 winner_time_us=template_us if winner != "aten" else aten_us, aten_time_us=aten_us,
                 candidates=[{"name": "mm", "time_us": aten_us, "policy": None, "error": None},
                             {"name": "cpp_gemm_0", "time_us": template_us, "policy": "default", "error": None}])


def _table(entries: list[Entry]) -> bytes:
    return table_text(entries, PROVENANCE).encode()


# ------------------------------------------------------------------ the file is data


def test_portable_keys_drop_the_machine_model_versions_and_source_hash() -> None:
    key = ProblemKey(op="mm", shapes=((1, 2), (2, 3)), strides=((2, 1), (3, 1)), dtypes=("float32", "float32"),
                     device_name="Intel Xeon, AVX512, 2 threads", arch="cpu", versions={"torch": "2.15.0"},
                     template_hash="abc", preset="cpu")
    moved = portable(key, "AVX512, 2 threads")
    assert (moved.device_name, moved.versions, moved.template_hash) == ("AVX512, 2 threads", (), "")
    assert (moved.op, moved.shapes, moved.strides, moved.preset) == (key.op, key.shapes, key.strides, key.preset)


def test_a_table_reads_back_what_was_written() -> None:
    entries = [_entry(_key(m)) for m in (1, 16, 64)]
    table = parse_table(_table(entries), "t.json")
    assert table is not None and table.refused == 0 and table.provenance == PROVENANCE
    assert [table.get(e.key).to_dict() for e in entries] == [e.to_dict() for e in entries]
    assert table.get(_key(2)) is None


@pytest.mark.parametrize("spoil, why", [
    (lambda d: d["config"].update(block_m=10 ** 9), "block_m"),  # outside the family's declared values
    (lambda d: d.update(winner="os.system"), "winner"),
    (lambda d: d.update(aten_time_us=-1), "aten_time_us"),
    (lambda d: d["key"].update(op="exec"), "op"),
    (lambda d: d.pop("candidates"), "fields"),
])
def test_a_corrupted_entry_is_refused_with_one_line_and_the_rest_serve(spoil: Any, why: str, caplog) -> None:
    good, bad = _entry(_key(1)), _entry(_key(16))
    doc = json.loads(_table([good, bad]))
    spoil(doc["entries"][1])
    with caplog.at_level(logging.WARNING, logger="inductor_ext.autotune"):
        table = parse_table(json.dumps(doc).encode(), "t.json")
    assert table is not None and table.refused == 1
    assert table.get(good.key) is not None and table.get(bad.key) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("ext: decision table t.json: entries[1] refused and skipped: ")
    assert why in lines[0], lines


@pytest.mark.parametrize("data, why", [
    (b"\xff\xfe", "not UTF-8"),
    (b"{not json", "not JSON"),
    (b"[]", "expected an object"),
    (json.dumps({"format": "inductor_ext.autotune", "schema_version": 1, "provenance": PROVENANCE,
                 "entries": []}).encode(), "format"),
    (json.dumps({"format": decision_tables.TABLE_FORMAT, "schema_version": 1, "provenance": {"cpu": "x"},
                 "entries": []}).encode(), "provenance"),
    (b" " * (decision_tables.MAX_TABLE_BYTES + 1), "at most"),
])
def test_a_file_that_is_no_table_is_refused_whole_with_one_line(data: bytes, why: str, caplog) -> None:
    if why == "format":  # the schema version the cache writes, so only the format is wrong
        doc = json.loads(data)
        doc["schema_version"] = json.loads(_table([]))["schema_version"]
        data = json.dumps(doc).encode()
    with caplog.at_level(logging.WARNING, logger="inductor_ext.autotune"):
        assert parse_table(data, "bad.json") is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "bad.json refused" in lines[0] and why in lines[0], lines


def test_missing_files_and_folders_are_one_line_each(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="inductor_ext.autotune"):
        tables = TableSet.for_paths([str(tmp_path / "none.json"), str(tmp_path)], package=False)
    assert tables.tables == []
    assert [("no such file" in r.getMessage(), "not a regular file" in r.getMessage()) for r in caplog.records] == [
        (True, False), (False, True)]


def test_a_table_is_read_again_when_its_bytes_change_even_at_the_same_mtime(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(_table([_entry(_key(1))]))
    stamp = os.stat(path).st_mtime_ns
    assert decision_tables.load_table(path).get(_key(1)).winner == "cpp.gemm"
    path.write_bytes(_table([_entry(_key(1), winner="aten")]))
    os.utime(path, ns=(stamp, stamp))
    assert decision_tables.load_table(path).get(_key(1)).winner == "aten"


def test_a_tables_text_is_sorted_ascii_json_and_never_nan() -> None:
    a, b = _entry(_key(1)), _entry(_key(16))
    assert table_text([a, b], PROVENANCE) == table_text([b, a], PROVENANCE)  # same entries, same bytes
    text = table_text([a], {**PROVENANCE, "cpu": "Ryzen \u00e9"})
    assert text.isascii() and "Ryzen \\u00e9" in text
    assert text.index('"command":') < text.index('"cpu": "Ryzen')  # keys sorted: command before cpu
    bad = _entry(_key(2))
    bad.winner_time_us = float("nan")
    with pytest.raises(ValueError):
        table_text([bad], PROVENANCE)
    with pytest.raises(ValueError, match="provenance needs date, torch"):
        table_text([a], {k: v for k, v in PROVENANCE.items() if k not in ("date", "torch")})


def test_refused_entries_are_counted_and_summed_up_past_a_few_lines(caplog) -> None:
    doc = json.loads(_table([_entry(_key(m)) for m in range(1, 10)]))
    for d in doc["entries"][:7]:
        d["config"]["block_m"] = 10 ** 9
    with caplog.at_level(logging.WARNING, logger="inductor_ext.autotune"):
        table = parse_table(json.dumps(doc).encode(), "t.json")
    assert table.refused == 7 and len(table.entries) == 2
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == decision_tables.MAX_REFUSED_LINES + 1
    assert lines[-1] == "ext: decision table t.json: 7 entries refused in all"


def test_a_refused_file_says_so_once_and_names_its_path(tmp_path: Path, caplog) -> None:
    path = tmp_path / "bad.json"
    path.write_text("[]")
    with caplog.at_level(logging.WARNING, logger="inductor_ext.autotune"):
        assert decision_tables.load_table(path) is None and decision_tables.load_table(path) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and str(path) in lines[0], lines


def test_the_tables_digest_follows_their_content() -> None:
    one = TableSet([parse_table(_table([_entry(_key(1))]), "t")])
    same = TableSet([parse_table(_table([_entry(_key(1))]), "t")])
    other = TableSet([parse_table(_table([_entry(_key(1), winner="aten")]), "t")])
    assert one.digest() != other.digest()
    assert TableSet([]).digest() != one.digest() and len(one.digest()) == 64
    assert one.tables[0].digest != same.tables[0].digest or one.digest() == same.digest()


def test_the_first_table_holding_a_key_wins() -> None:
    mine = parse_table(_table([_entry(_key(1), winner="aten")]), "mine")
    package = parse_table(_table([_entry(_key(1)), _entry(_key(2))]), "package")
    tables = TableSet([mine, package])
    assert tables.get(_key(1, form="x"), "AVX512, 2 threads") == (mine.get(_key(1)), "mine")
    assert tables.get(_key(2, form="x"), "AVX512, 2 threads")[1] == "package"
    assert tables.get(_key(2), "AVX2, 2 threads") is None  # another form's table says nothing here
    assert len(tables.entries("AVX512, 2 threads")) == 2


def test_every_shipped_table_is_read_whole() -> None:
    paths = decision_tables.package_table_paths()
    assert paths, "the package ships no decision table (inductor_ext/autotune/tables/)"
    for path in paths:
        table = decision_tables.load_table(path)
        assert table is not None and table.refused == 0, path
        assert table.entries and set(decision_tables.PROVENANCE) <= set(table.provenance)
        assert {e.key.device_name for e in table.entries.values()} == {table.provenance["form"]}, path
        assert all(not e.key.versions and not e.key.template_hash for e in table.entries.values())


# ------------------------------------------------------------------ the lookup order, compiled


class TwoLinears(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(64, 96, bias=False)
        self.b = torch.nn.Linear(96, 48, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x))).sum(dim=1)


@pytest.fixture(scope="module")
def model() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return TwoLinears().eval(), torch.randn(16, 64)


def _compile(model: Any, options: dict[str, Any], monkeypatch, asked: list | None = None) -> list[Any]:
    """Decisions of one cpu-preset compile (no package tables: each test names its own)."""
    monkeypatch.setattr(decision_tables, "package_table_paths", lambda: [])
    if asked is not None:
        real_get = TableSet.get
        monkeypatch.setattr(TableSet, "get", lambda self, key, form: asked.append((key, form)) or real_get(self, key, form))
    torch._dynamo.reset()
    first = len(decision_record.decisions)
    net, x = model
    with torch.no_grad():
        out = torch.compile(net, backend="ext", options={"preset": "cpu", **options})(x)
        torch.testing.assert_close(out, net(x), rtol=1e-5, atol=1e-5)
    return decision_record.decisions[first:]


@pytest.fixture(scope="module")
def keys(model, tmp_path_factory) -> list[tuple[ProblemKey, str]]:
    """The keys and form the two GEMMs are looked up under, from a compile with no table at all."""
    mp = pytest.MonkeyPatch()
    mp.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))  # nothing decided earlier serves
    asked: list = []
    try:
        decisions = _compile(model, {"decision_tables": str(tmp_path_factory.mktemp("none") / "none.json")}, mp, asked)
    finally:
        mp.undo()
    assert [d.reason for d in decisions] == ["model: ATen's default; no table entry of this kind of problem"] * 2
    assert all(form == cpu.host_form() for _, form in asked) and len(asked) == 2
    return asked


def _write(tmp_path: Path, entries: list[Entry]) -> str:
    path = tmp_path / "table.json"
    path.write_text(table_text(entries, PROVENANCE))
    return str(path)


def test_a_table_entry_serves_untimed(model, keys, tmp_path: Path, monkeypatch, caplog) -> None:
    (first, form), (second, _) = keys
    table = _write(tmp_path, [_entry(portable(first, form)), _entry(portable(second, form), winner="aten")])
    with caplog.at_level(logging.DEBUG, logger="torch._inductor"):
        decisions = _compile(model, {"decision_tables": table}, monkeypatch)
    assert [d.reason for d in decisions] == ["table", "table"]
    assert decisions[0].candidates[-1]["family"] == "cpp.gemm" and decisions[1].winner.startswith("mm")
    assert all(c["time_us"] is None for d in decisions for c in d.candidates)  # nothing timed


def test_the_users_cache_comes_before_the_tables(model, keys, tmp_path: Path, monkeypatch) -> None:
    (first, form), (second, _) = keys
    table = _write(tmp_path, [_entry(portable(first, form)), _entry(portable(second, form))])
    cache = tmp_path / "shipped.db"
    cache_transfer.write_cache([_entry(first, winner="aten")], cache)
    decisions = _compile(model, {"decision_tables": table, "autotune_cache": str(cache)}, monkeypatch)
    assert [d.reason for d in decisions] == ["cache", "table"]
    assert decisions[0].winner.startswith("mm")


def test_the_model_serves_where_no_table_entry_does(model, keys, tmp_path: Path, monkeypatch) -> None:
    """Entries of the first GEMM's kind at other row counts, the template twice as fast in each:
    the model serves it for the compile's 16 rows (never measured) with their config."""
    (first, form), _ = keys
    near = [_entry(portable(ProblemKey.from_dict({**first.to_dict(), "shapes": [[m, 64], [64, 96]]}), form))
            for m in (4, 8, 32, 64)]
    decisions = _compile(model, {"decision_tables": _write(tmp_path, near)}, monkeypatch)
    assert decisions[0].reason.startswith("model: template predicted 0.50x ATen's time from 4 table entries")
    assert decisions[0].candidates[-1]["family"] == "cpp.gemm"
    assert decisions[1].reason.startswith("model: ATen's default")  # nothing of its kind nearby


def test_the_model_never_serves_a_predicted_loss(model, keys, tmp_path: Path, monkeypatch) -> None:
    (first, form), _ = keys
    near = [_entry(portable(ProblemKey.from_dict({**first.to_dict(), "shapes": [[m, 64], [64, 96]]}), form),
                   winner="aten", template_us=12.0) for m in (4, 8, 32, 64)]
    decisions = _compile(model, {"decision_tables": _write(tmp_path, near)}, monkeypatch)
    assert decisions[0].reason.startswith("model: ATen's default; template predicted 1.20x")


@pytest.mark.skipif(not mkl_packed_ops.available(), reason="this torch build has no MKL (non-x86 build)")
def test_where_aten_serves_the_nearest_entrys_faster_aten_side_choice_is_served(model, keys, tmp_path: Path,
                                                                                 monkeypatch) -> None:
    """ATen won near the first GEMM (the template 1.2x slower) and MKL's packed sgemm, an ATen-side
    choice this frozen fp32 graph offers, ran in half of mm's time in the nearest entry (20 rows),
    10% slower than mm in the three others: on average (weighted by distance) it still beat mm by
    the margin, and the model serves it, untimed. Where it ran only 3% faster in the nearest (the
    mean under the 5% margin): ATen's default, mm."""
    (first, form), _ = keys

    def near(packed_us: float) -> list[Entry]:
        entries = []
        for m in (4, 8, 20, 64):
            e = _entry(portable(ProblemKey.from_dict({**first.to_dict(), "shapes": [[m, 64], [64, 96]]}), form),
                       winner="aten", template_us=12.0)
            candidates = [*e.candidates, {"name": "ext_mkl_packed_mm", "time_us": packed_us if m == 20 else 11.0,
                                          "policy": None, "error": None}]
            entries.append(dataclasses.replace(e, candidates=candidates))
        return entries

    options = {"template_margin": 0.05}
    decisions = _compile(model, {"decision_tables": _write(tmp_path, near(5.0)), **options}, monkeypatch)
    assert decisions[0].winner == "ext_mkl_packed_mm", decisions[0]
    gain = re.match(r"model: ext_mkl_packed_mm, ([0-9.]+)x faster than mm on average in the 4 nearest table "
                    r"entries that timed it; template predicted 1\.20x", decisions[0].reason)
    assert gain is not None and 1.05 < float(gain.group(1)) < 2.0, decisions[0].reason
    assert all(c["time_us"] is None for c in decisions[0].candidates)  # nothing timed
    torch._dynamo.reset()
    decisions = _compile(model, {"decision_tables": _write(tmp_path, near(9.7)), **options}, monkeypatch)
    assert decisions[0].winner.startswith("mm") and decisions[0].reason.startswith("model: ATen's default"), \
        decisions[0].reason


def test_the_model_never_serves_a_template_its_rule_does_not_pick(model, keys, tmp_path: Path, monkeypatch) -> None:
    """Near entries where the template won (so configs to serve exist) and lost: the mean predicts a
    loss, and ATen serves."""
    (first, form), _ = keys
    near = [_entry(portable(ProblemKey.from_dict({**first.to_dict(), "shapes": [[m, 64], [64, 96]]}), form),
                   winner=winner, template_us=t) for m, winner, t in ((8, "cpp.gemm", 9.0), (32, "cpp.gemm", 9.0),
                                                                    (4, "aten", 20.0), (64, "aten", 20.0))]
    decisions = _compile(model, {"decision_tables": _write(tmp_path, near)}, monkeypatch)
    assert decisions[0].reason.startswith("model: ATen's default; template predicted"), decisions[0].reason
    assert all(c["family"] != "cpp.gemm" for c in decisions[0].candidates)


def test_a_table_edited_in_place_compiles_the_graph_again(model, keys, tmp_path: Path, monkeypatch) -> None:
    """The graph's key holds the tables' digest: Inductor's FX graph cache must not serve a graph
    decided by the table as it was."""
    (first, form), (second, _) = keys
    table = _write(tmp_path, [_entry(portable(first, form), winner="aten"),
                              _entry(portable(second, form), winner="aten")])
    assert [d.winner for d in _compile(model, {"decision_tables": table}, monkeypatch)][0].startswith("mm")
    _write(tmp_path, [_entry(portable(first, form)), _entry(portable(second, form), winner="aten")])
    decisions = _compile(model, {"decision_tables": table}, monkeypatch)
    assert decisions and decisions[0].reason == "table" and decisions[0].candidates[-1]["family"] == "cpp.gemm"


def test_a_corrupted_table_never_fails_a_compile(model, keys, tmp_path: Path, monkeypatch, caplog) -> None:
    (first, form), (second, _) = keys
    doc = json.loads(table_text([_entry(portable(first, form)), _entry(portable(second, form))], PROVENANCE))
    doc["entries"][0]["config"]["block_m"] = 10 ** 9  # what would go into kernel source
    path = tmp_path / "table.json"
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="inductor_ext.autotune"):
        decisions = _compile(model, {"decision_tables": str(path)}, monkeypatch)
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1 and "block_m" in refused[0]
    assert decisions[0].reason.startswith("model:") and decisions[1].reason == "table"


def test_timed_efforts_still_time(model, keys, tmp_path: Path, monkeypatch) -> None:
    """quick/full time as before: a table entry for the very problem does not serve it (the build
    that makes tables times); too few entries of a kind make no model, so nothing is pruned."""
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "cache"))
    (first, form), (second, _) = keys
    table = _write(tmp_path, [_entry(portable(first, form)), _entry(portable(second, form))])
    for effort in ("quick", "full"):
        decisions = _compile(model, {"decision_tables": table, "autotune": effort,
                                     "autotune_cache": str(tmp_path / f"{effort}.db")}, monkeypatch)
        # timed, whatever the timings then said ("benchmark", or a timed rule such as "template over
        # 5% slower timed warm than ATen", which a busy machine can produce): never the table's pick
        assert all(d.reason != "table" and not d.reason.startswith("model") for d in decisions), \
            [d.reason for d in decisions]
        assert all(any(c["time_us"] is not None for c in d.candidates) for d in decisions), decisions


def _near(first: ProblemKey, form: str, winner: str, template_us: float) -> list[Entry]:
    """Entries of the first GEMM's kind at other row counts, all alike: a model with no error."""
    return [_entry(portable(ProblemKey.from_dict({**first.to_dict(), "shapes": [[m, 64], [64, 96]]}), form),
                   winner=winner, template_us=template_us) for m in (4, 8, 32, 64)]


def test_quick_times_no_template_where_the_model_says_none_would_win(model, keys, tmp_path: Path,
                                                                     monkeypatch) -> None:
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "cache"))
    (first, form), _ = keys
    table = _write(tmp_path, _near(first, form, "aten", 20.0))
    decisions = _compile(model, {"decision_tables": table, "autotune": "quick"}, monkeypatch)
    assert all(c["family"] == "aten" for c in decisions[0].candidates), decisions[0].candidates
    assert decisions[0].reason.startswith(("model: no template timed, none would win: template predicted 2.00x",
                                           "benchmark")), decisions[0].reason
    assert any(c["family"] == "cpp.gemm" for c in decisions[1].candidates)  # no entry of its kind: timed as before


def test_quick_times_the_configs_that_won_nearby_and_the_default(model, keys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "cache"))
    (first, form), _ = keys
    table = _write(tmp_path, _near(first, form, "cpp.gemm", 5.0))
    decisions = _compile(model, {"decision_tables": table, "autotune": "quick"}, monkeypatch)
    timed = [c for c in decisions[0].candidates if c["family"] == "cpp.gemm"]
    assert timed[0]["policy"] == "model" and timed[0]["config_dict"] == GEMM_CONFIG, timed
    assert [c["policy"] for c in timed[1:]] in ([], ["default"])  # the family's default, unless it is the same
    # timed, whatever the timings then said ("benchmark", or a timed rule such as "template over 5%
    # slower timed warm than ATen", which two busy CI workers produced): never the table's pick
    assert decisions[0].reason != "table" and not decisions[0].reason.startswith("model"), decisions[0].reason
    without = _compile(model, {"decision_tables": str(tmp_path / "none.json"), "autotune": "quick",
                               "autotune_cache": str(tmp_path / "other.db")}, monkeypatch)
    assert all(c["policy"] != "model" for c in without[0].candidates)


# ------------------------------------------------------------------ the script that builds tables


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "build_decision_tables.py"), *args],
                          capture_output=True, text=True, timeout=120)


def test_the_build_script_plans_the_grid_it_is_asked_for() -> None:
    done = _script("--out", "t.json", "--styles", "llama,bert", "--widths", "768", "--tokens", "1,16",
                   "--dtypes", "float32", "--cache-slots", "1024", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["llama-768 float32 1 tokens", "llama-768 float32 16 tokens",
                                        "llama-768 float32 decode over 1024 static cache slots",
                                        "bert-768 float32 1 tokens", "bert-768 float32 16 tokens"]  # an encoder: no cache
    default = _script("--out", "t.json", "--styles", "llama", "--widths", "768", "--tokens", "",
                      "--dtypes", "float32", "--dry-run")
    assert default.stdout.splitlines() == [f"llama-768 float32 decode over {n} static cache slots" for n in (256, 1024, 4096)]


def test_a_static_cache_unit_is_one_decode_step_with_the_mask_generate_passes(monkeypatch) -> None:
    """What the build tunes for ``--cache-slots``: one new token's forward over a static cache of
    that many slots, its 4-D boolean mask an input (as generate() passes it: the same problem key)."""
    spec = importlib.util.spec_from_file_location("build_decision_tables", ROOT / "scripts" / "build_decision_tables.py")
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)  # its dataclasses look their module up
    spec.loader.exec_module(script)
    unit = script.Unit("llama", 768, "float32", 1, slots=256)
    space: dict[str, Any] = {}
    exec(compile(unit.model_text(), "unit.py", "exec"), space)  # noqa: S102  (the script's own text)
    ids, position, mask = space["inputs"]()
    assert ids.shape == (1, 1) and mask.shape == (1, 1, 1, 256) and mask.dtype == torch.bool and mask.is_contiguous()
    assert int(mask.sum()) == int(position) + 1  # the slots written so far, this one included
    step = space["model"]()
    with torch.no_grad():
        logits = step(ids, position, mask)
    assert logits.shape == (1, 1, 32000)
    assert step.cache.layers[0].keys.shape[-2] == 256  # attention reads the whole static cache


@pytest.mark.parametrize("args, why", [
    (("--styles", "llama,t5"), "'t5' is not one of"),
    (("--dtypes", "float16"), "'float16' is not one of"),
    (("--widths", "12345"), "no style has any of those widths"),
    (("--tokens", "1,x"), "invalid literal"),
])
def test_the_build_script_says_what_is_wrong_in_one_line(args: tuple[str, ...], why: str) -> None:
    done = _script("--out", "t.json", "--dry-run", *args)
    assert done.returncode == 2 and why in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_forced_family_is_timed_and_served_under_the_untimed_default(model, keys, tmp_path: Path, monkeypatch) -> None:
    """force_template (debugging) still forces under autotune="model": the forced family's
    candidates are timed as under "quick", and its fastest serves."""
    decisions = _compile(model, {"force_template": "cpp.gemm", "decision_tables": str(tmp_path / "none.json")},
                         monkeypatch)
    assert [d.reason for d in decisions] == ["force_template=cpp.gemm"] * 2
    assert all(any(c["family"] == "cpp.gemm" and c["time_us"] for c in d.candidates) for d in decisions)


def test_an_update_keeps_the_tables_entries_and_a_replace_measures_them_anew(monkeypatch) -> None:
    spec = importlib.util.spec_from_file_location("build_decision_tables", ROOT / "scripts" / "build_decision_tables.py")
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)  # its dataclasses look their module up
    spec.loader.exec_module(script)
    entries = {"a": "old"}
    assert script.merge(entries, "a", "new", replace=False) is False and entries == {"a": "old"}
    assert script.merge(entries, "a", "new", replace=True) is False and entries == {"a": "new"}
    assert script.merge(entries, "b", "b", replace=False) is True and entries == {"a": "new", "b": "b"}
    done = _script("--out", "t.json", "--replace", "--dry-run")
    assert done.returncode == 2 and "give both" in done.stderr and "Traceback" not in done.stderr, done.stderr
