"""Tests for inductor_ext.autotune.cache: round trips, concurrency, corruption, merging."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from inductor_ext.autotune.cache import (
    SCHEMA_VERSION,
    AutotuneCache,
    AutotuneCacheWarning,
    Entry,
    ProblemKey,
    default_cache_path,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def make_key(m: int = 128, **overrides: object) -> ProblemKey:
    fields = dict(
        op="mm",
        shapes=((m, 256), (256, 64)),
        strides=((256, 1), (64, 1)),
        dtypes=("bfloat16", "bfloat16"),
        device_name="NVIDIA H100 80GB HBM3",
        arch="sm_90a",
        versions=(("torch", "2.15.0"), ("triton", "3.9.0")),
        template_hash="0123456789abcdef",
        preset="default",
    )
    fields.update(overrides)
    return ProblemKey(**fields)  # type: ignore[arg-type]


def make_entry(key: ProblemKey | None = None, winner: str = "triton_mm_0", created: float = 1000.0) -> Entry:
    return Entry(
        key=key or make_key(),
        winner=winner,
        config={"name": "mm"} if winner == "aten" else {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "tiles": [1, 2]},
        winner_time_us=10.5,
        aten_time_us=21.0,
        candidates=[
            {"name": "aten", "time_us": 21.0, "policy": None, "error": None},
            {"name": winner, "time_us": 10.5, "policy": "top-k", "error": None},
            {"name": "triton_mm_1", "time_us": None, "policy": "top-k", "error": "out of resources"},
        ],
        reason="benchmark",
        created=created,
    )


def our_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, AutotuneCacheWarning)]


@pytest.fixture(autouse=True)
def fake_winners(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests name winners freely ("a", "t_ours"): the validator accepts them here as it
    would a template family's name (it refuses them elsewhere: test_cache_validation.py)."""
    from inductor_ext.autotune import cache_entry

    real = cache_entry.known_winner
    monkeypatch.setattr(cache_entry, "known_winner", lambda name: real(name) or name.replace("_", "").isalnum())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "autotune.db"


# ------------------------------------------------------------------- keys and paths


def test_default_cache_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_path() == tmp_path / "c" / "autotune.db"
    monkeypatch.delenv("INDUCTOR_EXT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "inductor_ext" / "autotune.db"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_path() == tmp_path / "home" / ".cache" / "inductor_ext" / "autotune.db"


def test_key_is_normalised_and_digest_is_pinned() -> None:
    key = make_key()
    same = make_key(
        shapes=[[128, 256], [256, 64]],
        strides=[[256, 1], [64, 1]],
        dtypes=["bfloat16", "bfloat16"],
        versions={"triton": "3.9.0", "torch": "2.15.0"},  # order must not matter
    )
    assert same == key and hash(same) == hash(key) and same.digest() == key.digest()
    # Pinned: if this changes, every user's cache silently misses -> bump SCHEMA_VERSION.
    assert key.canonical_json() == (
        '{"arch":"sm_90a","device_name":"NVIDIA H100 80GB HBM3","dtypes":["bfloat16","bfloat16"],'
        '"op":"mm","preset":"default","shapes":[[128,256],[256,64]],"strides":[[256,1],[64,1]],'
        '"template_hash":"0123456789abcdef","versions":[["torch","2.15.0"],["triton","3.9.0"]]}'
    )
    assert key.digest() == "2342648695359be25254a898ce44f41e9ff5d21ffe227901836edc51dbc59e35"
    assert ProblemKey.from_dict(json.loads(key.canonical_json())) == key
    assert key.describe() == "mm 128x64x256 bf16"
    batched = make_key(op="bmm", shapes=((4, 128, 256), (4, 256, 64)), strides=((32768, 256, 1), (16384, 64, 1)))
    assert batched.describe() == "bmm 4x128x64x256 bf16"  # batch, then M x N x K
    with pytest.raises(TypeError):
        make_key(shapes=((1.5, 2),))


def test_speedup_vs_aten() -> None:
    assert make_entry().speedup_vs_aten == pytest.approx(2.0)
    assert replace(make_entry(), aten_time_us=None).speedup_vs_aten is None
    assert replace(make_entry(), winner_time_us=0.0, reason="policy-only").speedup_vs_aten is None


# ---------------------------------------------------------------------- round trips


def test_put_get_round_trip_and_counters(db: Path) -> None:
    entry = make_entry()
    with AutotuneCache(db) as cache:
        assert cache.get(entry.key) is None
        cache.put(entry)
        assert cache.get(entry.key) == entry
        assert (cache.hits, cache.misses, cache.puts) == (1, 1, 1)
        assert len(cache) == 1 and cache.entries() == [entry]
    with AutotuneCache(db) as reopened:  # persisted, and the device defaulted from the key
        got = reopened.get(entry.key)
        assert got == entry and got is not None and got.device_name == "NVIDIA H100 80GB HBM3"
        assert not reopened.in_memory


@pytest.mark.parametrize(
    "change",
    [
        {"arch": "sm_100a"},
        {"versions": (("torch", "2.15.1"), ("triton", "3.9.0"))},
        {"versions": (("torch", "2.15.0"), ("triton", "3.9.0"), ("helion", "0.1"))},
        {"template_hash": "fedcba9876543210"},
        {"preset": "max-autotune"},
        {"device_name": "NVIDIA H200"},
        {"dtypes": ("float16", "float16")},
        {"strides": ((1, 128), (64, 1))},
    ],
)
def test_miss_when_any_key_field_differs(db: Path, change: dict[str, object]) -> None:
    with AutotuneCache(db) as cache:
        cache.put(make_entry())
        assert cache.get(make_key(**change)) is None
        assert cache.get(make_key()) is not None
        assert (cache.hits, cache.misses) == (1, 1)


def test_invalid_entry_is_rejected_before_writing(db: Path) -> None:
    with AutotuneCache(db) as cache:
        with pytest.raises(ValueError, match="reason"):
            cache.put(replace(make_entry(), reason="because"))
        with pytest.raises(ValueError, match="JSON"):
            cache.put(replace(make_entry(), config={"fn": object()}))
        assert len(cache) == 0 and cache.puts == 0


def test_an_entry_gives_one_of_the_known_reasons() -> None:
    """``reason`` says how the winner was chosen and readers branch on it: only benchmark, cache,
    policy-only or "fallback: <why>" are stored, and the error names the bad value and those."""
    for ok in ("benchmark", "cache", "policy-only", "fallback: no template", "fallback:"):
        replace(make_entry(), reason=ok).validate()
    for bad in ("because", "Benchmark", "cache ", "policy", "fall back: x", " fallback: x", "", None, 3):
        with pytest.raises(ValueError) as refused:
            replace(make_entry(), reason=bad).validate()
        assert str(refused.value) == ("invalid autotune Entry: reason must be one of ('benchmark', 'cache', "
                                      f"'policy-only') or 'fallback: ...', got {bad!r}")


# ---------------------------------------------------------------------- concurrency

WORKER = textwrap.dedent(
    """
    import sys, time, warnings
    from pathlib import Path
    from inductor_ext.autotune.cache import AutotuneCache, AutotuneCacheWarning, Entry, ProblemKey
    warnings.simplefilter("error", AutotuneCacheWarning)  # a skipped (locked) put must fail the test
    path, wid, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])

    def key(i):
        return ProblemKey(op="mm", shapes=((i, 64), (64, 32)), strides=((64, 1), (32, 1)),
                          dtypes=("bfloat16", "bfloat16"), device_name="dev", arch="sm_90a",
                          versions={"torch": "2.15.0"}, template_hash="h", preset="default")

    cache = AutotuneCache(path)
    while not go.exists():  # start both writers together
        time.sleep(0.002)
    for i in range(200):
        cache.put(Entry(key(1 + wid * 1000 + i), winner="aten", config={"name": f"w{wid}_{i}"}, winner_time_us=1.0))
        if i % 4 == 0:  # 50 keys both processes write
            cache.put(Entry(key(100000 + i), winner="aten", config={"name": f"w{wid}"}, winner_time_us=2.0))
            assert cache.get(key(1 + wid * 1000 + i)) is not None
    assert cache.puts == 250 and not cache.in_memory
    cache.close()
    """
)


def test_two_processes_write_one_file(db: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(db), str(w), str(go)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for w in (0, 1)
    ]
    time.sleep(0.5)  # let both import and open the file before the race starts
    go.touch()
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs

    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with AutotuneCache(db) as cache:
            entries = cache.entries()
    assert our_warnings(record) == []
    assert len(entries) == 2 * 200 + 50
    winners = {e.config["name"] for e in entries}
    assert {f"w{w}_{i}" for w in (0, 1) for i in range(200)} <= winners
    shared = [e for e in entries if e.key.shapes[0][0] >= 100000]
    assert len(shared) == 50 and all(e.config["name"] in ("w0", "w1") for e in shared)


# ----------------------------------------------------------------- damaged files


def _assert_degrades_to_memory(db: Path) -> None:
    before = db.read_bytes()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cache = AutotuneCache(db)
        assert cache.get(make_key()) is None
        cache.put(make_entry())  # must not raise
        assert cache.get(make_key()) == make_entry()  # served from memory
        assert cache.get(make_key(m=7)) is None
        assert len(cache) == 1
        cache.close()
    msgs = our_warnings(record)
    assert len(msgs) == 1, msgs
    assert str(db) in msgs[0] and "\n" not in msgs[0]
    assert cache.in_memory
    assert db.read_bytes() == before  # the bad file is left untouched for inspection


def test_random_bytes_file(db: Path) -> None:
    db.write_bytes(os.urandom(64 * 1024))
    _assert_degrades_to_memory(db)


def _truncate(data: bytes, keep: float) -> bytes:
    return data[: int(len(data) * keep)]


def _zero_middle_page(data: bytes) -> bytes:
    page = int.from_bytes(data[16:18], "big")  # page size from the SQLite header
    mid = (len(data) // page // 2) * page
    return data[:mid] + bytes(page) + data[mid + page :]


@pytest.mark.parametrize(
    "damage",
    [lambda d: _truncate(d, 0.5), lambda d: _truncate(d, 0.9), lambda d: _truncate(d, 0.01), _zero_middle_page],
    ids=["truncated-half", "truncated-tail", "truncated-header", "zeroed-page"],
)
def test_damaged_real_file(db: Path, damage) -> None:
    with AutotuneCache(db) as cache:
        for m in range(1, 301):
            cache.put(make_entry(make_key(m=m)))
    assert not Path(str(db) + "-wal").exists()  # everything checkpointed into the main file
    db.write_bytes(damage(db.read_bytes()))
    _assert_degrades_to_memory(db)
    with pytest.warns(AutotuneCacheWarning), AutotuneCache(db) as cache:
        # Even rows on pages that survived must miss: the file as a whole is untrusted.
        assert [m for m in range(1, 301) if cache.get(make_key(m=m)) is not None] == []


def test_every_zeroed_page_is_detected_on_open(db: Path) -> None:
    # Some pages (e.g. one index leaf) can be destroyed while most lookups still work;
    # the file must be distrusted as a whole, whichever page it is.
    with AutotuneCache(db) as cache:
        for m in range(1, 301):
            cache.put(make_entry(make_key(m=m)))
    data = db.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    for p in range(1, len(data) // page):  # page 0 holds the header: covered above
        db.write_bytes(data[: p * page] + bytes(page) + data[(p + 1) * page :])
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            with AutotuneCache(db) as cache:
                hits = [m for m in (1, 100, 200, 300) if cache.get(make_key(m=m)) is not None]
                assert cache.in_memory and hits == [] and cache.entries() == [], f"page {p}"
        assert len(our_warnings(record)) == 1, f"page {p}"


class _DamagedConnection:
    """Stands in for a connection whose file got corrupted after it was opened."""

    in_transaction = False

    def execute(self, *args: object) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    def close(self) -> None:
        pass


def test_damage_found_after_open_switches_to_memory(db: Path) -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with AutotuneCache(db) as cache:
            cache.put(make_entry(make_key(m=1)))
            cache._conn = _DamagedConnection()  # type: ignore[assignment]
            assert cache.get(make_key(m=1)) is None  # the file is no longer trusted
            cache.put(make_entry(make_key(m=2)))
            assert cache.get(make_key(m=2)) == make_entry(make_key(m=2))
            assert cache.in_memory and cache.puts == 2
    msgs = our_warnings(record)
    assert len(msgs) == 1 and "malformed" in msgs[0], msgs


def test_file_from_other_schema_version(db: Path) -> None:
    with AutotuneCache(db) as cache:
        cache.put(make_entry())
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    _assert_degrades_to_memory(db)
    with sqlite3.connect(db) as raw:  # a newer inductor_ext's file keeps its version
        assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION + 1,)]


def test_foreign_sqlite_file(db: Path) -> None:
    with sqlite3.connect(db) as raw:
        raw.execute("CREATE TABLE something_else (x)")
    _assert_degrades_to_memory(db)


@pytest.mark.parametrize(
    "column, value, why",
    [
        ("schema_version", SCHEMA_VERSION + 1, "schema version"),
        ("entry_json", "{not json", "Expecting"),
        ("entry_json", '{"winner": "x"}', "fields"),
        ("key_json", "[1, 2", "Expecting"),
    ],
)
def test_bad_row_is_ignored_with_one_warning(db: Path, column: str, value: object, why: str) -> None:
    bad, good = make_entry(make_key(m=1)), make_entry(make_key(m=2))
    with AutotuneCache(db) as cache:
        cache.put(bad)
        cache.put(good)
    with sqlite3.connect(db) as raw:
        raw.execute(f"UPDATE entries SET {column} = ? WHERE digest = ?", (value, bad.key.digest()))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with AutotuneCache(db) as cache:
            assert cache.get(bad.key) is None
            assert cache.get(bad.key) is None
            assert cache.get(good.key) == good
            assert cache.entries() == [good] and len(cache) == 1
            assert not cache.in_memory
            cache.put(bad)  # a put replaces the unusable row
            assert cache.get(bad.key) == bad
    msgs = our_warnings(record)
    assert len(msgs) == 1 and why in msgs[0] and str(db) in msgs[0], msgs


def test_row_whose_key_does_not_match_is_ignored(db: Path) -> None:
    a, b = make_entry(make_key(m=1), winner="a"), make_entry(make_key(m=2), winner="b")
    with AutotuneCache(db) as cache:
        cache.put(a)
        cache.put(b)
    with sqlite3.connect(db) as raw:  # tamper: a's row now claims to be b's problem
        raw.execute("UPDATE entries SET key_json = ? WHERE digest = ?", (b.key.canonical_json(), a.key.digest()))
    with pytest.warns(AutotuneCacheWarning, match="digest"):
        with AutotuneCache(db) as cache:
            assert cache.get(a.key) is None
            assert cache.get(b.key) == b
            assert cache.entries() == [b]  # the tampered row must not pose as b a second time


def test_digest_collision_is_a_miss(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import inductor_ext.autotune.cache as cache_module

    monkeypatch.setattr(cache_module.ProblemKey, "digest", lambda self: "0" * 64)  # every key collides
    a, b = make_entry(make_key(m=1), winner="a"), make_key(m=2)
    with pytest.warns(AutotuneCacheWarning, match="collision"):
        with AutotuneCache(db) as cache:
            cache.put(a)
            assert cache.get(b) is None
            assert cache.get(a.key) == a


# ------------------------------------------------------------------ merge / export


def test_merge_newer_wins_and_reports_conflicts(tmp_path: Path) -> None:
    k1, k2, k3, k4 = (make_key(m=m) for m in (1, 2, 3, 4))
    with AutotuneCache(tmp_path / "ours.db") as ours, AutotuneCache(tmp_path / "theirs.db") as theirs:
        ours.put(make_entry(k1, winner="aten", created=100))
        ours.put(make_entry(k2, winner="t_ours", created=200))
        ours.put(make_entry(k4, winner="same", created=100))
        theirs.put(make_entry(k1, winner="t_theirs", created=150))  # newer, differs -> replace
        theirs.put(make_entry(k2, winner="t_theirs", created=100))  # older, differs -> keep
        theirs.put(make_entry(k3, winner="t_new", created=50))  # only theirs -> add
        theirs.put(make_entry(k4, winner="same", created=300))  # newer, same winner
    with AutotuneCache(tmp_path / "ours.db") as ours:
        report = ours.merge_from(tmp_path / "theirs.db")
        assert (report.added, report.replaced, report.kept, report.skipped_invalid) == (1, 2, 1, 0)
        conflicts = {(c.problem, c.ours, c.theirs, c.kept) for c in report.conflicts}
        assert conflicts == {
            (k1.describe(), "aten", "t_theirs", "theirs"),
            (k2.describe(), "t_ours", "t_theirs", "ours"),
        }
        assert [ours.get(k).winner for k in (k1, k2, k3, k4)] == ["t_theirs", "t_ours", "t_new", "same"]
        assert ours.get(k4).created == 300
        assert "2 conflicts" in str(report)
        with pytest.raises(FileNotFoundError):
            ours.merge_from(tmp_path / "missing.db")


def test_export_import_round_trip(tmp_path: Path) -> None:
    src = AutotuneCache(tmp_path / "src.db")
    for m in (300, 5, 77):  # inserted out of order on purpose
        src.put(make_entry(make_key(m=m), winner=f"t{m}", created=1000.0 + m))
    src.put(replace(make_entry(make_key(m=9), winner="aten"), aten_time_us=None, reason="fallback: no template"))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    src.export_json(a)
    src.export_json(b)
    assert a.read_bytes() == b.read_bytes()
    text = a.read_text()
    doc = json.loads(text)
    assert text == json.dumps(doc, sort_keys=True, indent=2) + "\n"  # sorted, indented
    assert [e["key"]["shapes"][0][0] for e in doc["entries"]] == [5, 9, 77, 300]

    with AutotuneCache(tmp_path / "dst.db") as dst:
        report = dst.import_json(a)
        assert report.added == 4 and not report.conflicts
        assert dst.entries() == src.entries()
        dst.export_json(tmp_path / "c.json")
    assert (tmp_path / "c.json").read_bytes() == a.read_bytes()
    src.close()


def test_read_json_skips_each_refused_entry_saying_which_and_counts_them(tmp_path: Path) -> None:
    from inductor_ext.autotune.cache_json import read_json, write_json

    good = [make_entry(make_key(m=m)) for m in (1, 2, 3)]
    write_json(good, tmp_path / "x.json")
    doc = json.loads((tmp_path / "x.json").read_text())
    for i in (0, 2):
        doc["entries"][i]["winner"] = "os.system"
    (tmp_path / "x.json").write_text(json.dumps(doc))
    said: list[tuple[str, str]] = []
    entries, skipped = read_json(tmp_path / "x.json", lambda key, line: said.append((key, line)))
    assert skipped == 2 and [e.key for e in entries] == [good[1].key]
    assert [key for key, _ in said] == [f"import {tmp_path / 'x.json'} 0", f"import {tmp_path / 'x.json'} 2"]
    assert all(f"({good[i].key.describe()})" in line and "winner" in line for (_, line), i in zip(said, (0, 2)))


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "expected"),
        (lambda d: d.update(schema_version=True), "expected"),  # True == 1, but is no version
        (lambda d: d.pop("format"), "x.json: expected an object with format, schema_version, entries$"),
        (lambda d: d.update(format="other"), "x.json: format 'other' v1, expected 'inductor_ext.autotune' v1$"),
        (lambda d: d.update(entries={}), "x.json: entries must be a list$"),
        (lambda d: d["entries"].append(d["entries"][0]), "duplicate"),
    ],
)
def test_import_of_a_malformed_file_is_all_or_nothing(tmp_path: Path, mutate, match: str) -> None:
    with AutotuneCache(":memory:") as src:
        for m in (1, 2):
            src.put(make_entry(make_key(m=m)))
        src.export_json(tmp_path / "x.json")
    doc = json.loads((tmp_path / "x.json").read_text())
    mutate(doc)
    (tmp_path / "x.json").write_text(json.dumps(doc))
    with AutotuneCache(tmp_path / "dst.db") as dst:
        with pytest.raises(ValueError, match=match):
            dst.import_json(tmp_path / "x.json")
        assert len(dst) == 0
    (tmp_path / "y.json").write_text("{truncated")
    with AutotuneCache(":memory:") as dst, pytest.raises(ValueError, match="not JSON"):
        dst.import_json(tmp_path / "y.json")


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda e: e.update(winner_time_us="fast"), "winner_time_us"),
        (lambda e: e["key"].pop("arch"), "fields"),
        (lambda e: e.update(surprise=1), "fields"),
    ],
)
def test_import_skips_an_invalid_entry_with_one_line(tmp_path: Path, mutate, match: str) -> None:
    with AutotuneCache(":memory:") as src:
        for m in (1, 2):
            src.put(make_entry(make_key(m=m)))
        src.export_json(tmp_path / "x.json")
    doc = json.loads((tmp_path / "x.json").read_text())
    mutate(doc["entries"][1])
    (tmp_path / "x.json").write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as record, AutotuneCache(tmp_path / "dst.db") as dst:
        warnings.simplefilter("always")
        report = dst.import_json(tmp_path / "x.json")
        assert (report.added, report.skipped_invalid) == (1, 1) and len(dst) == 1
    (line,) = our_warnings(record)
    assert "entries[1]" in line and re.search(match, line), line


def test_machine_facts_round_trip_and_a_file_from_before_facts_gains_the_table(db: Path) -> None:
    cache = AutotuneCache(db)
    assert cache.get_fact("probe:x") is None
    cache.put_fact("probe:x", "1")
    cache.put_fact("probe:x", "2")  # the last put wins
    cache.close()
    assert AutotuneCache(db).get_fact("probe:x") == "2"
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE facts")  # what a cache written before facts were kept looks like
    conn.commit()
    conn.close()
    older = AutotuneCache(db)
    assert older.get_fact("probe:x") is None and not older.in_memory
    older.put_fact("probe:x", "3")
    assert older.get_fact("probe:x") == "3"


def test_state_moves_with_every_change_and_only_then(tmp_path: Path) -> None:
    with AutotuneCache(tmp_path / "c.db") as cache:
        seen = [cache.state()]
        assert cache.state() == seen[0]  # reads do not move it
        cache.put(make_entry(created=1000.0))
        seen.append(cache.state())
        cache.put(make_entry(make_key(m=64), created=1001.0))  # another key
        seen.append(cache.state())
        cache.put(make_entry(make_key(m=64), winner="triton_mm_1", created=1002.0))  # replaces the last one
        seen.append(cache.state())
        cache.get(make_key())
        assert cache.state() == seen[-1]
    with AutotuneCache(tmp_path / "c.db") as reopened:  # another process sees the same file
        assert reopened.state() == seen[-1]
    assert len(set(seen)) == len(seen), seen


def test_checkpoint_leaves_every_entry_in_the_file_itself(tmp_path: Path) -> None:
    import shutil

    cache = AutotuneCache(tmp_path / "built.db")
    for m in (16, 32, 64):
        cache.put(make_entry(make_key(m=m)))
    cache.checkpoint()  # the connection stays open, as in a process that never closes it
    shutil.copy(tmp_path / "built.db", tmp_path / "shipped.db")  # the -wal file stays behind
    with AutotuneCache(tmp_path / "shipped.db") as shipped:
        assert len(shipped) == 3
    cache.close()
