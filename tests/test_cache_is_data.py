"""A cache is data, never code (issue 27).

Every field of every family's Problem and Config declares what it allows (``templates/allowed.py``)
and every dict rebuilt into one is checked against that first. The attack replayed here: a shipped
cache whose ``triton.gemm`` entry had ``"num_stages": "4 if __import__('os').system('touch
marker') == 0 else 4"`` ran the command inside a compile. It is replayed on every field of every
family's Config -- the list comes from ``registry.families()``, so a new family is covered with no
edit here -- through ``tune import`` and through a SQLite row rewritten in place, and once end to
end through a real compile (hopper preset, interpret mode, cache-only).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import warnings
from pathlib import Path
from typing import Any, Iterator

import pytest

from _script_runner import interpret_env, run_json_script
from inductor_ext import cli
from inductor_ext.autotune import policy
from inductor_ext.autotune.cache import SCHEMA_VERSION, AutotuneCache, AutotuneCacheWarning, Entry, ProblemKey
from inductor_ext.templates import allowed, registry

HERE = Path(__file__).parent
FAMILIES = sorted(registry.families())


def shown(value: Any) -> str:
    """A value as the skip message shows it: its repr, cut at 120 characters (an attack string
    holds pytest's tmp path, longer than that under some runs)."""
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def attack(marker: Path) -> str:
    return f"4 if __import__('os').system('touch {marker}') == 0 else 4"


# ------------------------------------------------------------------ what families produce


def example_problems(family: registry.Family) -> Iterator[Any]:
    """Problems built from the Problem's own declarations: every size field at a few sizes, with
    each declared choice and flag tried once (the other fields at their defaults)."""
    rules = allowed.declared(family.Problem)
    fields = {f.name: f for f in dataclasses.fields(family.Problem)}
    base = {}
    for name, rule in rules.items():
        if fields[name].default is not dataclasses.MISSING:
            base[name] = fields[name].default
        elif rule.kind == "choice":
            base[name] = rule.values[0]
        elif rule.kind == "float":
            base[name] = 1.0
        elif rule.kind == "bool":
            base[name] = False
    variants: list[dict[str, Any]] = [{}]
    for name, rule in rules.items():
        if rule.kind == "choice":
            variants += [{name: v} for v in rule.values]
        elif rule.kind == "bool":
            variants.append({name: not base[name]})
    for size in (1, 16, 100, 4096):
        ints = {name: min(max(size, rule.low or 1), rule.high or size) for name, rule in rules.items()
                if rule.kind == "int"}
        for variant in variants:
            yield family.Problem(**{**base, **ints, **variant})


def produced_configs(family: registry.Family) -> list[Any]:
    """Every config the family can hand to a compile: its ``all_configs``, the config tables of its
    module, and what the candidate policies (its own configs(), nvMatmulHeuristics, the decode
    rules on NVIDIA targets) propose for each served example problem on each target it claims.
    Read from the record (``templates/family.py``), never from the module's names: a family may
    take its Problem, Config or hooks from another module (``Problem = gemm.GemmProblem``)."""
    found = dict.fromkeys(family.all_configs)
    for value in vars(family.module).values():  # tables: a config, a tuple or list of them, a dict of them
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else (value,)
        found.update(dict.fromkeys(item for item in items if isinstance(item, family.Config)))
    for problem in example_problems(family):
        if family.refuse_problem(problem) is None:
            for target in family.targets:
                found.update(dict.fromkeys(c.config for c in policy.candidates(family, problem, target, "full")))
    return list(found)


@pytest.fixture(scope="module")
def configs() -> dict[str, list[Any]]:
    return {name: produced_configs(registry.get(name)) for name in FAMILIES}


def test_every_field_of_every_family_declares_what_it_allows():
    for name in FAMILIES:
        module = registry.get(name)
        assert allowed.undeclared(module.Problem) == [] and allowed.undeclared(module.Config) == [], name


def test_a_family_with_an_undeclared_field_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Config:
        block_m: int = allowed.integer(64, low=16, high=256)
        num_stages: int = 3

    with pytest.raises(registry.FamilyError, match=r"fields Config\.num_stages declare no allowed values"):
        dataclasses.replace(registry.get("triton.gemm"), Config=Config)  # as the module's FAMILY = Family(...) would
    with pytest.raises(allowed.InvalidField, match=r"num_stages = 4 is not allowed: nothing"):
        registry.from_dict(Config, {"block_m": 64, "num_stages": 4}, "fake Config")


@pytest.mark.parametrize("name", FAMILIES)
def test_every_config_a_family_or_policy_produces_passes_its_own_check(configs, name):
    module = registry.get(name)
    assert configs[name], f"{name}: no config found to check"
    for config in configs[name]:
        assert registry.config_from_dict(module, json.loads(json.dumps(dataclasses.asdict(config)))) == config
    served = [p for p in example_problems(module) if module.refuse_problem(p) is None]
    assert served, f"{name}: no example problem is served"
    for problem in served:
        assert registry.problem_from_dict(module, json.loads(registry.problem_json(problem))) == problem


def wrong_values(rule: allowed.Allowed) -> list[Any]:
    """Values of the wrong type or out of the declared range for one field."""
    code = "__import__('os').getcwd()"
    if rule.kind == "int":
        out = [code, True, 2.0, [4], None]
        out += [int(rule.low) - 1] if rule.low is not None else []
        out += [int(rule.high) + 1] if rule.high is not None else []
        if rule.power_of_two:  # inside the range but between powers of two (block_m 48, 3)
            low, high = int(rule.low or 1), int(rule.high or 1 << 20)
            out += [v for v in (3, 48, 3 * (low // 2 or 1), high - 1) if low <= v <= high and v & (v - 1)]
        return out
    if rule.kind == "float":
        return [code, True, float("nan"), float("inf"), None, {"x": 1}]
    if rule.kind == "bool":
        return [code, 1, 0, "true", None]
    return [code, 1, True] + ([None] if None not in rule.values else [])


@pytest.mark.parametrize("name", FAMILIES)
def test_every_wrong_value_of_every_field_is_refused_naming_it(configs, name):
    module = registry.get(name)
    valid = {"Config": dataclasses.asdict(configs[name][0]),
             "Problem": dataclasses.asdict(next(p for p in example_problems(module) if module.refuse_problem(p) is None))}
    build = {"Config": registry.config_from_dict, "Problem": registry.problem_from_dict}
    for part, data in valid.items():
        for field, rule in allowed.declared(getattr(module, part)).items():
            for bad in wrong_values(rule):
                with pytest.raises(allowed.InvalidField) as e:
                    build[part](module, {**data, field: bad})
                assert str(e.value) == f"{name} {part}.{field} = {bad!r} is not allowed: {rule.describe()}"
        with pytest.raises(allowed.InvalidField, match=r"\.surprise = 1 is not allowed: no such field"):
            build[part](module, {**data, "surprise": 1})


# ------------------------------------------------------------------- the attack, per field


def attacked(configs: dict[str, list[Any]], marker: Path) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(family, field, a valid config dict, the same with the field replaced by the attack), for
    every field of every family's Config."""
    cases = []
    for name in FAMILIES:
        valid = dataclasses.asdict(configs[name][0])
        for field in valid:
            cases.append((name, field, valid, {**valid, field: attack(marker)}))
    return cases


def key(i: int) -> ProblemKey:
    return ProblemKey(op="mm", shapes=[[i + 1, 8], [8, 8]], strides=[[8, 1], [8, 1]], dtypes=["float32"] * 2,
                      device_name="test device", arch="sm_90a")


def entry(i: int, winner: str, config: dict[str, Any]) -> Entry:
    return Entry(key(i), winner=winner, config=config, winner_time_us=1.0, aten_time_us=2.0, created=1000.0 + i)


def skip_lines(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, AutotuneCacheWarning)]


def test_tune_import_skips_every_attacked_field_with_one_line_each(configs, tmp_path, capsys):
    marker = tmp_path / "marker"
    cases = attacked(configs, marker)
    valid = [entry(i, name, dataclasses.asdict(configs[name][0])) for i, name in enumerate(FAMILIES)]
    bad = [entry(len(valid) + i, name, config) for i, (name, _, _, config) in enumerate(cases)]
    doc = {"format": "inductor_ext.autotune", "schema_version": SCHEMA_VERSION,
           "entries": [e.to_dict() for e in valid + bad]}
    (tmp_path / "shipped.json").write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["tune", "import", str(tmp_path / "shipped.json"), "-o", str(tmp_path / "c.db")]) == 0
    assert f"{len(valid)} added" in capsys.readouterr().out
    lines = skip_lines(caught)
    assert len(lines) == len(cases)
    for (name, field, _, config), line in zip(cases, lines):
        rule = allowed.declared(registry.get(name).Config)[field]
        assert f"{name} Config.{field} = {shown(config[field])} is not allowed: {rule.describe()}" in line, line
    with AutotuneCache(tmp_path / "c.db") as cache:
        assert cache.entries() == sorted(valid, key=lambda e: e.key.digest())
    # the report counts them, for a caller of the API too
    with AutotuneCache(":memory:") as cache, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = cache.import_json(tmp_path / "shipped.json")
    assert (report.added, report.skipped_invalid) == (len(valid), len(cases))
    assert not marker.exists()


def test_sqlite_rows_rewritten_in_place_are_skipped_on_lookup(configs, tmp_path):
    marker = tmp_path / "marker"
    cases = attacked(configs, marker)
    db = tmp_path / "c.db"
    with AutotuneCache(db) as cache:
        for i, (name, _, valid, _) in enumerate(cases):
            cache.put(entry(i, name, valid))
        cache.put(entry(len(cases), cases[0][0], cases[0][2]))  # one stays untouched
    with sqlite3.connect(db) as conn:
        for i, (_, field, _, config) in enumerate(cases):
            digest = key(i).digest()
            (body,) = conn.execute("SELECT entry_json FROM entries WHERE digest = ?", (digest,)).fetchone()
            body = {**json.loads(body), "config": config}
            conn.execute("UPDATE entries SET entry_json = ? WHERE digest = ?", (json.dumps(body), digest))
    with AutotuneCache(db) as cache, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [cache.get(key(i)) for i in range(len(cases))] == [None] * len(cases)  # misses: ATen serves
        assert cache.get(key(len(cases))) is not None
        assert (cache.invalid, cache.misses, cache.hits) == (len(cases), len(cases), 1)
        lines = skip_lines(caught)
        assert len(lines) == len(cases)
        for (name, field, _, config), line in zip(cases, lines):
            rule = allowed.declared(registry.get(name).Config)[field]
            assert f"{name} Config.{field} = {shown(config[field])} is not allowed: {rule.describe()}" in line, line
        cache.get(key(0))  # looked up again: counted, not said again
        assert len(skip_lines(caught)) == len(cases) and cache.invalid == len(cases) + 1
        assert len(cache.entries()) == 1  # tune show / export / merge see only the untouched one
        with AutotuneCache(tmp_path / "merged.db") as merged:
            assert merged.merge_from(db).skipped_invalid == len(cases)
    assert not marker.exists()


def test_put_refuses_a_config_its_family_does_not_allow(tmp_path):
    config = {"block_m": 32, "block_n": 32, "block_k": 32, "group_m": 8, "num_warps": 4, "num_stages": "2"}
    with AutotuneCache(":memory:") as cache, pytest.raises(allowed.InvalidField, match="num_stages = '2'"):
        cache.put(entry(0, "triton.gemm", config))


def test_extern_call_checks_the_problem_and_config_it_rebuilds(tmp_path):
    from inductor_ext.lowering import adapters

    marker = tmp_path / "marker"
    module = registry.get("sycl.gemm")
    config = dataclasses.asdict(module.all_configs[0])
    problem = registry.problem_json(module.Problem(8, 8, 8))
    with pytest.raises(allowed.InvalidField, match=r"sycl\.gemm Config\.kind = "):
        adapters._call_family("sycl.gemm", {**config, "kind": attack(marker)}, problem=problem, target="xpu")
    bad_problem = json.dumps({**json.loads(problem), "dtype": attack(marker)})
    with pytest.raises(allowed.InvalidField, match=r"sycl\.gemm Problem\.dtype = "):
        adapters._call_family("sycl.gemm", config, problem=bad_problem, target="xpu")
    assert not marker.exists()


def test_asm_config_overrides_are_checked(capsys):
    assert cli.main(["asm", "triton.gemm", "--target", "sm_90a", "--config", "num_stages=99"]) == 2
    assert "num_stages = 99 is not allowed: an int in [1, 16]" in capsys.readouterr().err


# ------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("attack")
    return run_json_script("_cache_attack_script.py", str(out), env=interpret_env(out), timeout=600, cwd=HERE)


@pytest.mark.interp
def test_the_reported_attack_runs_nothing_and_the_compile_falls_back_to_aten(replay):
    assert replay["shipped"] == ["import", "sqlite"]  # both GEMMs looked their entry up
    assert replay["markers"] == {"import": False, "sqlite": False}
    assert replay["max_err"] < 1e-6
    assert [d["reason"] for d in replay["decisions"]] == ["fallback: cache-only and no cache entry"] * 2
    assert "0 added" in replay["import_output"] and "1 invalid skipped" in replay["import_output"]
    assert replay["invalid_on_lookup"] == 1
    imported, looked_up = replay["warnings"]
    for line in (imported, looked_up):
        assert "triton.gemm Config.num_stages = \"4 if __import__('os').system('touch " in line
        assert "is not allowed: an int in [1, 16]" in line
    assert "skipping" in imported and "shipped.json entries[0] (addmm 8x16x24 fp32)" in imported
    assert "ignoring the entry for mm 8x8x16 fp32" in looked_up


def test_each_declaration_keeps_its_default_and_allows_only_its_values():
    """The declaration helpers on a dataclass made here, at run time (the families' run at import)."""

    @dataclasses.dataclass(frozen=True)
    class Declared:
        m: int = allowed.size()
        block: int = allowed.integer(16, low=16, high=256, power_of_two=True)
        ratio: float = allowed.number(0.5, low=0.25, high=4.0)
        scale: float = allowed.number(1.0, high=2.0**63)
        fast: bool = allowed.flag(True)
        path: str | None = allowed.one_of(("tiled", None), "tiled")

    assert allowed.build(Declared, {"m": 7}, "D") == Declared(7, 16, 0.5, 1.0, True, "tiled")
    rules = allowed.declared(Declared)
    assert [rules[name].describe() for name in ("m", "block", "ratio", "scale", "fast", "path")] == [
        f"an int in [1, {2**62}]", "a power of two in [16, 256]", "a finite number in [0.25, 4]",
        "a finite number in [-inf, 9.223372036854776e+18]", "true or false", "one of 'tiled', None"]
    for name, value in [("m", 0), ("block", 24), ("ratio", 0.2), ("fast", 1), ("path", "gemv")]:
        with pytest.raises(allowed.InvalidField, match=rf"^D\.{name} = {value!r} is not allowed: "):
            allowed.build(Declared, {"m": 7, name: value}, "D")
    with pytest.raises(allowed.InvalidField, match=r"^D\.m = \(missing\) is not allowed: an int in \[1, "):
        allowed.build(Declared, {}, "D")
    with pytest.raises(allowed.InvalidField, match=r"^D\.\* = \[1\] is not allowed: an object with the fields "
                                                   r"m, block, ratio, scale, fast, path$"):
        allowed.build(Declared, [1], "D")
    for values in [(), ("tiled", 1)]:
        with pytest.raises(TypeError, match="one_of takes strings"):
            allowed.one_of(values)
    long = "x" * 118  # its repr is 120 characters: shown whole; one more is cut
    assert repr(long) in str(allowed.InvalidField("D", "path", long, "no"))
    assert str(allowed.InvalidField("D", "path", long + "x", "no")).startswith(f"D.path = {repr(long)[:117]}...")
