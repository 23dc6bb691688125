"""A cache built on one machine and shipped to others (issue 46): read, never written; all of it
data; a graph's key that sees every edit; tune commands that say what happened.

These machines run as root, and root ignores file modes: every check of a read-only folder runs
its process with the override dropped (``setpriv --bounding-set -dac_override,...``), or it
would pass without testing anything.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from _script_runner import TESTS, run_json_script
from inductor_ext.autotune import cache_entry, cache_layers
from inductor_ext.autotune.cache import AutotuneCache, Entry, ProblemKey, check_schema
from inductor_ext.autotune.cache_entry import BadRow, bounded_json, decode_row, row_values

NO_OVERRIDE = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]


def _setpriv_works() -> bool:
    return shutil.which("setpriv") is not None and subprocess.run(
        [*NO_OVERRIDE, "true"], capture_output=True).returncode == 0


needs_setpriv = pytest.mark.skipif(not _setpriv_works(), reason="the read-only checks need util-linux's setpriv "
                                   "to drop root's file-mode override (apt-get install util-linux)")


def _script(*args: str, env: dict[str, str], prefix: list[str] | None = None) -> dict:
    path = os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([*(prefix or []), sys.executable, str(TESTS / "_shipped_cache_script.py"), *args],
                          env={**os.environ, **env, "PYTHONPATH": path}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """A cache tuned here (quick) for the script's layer, as `tune build` would ship it."""
    root = tmp_path_factory.mktemp("built")
    env = {"INDUCTOR_EXT_CACHE_DIR": str(root / "ext"), "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor")}
    result = _script("quick", str(root / "tuned.db"), env=env)
    # timed (a reason may add that the OS disturbed one candidate's timing)
    # ("config within margin ... of its default": a timed rule kept the default, e.g. when streamed)
    assert result["decisions"] and all(d["reason"].startswith("benchmark") or " within margin " in d["reason"]
                                       for d in result["decisions"]), result
    return {"db": root / "tuned.db", "decisions": result["decisions"], "root": root}


# ------------------------------------------------------------------ a read-only shipped cache


def _kind(choice_name: str) -> str:
    return re.sub(r"_\d+$", "", choice_name)  # Inductor numbers its template choices per process


@needs_setpriv
def test_a_cache_in_a_read_only_folder_serves_every_decision_and_is_never_written(built, tmp_path):
    shipped = tmp_path / "image" / "autotune.db"
    shipped.parent.mkdir()
    shutil.copy(built["db"], shipped)
    shipped.chmod(0o444)
    shipped.parent.chmod(0o555)
    before = (shipped.read_bytes(), shipped.stat().st_mtime_ns, sorted(os.listdir(shipped.parent)))
    env = {"INDUCTOR_EXT_CACHE_DIR": str(tmp_path / "user"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    try:
        for autotune in ("cache-only", "quick"):  # quick too: its writes go to the user's own cache
            got = _script(autotune, str(shipped), env=env, prefix=NO_OVERRIDE)
            assert [d["reason"] for d in got["decisions"]] == ["cache"] * len(built["decisions"]), got
            assert [_kind(d["winner"]) for d in got["decisions"]] == [_kind(d["winner"]) for d in built["decisions"]]
            assert got["warnings"] == [] and got["max_err"] < 1e-5, got
        after = (shipped.read_bytes(), shipped.stat().st_mtime_ns, sorted(os.listdir(shipped.parent)))
        assert after == before  # not a byte, not the mtime, no -wal or -shm beside it
    finally:
        shipped.parent.chmod(0o755)


# ------------------------------------------------------------------ hostile shipped files


def _variant(built: dict, folder: Path, name: str, sql: list[str]) -> Path:
    path = folder / f"{name}.db"
    shutil.copy(built["db"], path)
    with sqlite3.connect(path) as conn:
        for stmt in sql:
            conn.execute(stmt)
    conn.close()
    return path


def _first_row_update(column: str, value: str) -> str:
    return f"UPDATE entries SET {column} = {value} WHERE rowid = (SELECT min(rowid) FROM entries)"


HOSTILE = {
    # SQL in the file: would run on ext's writes (quick), and abort them
    "trigger": ("quick", ["CREATE TRIGGER t BEFORE INSERT ON entries BEGIN "
                          "INSERT OR REPLACE INTO facts VALUES ('canary', 'fired'); SELECT RAISE(ABORT, 'x'); END",
                          "CREATE TRIGGER f AFTER INSERT ON facts WHEN new.key != 'canary' BEGIN "
                          "INSERT OR REPLACE INTO facts VALUES ('canary', 'fired'); END"]),
    "check": ("quick", ["ALTER TABLE entries ADD COLUMN c INTEGER CHECK (c IS NOT NULL) DEFAULT 1"]),
    # data in the file: fatal to the reader before
    "facts": ("cache-only", ["INSERT OR REPLACE INTO facts SELECT key, '[]' FROM facts WHERE rowid % 2 = 1",
                             "INSERT OR REPLACE INTO facts SELECT key, '" + "[" * 5000 + "]" * 5000 + "' FROM facts "
                             "WHERE rowid % 2 = 0"]),
    "deep": ("cache-only", [_first_row_update("entry_json", "'" + "[" * 100_000 + "]" * 100_000 + "'")]),
    "created": ("cache-only", [_first_row_update("created", "9" * 400)]),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_shipped_file_never_fails_the_compile_and_its_sql_never_runs(built, tmp_path, name):
    autotune, sql = HOSTILE[name]
    path = _variant(built, tmp_path, name, sql)
    env = {"INDUCTOR_EXT_CACHE_DIR": str(tmp_path / "user"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    if name == "facts":  # a shipped file's facts are never read; the user's own cache's are, and checked
        (tmp_path / "user").mkdir(mode=0o700)
        shutil.copy(path, tmp_path / "user" / "autotune.db")
    got = _script(autotune, str(path), env=env)
    assert got["max_err"] < 1e-5 and got["decisions"], got
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM facts WHERE key = 'canary'").fetchone() == (0,)
    conn.close()
    if name in ("trigger", "check"):  # the file is refused whole, with one line naming why
        assert any(("trigger" in w or "CHECK" in w) and str(path) in w for w in got["warnings"]), got["warnings"]


def test_schema_check_refuses_every_object_ext_never_makes(built, tmp_path):
    extras = ["CREATE VIEW v AS SELECT 1", "CREATE INDEX i ON entries (created)",
              "CREATE INDEX j ON entries (lower(device_name))", "CREATE TABLE other (x)",
              "CREATE TRIGGER t AFTER DELETE ON entries BEGIN SELECT 1; END"]
    for i, stmt in enumerate(extras):
        path = _variant(built, tmp_path, f"x{i}", [stmt])
        with sqlite3.connect(path) as conn, pytest.raises(Exception, match="never makes|not the one"):
            check_schema(conn)
        conn.close()
    with sqlite3.connect(built["db"]) as conn:
        assert check_schema(conn) is False  # ext's own file passes
    conn.close()


def _key(m: int = 2, **overrides: object) -> ProblemKey:
    fields = dict(op="mm", shapes=((m, 24), (24, 16)), strides=((24, 1), (16, 1)), dtypes=("float32", "float32"),
                  device_name="cpu test", arch="cpu", preset="cpu")
    fields.update(overrides)
    return ProblemKey(**fields)  # type: ignore[arg-type]


def _row(**overrides: object) -> tuple:
    entry = Entry(_key(), winner="aten", config={"name": "mm"}, winner_time_us=1.0, aten_time_us=1.0, created=1000.0)
    digest, key_json, version, _, _, entry_json = row_values(entry)
    body = json.loads(entry_json)
    body.update(overrides)
    return digest, key_json, version, json.dumps(body)


@pytest.mark.parametrize("overrides, why", [
    ({"winner": "__import__('os')"}, "neither 'aten' nor a template family"),
    ({"winner": "nosuch.family"}, "neither 'aten' nor a template family"),
    ({"config": {"name": "mm", "block_m": 4}}, "ATen winner's config holds only"),
    ({"reason": "fallback: " + "x" * 5_000_000}, "characters long"),
    ({"candidates": [{"name": "c", "time_us": 1.0, "policy": None, "error": None}] * 200_000}, "characters long"),
    ({"created": 1e308}, "created"),
    ({"created": 10**400}, "created"),
    ({"created": 4_000_000_000.0}, "in the future"),
    ({"winner_time_us": 2**200}, "winner_time_us"),
    ({"device_name": "cpu\x1b[2J"}, "printable"),
])
def test_the_validator_refuses_each_hostile_value_naming_it(overrides, why):
    with pytest.raises(BadRow, match=why.replace("(", r"\(")):
        decode_row(*_row(**overrides))


@pytest.mark.parametrize("key_overrides", [{"shapes": ((-1, 24), (24, 16))}, {"strides": ((24, 1), (2**40, 1))},
                                           {"shapes": ((2**200, 24), (24, 16))}])
def test_the_validator_refuses_impossible_sizes(key_overrides):
    with pytest.raises(ValueError, match="sizes and strides"):
        _key(**key_overrides)


def test_schema_version_true_is_no_version():
    digest, key_json, _, entry_json = _row()
    with pytest.raises(BadRow, match="schema version"):
        decode_row(digest, key_json, True, entry_json)


def test_json_is_bounded_before_it_is_parsed():
    with pytest.raises(BadRow, match="deeper"):
        bounded_json("[" * 100_000 + "]" * 100_000, "x", 10**7)
    with pytest.raises(BadRow, match="characters long"):
        bounded_json('"' + "a" * 100 + '"', "x", 50)
    with pytest.raises(BadRow, match="not JSON"):
        bounded_json("[NaN]", "x", 100)
    assert bounded_json('{"a": ["[[[[[[[[[[[["]}', "x", 100) == {"a": ["[[[[[[[[[[[["]}  # brackets in strings


# ------------------------------------------------------------------ the compiled graph's key


def test_an_edited_winner_recompiles_in_a_process_sharing_the_inductor_cache(built, tmp_path):
    """The same created, the same count, re-imported at the same path: the old key held
    count/total(created)/max(rowid) and saw none of it. And nothing else recompiles: an entry
    for sizes the graph does not have leaves its key as it was."""
    (entry,) = AutotuneCache(built["db"], mode="read").entries() if len(built["decisions"]) == 1 else pytest.fail(
        f"the layer makes {len(built['decisions'])} decisions; this test edits one")
    aten = [c["name"] for c in entry.candidates if c["policy"] is None and c["time_us"] is not None]
    served = entry.config.get("name") if entry.winner == "aten" else entry.winner
    other = next(name for name in aten if name != served)
    shipped = tmp_path / "shipped.db"
    shutil.copy(built["db"], shipped)
    env = {"INDUCTOR_EXT_CACHE_DIR": str(tmp_path / "user"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    first = _script("cache-only", "--shared-inductor-cache", str(shipped), env=env)
    again = _script("cache-only", "--shared-inductor-cache", str(shipped), env=env)
    assert first["decisions"] and again["decisions"] == []  # unchanged file: the FX cache serves the graph
    from inductor_ext.autotune import cache_transfer

    # an entry for sizes this graph has none of (another model's), added: nothing to recompile
    unrelated = Entry(ProblemKey(**{**entry.key.__dict__, "shapes": ((7, 40), (40, 9)), "strides": ((40, 1), (9, 1))}),
                      winner="aten", config={"name": "mm"}, winner_time_us=1.0)
    shipped.unlink()
    cache_transfer.write_cache([entry, unrelated], shipped)
    unchanged = _script("cache-only", "--shared-inductor-cache", str(shipped), env=env)
    assert unchanged["decisions"] == [], unchanged
    edited = Entry(entry.key, winner="aten", config={"name": other}, winner_time_us=entry.winner_time_us,
                   aten_time_us=entry.aten_time_us, candidates=entry.candidates, reason=entry.reason,
                   created=entry.created)
    shipped.unlink()
    cache_transfer.write_cache([edited, unrelated], shipped)
    after = _script("cache-only", "--shared-inductor-cache", str(shipped), env=env)
    assert [(d["winner"], d["reason"]) for d in after["decisions"]] == [(other, "cache")], after


def test_sources_digest_moves_with_any_row_edit_and_only_then(tmp_path):
    # rows written here, not tuned: a tuning under load may write none (a disturbed timing is not kept)
    shipped = tmp_path / "s.db"
    with AutotuneCache(shipped) as cache:
        for m in (2, 3):
            cache.put(Entry(_key(m), winner="aten", config={"name": "mm"}, winner_time_us=1.0, reason="benchmark"))
    digests = [cache_layers.DecisionSources((str(shipped),), times=False).digest() for _ in range(2)]
    assert digests[0] == digests[1]
    before = shipped.stat()
    with sqlite3.connect(shipped) as conn:  # a winner edited in place: same count, created and rowid
        conn.execute("UPDATE entries SET entry_json = replace(entry_json, '\"reason\":\"benchmark\"', "
                     "'\"reason\":\"cache\"')")
    assert conn.total_changes == 2  # both rows edited
    conn.close()
    # as on a file system with coarse timestamps (CI's): same inode, size and mtime as before the edit
    os.utime(shipped, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (shipped.stat().st_ino, shipped.stat().st_size) == (before.st_ino, before.st_size)
    assert cache_layers.DecisionSources((str(shipped),), times=False).digest() != digests[0]


# ------------------------------------------------------------------ tune commands


def _tune(*args: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    path = os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([*(prefix or []), sys.executable, "-m", "inductor_ext.cli", "tune", *args],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": path})


def _tune_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``inductor-ext tune ARGS`` in this process (no interpreter to start): exit code, stdout, stderr."""
    from inductor_ext import cli

    code = cli.main(["tune", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def exported(built, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exported") / "c.json"
    done = _tune("export", str(built["db"]), "-o", str(out))
    assert done.returncode == 0, done.stderr
    return out


def _commands(built: dict, exported: Path, out: Path) -> dict[str, list[str]]:
    return {
        "build": ["build", "--model", "_shipped_cache_script:model", "--shapes", "2x24", "-o", str(out / "b.db")],
        "merge": ["merge", str(built["db"]), str(built["db"]), "-o", str(out / "m.db")],
        "import": ["import", str(exported), "-o", str(out / "i.db")],
        "export": ["export", str(built["db"]), "-o", str(out / "e.json")],
    }


@needs_setpriv
@pytest.mark.parametrize("command", ["build", "merge", "import", "export"])
def test_every_tune_command_with_an_unwritable_output_exits_1_and_leaves_nothing(built, exported, tmp_path, command):
    out = tmp_path / "ro"
    out.mkdir(mode=0o555)
    try:
        done = _tune(*_commands(built, exported, out)[command], prefix=NO_OVERRIDE)
    finally:
        out.chmod(0o755)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and "not writable" in lines[0], done.stderr[-2000:]
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("command", ["build", "merge", "import", "export"])
def test_every_tune_command_refuses_a_missing_folder_and_an_existing_output(built, exported, tmp_path, command,
                                                                            capsys):
    missing = tmp_path / "no" / "such"
    code, _, err = _tune_here(capsys, *_commands(built, exported, missing)[command])
    assert code == 1 and "create it first" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "no").exists()
    argv = _commands(built, exported, tmp_path)[command]
    target = Path(argv[argv.index("-o") + 1])
    target.write_text("mine")
    code, _, err = _tune_here(capsys, *argv)
    assert code == 1 and "--update" in err and target.read_text() == "mine", err


def test_update_adds_to_an_existing_output(built, exported, tmp_path, capsys):
    target = tmp_path / "i.db"
    assert _tune_here(capsys, "import", str(exported), "-o", str(target))[0] == 0
    code, out, err = _tune_here(capsys, "import", str(exported), "-o", str(target), "--update")
    n = len(built["decisions"])  # as new as what is there: kept, not replaced
    assert code == 0 and f"0 added, 0 replaced, {n} kept" in out, (out, err)
    assert len(AutotuneCache(target, mode="read").entries()) == len(built["decisions"])


def test_tune_show_escapes_control_characters():
    from inductor_ext import tune
    from inductor_ext.autotune.cache_entry import printable

    assert printable("cpu\x1b[2J\n") == "cpu\\x1b[2J\\n"
    entry = Entry(_key(), winner="aten", config={"name": "mm"}, winner_time_us=1.0, reason="fallback: \x1b[31mred\n")
    row = tune.entry_row(entry)
    assert row["reason"] == "fallback: \\x1b[31mred\\n" and all(str(v).isprintable() for v in row.values())


@pytest.mark.parametrize("value, why", [("", "non-empty path"), ("a\0b", "NUL"), ([], "at least one"),
                                        (["a.db", 3], "holds 3")])
def test_autotune_cache_option_names_one_or_several_files(value, why):
    from inductor_ext import presets
    from inductor_ext.config import ExtOptionError

    with pytest.raises(ExtOptionError, match=why):
        presets.resolve({"autotune_cache": value})
    assert presets.resolve({"autotune_cache": ["a.db", Path("b.db")]}).autotune_cache == ("a.db", "b.db")


# ------------------------------------------------------------------ boundaries and choices of a source


def test_json_bounds_are_inclusive():
    assert bounded_json("[" * 8 + "]" * 8, "x", 100, max_depth=8) is not None
    with pytest.raises(BadRow, match="deeper"):
        bounded_json("[" * 9 + "]" * 9, "x", 100, max_depth=8)
    assert bounded_json('"' + "a" * 48 + '"', "x", 50) == "a" * 48
    with pytest.raises(BadRow, match="characters long"):
        bounded_json('"' + "a" * 49 + '"', "x", 50)


def test_an_entry_for_an_op_no_family_serves_is_refused():
    digest, key_json, version, entry_json = _row()
    key = _key(op="os.system")
    with pytest.raises(BadRow, match="served by no template family"):
        decode_row(key.digest(), key.canonical_json(), version, entry_json)


def test_too_many_candidates_are_refused_even_within_the_size_bound():
    entry = Entry(_key(), winner="aten", config={"name": "mm"}, winner_time_us=1.0,
                  candidates=[{"name": "c", "time_us": None, "policy": None, "error": None}] * 1025)
    with pytest.raises(BadRow, match="1025 candidates"):
        Entry.from_dict(entry.to_dict())


def test_schema_check_refuses_a_check_clause(built, tmp_path):
    path = _variant(built, tmp_path, "check", ["ALTER TABLE facts ADD COLUMN c INTEGER CHECK (c > 0)"])
    with sqlite3.connect(path) as conn, pytest.raises(Exception, match="not the one"):
        check_schema(conn)
    conn.close()


def _put(path: Path, winner_name: str) -> None:
    with AutotuneCache(path) as cache:
        cache.put(Entry(_key(), winner="aten", config={"name": winner_name}, winner_time_us=1.0))


def test_layers_are_asked_in_order_before_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "user"))
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        _put(tmp_path / name / "c.db", name)
    _put(tmp_path / "user" / "autotune.db", "user")
    layers = (str(tmp_path / "a" / "c.db"), str(tmp_path / "b" / "c.db"))
    for named, want in ((layers, "a"), (layers[::-1], "b"), ((), "user")):
        entry, where = cache_layers.DecisionSources(named, times=True).get(_key())
        assert entry.config["name"] == want, (named, where)


def test_one_own_file_is_writable_only_when_the_compile_times(tmp_path, monkeypatch):
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "user"))
    own = tmp_path / "own" / "c.db"
    own.parent.mkdir(mode=0o700)
    _put(own, "own")
    timing = cache_layers.DecisionSources((str(own),), times=True)
    assert timing.layers == [] and timing.writable.path == own
    reading = cache_layers.DecisionSources((str(own),), times=False)  # cache-only: read, never written
    assert [layer.path for layer in reading.layers] == [own] and reading.writable.path != own


def test_an_own_file_in_a_folder_not_made_yet_is_writable(tmp_path):
    # ext makes the missing folder itself, 0700 (``make_private_folder``): no one else can swap the file
    assert cache_layers.own_writable(tmp_path / "new" / "c.db")


@pytest.mark.parametrize("mode", [0o620, 0o602])
def test_a_file_others_can_write_in_a_private_folder_is_only_read(tmp_path, monkeypatch, mode):
    # the folder is private but the file is not: another user could have swapped its rows
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "user"))
    own = tmp_path / "own" / "c.db"
    own.parent.mkdir(mode=0o700)
    _put(own, "own")
    own.chmod(mode)
    assert not cache_layers.own_writable(own)
    sources = cache_layers.DecisionSources((str(own),), times=True)
    assert [layer.path for layer in sources.layers] == [own] and sources.writable.path != own


def test_a_file_of_another_user_in_a_private_folder_is_only_read(tmp_path, monkeypatch):
    own = tmp_path / "own" / "c.db"
    own.parent.mkdir(mode=0o700)
    _put(own, "own")
    real_stat = Path.stat
    other = os.getuid() + 1

    def stat_as_other(self, *args, **kwargs):
        info = real_stat(self, *args, **kwargs)
        if self == own:
            return os.stat_result((info.st_mode, info.st_ino, info.st_dev, info.st_nlink, other,
                                   *tuple(info)[5:]))
        return info
    monkeypatch.setattr(Path, "stat", stat_as_other)
    assert not cache_layers.own_writable(own)


def test_a_file_in_a_folder_others_can_write_is_a_layer_and_no_cache_is_written_there(tmp_path, monkeypatch):
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "user"))
    shared = tmp_path / "shared"
    shared.mkdir()
    _put(shared / "c.db", "shared")
    shared.chmod(0o777)
    sources = cache_layers.DecisionSources((str(shared / "c.db"),), times=True)
    assert [layer.path for layer in sources.layers] == [shared / "c.db"]
    before = sorted(os.listdir(shared))
    with pytest.warns(Warning, match="writable by other users"):
        cache = AutotuneCache(shared / "new.db")
    assert cache.in_memory and sorted(os.listdir(shared)) == before


def test_the_users_cache_folder_is_made_private(tmp_path):
    with AutotuneCache(tmp_path / "a" / "b" / "c.db") as cache:
        assert not cache.in_memory
    assert [oct((tmp_path / p).stat().st_mode & 0o777) for p in ("a", "a/b")] == ["0o700", "0o700"]


def test_a_stored_candidate_error_is_cut_to_what_the_validator_reads():
    from inductor_ext.autotune.cache_entry import MAX_TEXT
    from inductor_ext.lowering import decision_record

    stored = decision_record.cache_candidate({"name": "c", "time_us": None, "policy": "p", "error": "x" * (MAX_TEXT + 9)})
    assert len(stored["error"]) == MAX_TEXT


def test_a_candidate_with_a_field_ext_never_writes_is_refused():
    candidate = {"name": "c", "time_us": None, "policy": None, "error": None, "code": "x"}
    entry = Entry(_key(), winner="aten", config={"name": "mm"}, winner_time_us=1.0, candidates=[candidate])
    with pytest.raises(BadRow, match="allowed: name, time_us"):
        Entry.from_dict(entry.to_dict())


def test_put_refuses_what_the_reader_would_refuse(tmp_path):
    with AutotuneCache(tmp_path / "c.db") as cache, pytest.raises(ValueError, match="neither 'aten'"):
        cache.put(Entry(_key(), winner="nosuch.family", winner_time_us=1.0))


def test_an_oversized_fact_is_ignored(tmp_path):
    from inductor_ext.autotune.cache import MAX_FACT

    with AutotuneCache(tmp_path / "c.db") as cache:
        cache.put_fact("k", "x" * (MAX_FACT + 1))
        with pytest.warns(Warning, match="ignoring the fact"):
            assert cache.get_fact("k") is None
        cache.put_fact("k", "x" * MAX_FACT)
        assert cache.get_fact("k") == "x" * MAX_FACT


def test_reading_if_exists_never_writes_the_file(tmp_path):
    _put(tmp_path / "c.db", "mine")
    before = (tmp_path / "c.db").read_bytes(), sorted(os.listdir(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with AutotuneCache(tmp_path / "c.db", mode="if-exists") as cache:
            assert cache.get(_key()).config == {"name": "mine"}
            cache.put(Entry(_key(m=4), winner="aten", config={"name": "new"}, winner_time_us=1.0))  # into memory
    assert ((tmp_path / "c.db").read_bytes(), sorted(os.listdir(tmp_path))) == before


def test_a_layer_is_read_again_when_its_file_changes(tmp_path):
    path = tmp_path / "c.db"
    _put(path, "old")
    assert cache_layers.load_layer(path).get(_key()).config == {"name": "old"}
    assert cache_layers.load_layer(path) is cache_layers.load_layer(path)  # once per version of the file
    path.unlink()
    _put(path, "new")
    assert cache_layers.load_layer(path).get(_key()).config == {"name": "new"}


def test_a_layer_never_answers_for_another_key_under_the_same_digest(tmp_path):
    entry = Entry(_key(), winner="aten", config={"name": "mm"}, winner_time_us=1.0)
    other = _key(shapes=((4, 24), (24, 16)))
    layer = cache_layers.Layer(tmp_path / "c.db", {other.digest(): entry}, "d", 0)
    assert layer.get(other) is None and cache_layers.Layer(tmp_path, {entry.key.digest(): entry}, "d", 0).get(
        entry.key) == entry


def test_a_scoped_digest_sees_only_entries_of_the_graphs_sizes(tmp_path, monkeypatch):
    monkeypatch.setenv("INDUCTOR_EXT_CACHE_DIR", str(tmp_path / "user"))
    layer = tmp_path / "l" / "c.db"
    layer.parent.mkdir()
    _put(layer, "mm")
    sources = cache_layers.DecisionSources((str(layer),), times=False)
    dims = frozenset({2, 24, 16})
    before = sources.digest(dims), sources.digest()
    with AutotuneCache(tmp_path / "user" / "autotune.db") as mine:  # another model's decision, in the user's cache
        mine.put(Entry(_key(shapes=((7, 40), (40, 9)), strides=((40, 1), (9, 1))), winner="aten", winner_time_us=1.0))
    sources = cache_layers.DecisionSources((str(layer),), times=False)
    assert sources.digest(dims) == before[0] and sources.digest() != before[1]
    with AutotuneCache(tmp_path / "user" / "autotune.db") as mine:  # one of this graph's sizes: in scope
        mine.put(Entry(_key(m=24), winner="aten", winner_time_us=1.0))
    assert cache_layers.DecisionSources((str(layer),), times=False).digest(dims) != before[0]
    dynamic = _key(m=5, dynamic=((0,), ()))  # a dynamic problem's entry is always in scope
    assert cache_layers.in_scope(dynamic, dims) and not cache_layers.in_scope(_key(m=5), dims)


def test_a_layer_is_read_again_when_only_its_wal_changes(tmp_path):
    """A writer's commit that sits in ``-wal`` (not yet checkpointed) leaves the database file's
    bytes as they were: the layer's signature holds the ``-wal`` too."""
    path = tmp_path / "c.db"
    _put(path, "old")
    assert cache_layers.load_layer(path).get(_key()).config == {"name": "old"}
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("PRAGMA wal_autocheckpoint=0")  # keep the commit in -wal while this stays open
        before = path.read_bytes()
        writer.execute("UPDATE entries SET entry_json = replace(entry_json, '\"name\":\"old\"', '\"name\":\"new\"')")
        assert path.read_bytes() == before and path.with_name("c.db-wal").stat().st_size > 0
        assert cache_layers.load_layer(path).get(_key()).config == {"name": "new"}
    finally:
        writer.close()


@pytest.mark.parametrize("text,limit,within", [
    ('["[[[[", 1]', 1, True),  # brackets inside a string do not nest
    ('["a\\"[[", [[1]]]', 2, False),  # an escaped quote does not end the string
    ('["a\\\\", [[1]]]', 2, False),  # an escaped backslash does not escape the quote after it
    ('"[[[', 0, True),  # an unterminated string runs to the end
    ('[[["\\', 2, False),
])
def test_the_nesting_check_reads_strings_as_json_does(text, limit, within):
    assert cache_entry._depth_within(text, limit) is within
