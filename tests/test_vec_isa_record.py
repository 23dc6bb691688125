"""ext's cache answers Inductor's vector-ISA probe in a process whose Inductor cache is fresh
(lowering/vec_isa_record.py). The probe itself takes ~16 s, so these tests stand in for it; the
saving is measured by ``bench/cpu_decode.py`` (compile time with a warm ext cache)."""

from __future__ import annotations

import json

import pytest
from torch._inductor import config as inductor_config
from torch._inductor import cpu_vec_isa

from inductor_ext.autotune.cache import AutotuneCache
from inductor_ext.lowering import vec_isa_record as record

ISAS = ["avx512 avx512_vnni amx_tile", "avx512", "avx2"]


@pytest.fixture
def machine(monkeypatch):
    """A fresh process on an x86 machine; Inductor's probe, when it runs, passes ``state["outcome"]``."""
    state = {"probed": False, "outcome": list(ISAS), "probes": 0}
    monkeypatch.setattr(record, "probe_key", lambda: "inductor.cpu_vec_isa:test")
    monkeypatch.setattr(record, "candidates", lambda: list(ISAS))
    monkeypatch.setattr(record, "_probed_in_process", lambda: state["probed"])

    def probe():
        state["probes"] += not state["probed"]
        state["probed"] = True
        return state["outcome"]

    monkeypatch.setattr(record, "_probe_outcome", probe)
    # Inductor's config is patched through its own API: pytest 9.2's monkeypatch cannot set
    # attributes of its sub-config proxies (AttributeError).
    with inductor_config.patch({"cpp.vec_isa_ok": None}):
        yield state


def _compile(state):
    """What a compile does with the switch: Inductor probes unless vec_isa_ok is set."""
    seen = inductor_config.cpp.vec_isa_ok
    state["probed"] = True
    return seen


def test_first_compile_probes_once_then_a_fresh_process_skips_the_probe(machine):
    cache = AutotuneCache(":memory:")
    with record.reused(cache):
        assert _compile(machine) is True  # probed first, all passed: the same switch as later
    assert machine["probes"] == 1
    assert json.loads(cache.get_fact("inductor.cpu_vec_isa:test")) == {"valid": ISAS, "candidates": ISAS}
    machine["probed"] = False  # a new process, Inductor's cache fresh again
    with record.reused(cache):
        assert _compile(machine) is True
    assert machine["probes"] == 1  # answered from ext's cache
    assert inductor_config.cpp.vec_isa_ok is None  # only for that compile


def test_an_isa_that_failed_the_probe_keeps_the_probe(machine):
    cache = AutotuneCache(":memory:")
    machine["outcome"] = ISAS[1:]  # e.g. an old compiler without AMX
    with record.reused(cache):
        assert _compile(machine) is None
    machine["probed"] = False
    with record.reused(cache):
        assert _compile(machine) is None  # vec_isa_ok=True would say yes to AMX: never


def test_the_users_setting_is_left_alone(machine):
    cache = AutotuneCache(":memory:")
    with inductor_config.patch({"cpp.vec_isa_ok": False}), record.reused(cache):
        assert _compile(machine) is False
    assert cache.get_fact("inductor.cpu_vec_isa:test") is None and machine["probes"] == 0


def test_a_fact_under_another_key_is_not_read(machine, monkeypatch):
    cache = AutotuneCache(":memory:")
    cache.put_fact("inductor.cpu_vec_isa:other-compiler", json.dumps({"valid": ISAS, "candidates": ISAS}))
    with record.reused(cache):
        _compile(machine)
    assert machine["probes"] == 1


def test_key_names_what_the_probe_depends_on(monkeypatch):
    key = record.probe_key()
    if key is None:
        pytest.skip("ext reuses the probe on x86 Linux only; this machine is not one")
    assert key == record.probe_key()  # stable
    flags = cpu_vec_isa.x86_isa_checker()
    monkeypatch.setattr(cpu_vec_isa, "x86_isa_checker", lambda: [*flags, "another-cpus-isa"])
    assert record.probe_key() != key  # another CPU
    monkeypatch.undo()
    monkeypatch.setattr(record.torch, "__version__", "0.0.0")
    assert record.probe_key() != key  # another torch
    monkeypatch.undo()
    monkeypatch.setattr(record.cpp_builder, "get_cpp_compiler", lambda: "no-such-compiler-xyz")
    assert record.probe_key() is None  # no compiler: Inductor's error says what to install
    monkeypatch.undo()
    monkeypatch.setattr(record.platform, "machine", lambda: "aarch64")
    assert record.probe_key() is None


def test_candidates_are_the_isas_the_cpu_has():
    found = record.candidates()
    flags = set(cpu_vec_isa.x86_isa_checker())
    assert all(set(isa.split()) <= flags for isa in found)
