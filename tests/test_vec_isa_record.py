"""ext's cache answers Inductor's vector-ISA probe in a process whose Inductor cache is fresh
(lowering/vec_isa_record.py). The probe itself takes ~16 s, so the first tests stand in for it and
the last run Inductor's own probe code with its test builds stubbed and counted; the saving is
measured by ``bench/compile_time.py`` (isa_probe of the ext_cached arm)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import logging
import sys
import threading
from pathlib import Path

import pytest
import torch
from torch._inductor import config as inductor_config
from torch._inductor import cpp_builder, cpu_vec_isa

from inductor_ext.autotune.cache import AutotuneCache
from inductor_ext.lowering import ext_choices, install
from inductor_ext.lowering import vec_isa_record as record

ISAS = ["avx512 avx512_vnni amx_tile", "avx512", "avx2"]


@pytest.fixture
def machine(monkeypatch):
    """A fresh process on an x86 machine; Inductor's probe, when it runs, passes ``state["outcome"]``."""
    state = {"probed": False, "outcome": list(ISAS), "probes": 0}
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setattr(record, "probe_key", lambda: "inductor.cpu_vec_isa:test")
    monkeypatch.setattr(record, "candidates", lambda: list(ISAS))
    monkeypatch.setattr(record, "_probed_in_process", lambda: state["probed"])

    def probe():
        state["probes"] += not state["probed"]
        state["probed"] = True
        return state["outcome"], []

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
    assert json.loads(cache.get_fact("inductor.cpu_vec_isa:test")) == {"valid": ISAS, "candidates": ISAS, "builds": []}
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


def test_a_record_of_the_first_valid_isa_only_serves_where_the_compile_reads_only_it(machine, monkeypatch):
    """ext's probe asks up to the first ISA that passes; its record then answers compiles that pick
    the first valid ISA, not one where ATEN_CPU_CAPABILITY chooses another (Inductor asks each there)."""
    cache = AutotuneCache(":memory:")
    machine["outcome"] = ISAS[:1]
    with record.reused(cache):
        assert _compile(machine) is True
    machine["probed"] = False
    with record.reused(cache):
        assert _compile(machine) is True
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    machine["probed"] = False
    with record.reused(cache):
        assert _compile(machine) is None  # vec_isa_ok=True would say yes to AVX2 unasked: never
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    with inductor_config.patch({"cpp.simdlen": 256}):
        machine["probed"] = False
        with record.reused(cache):
            assert _compile(machine) is None


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


# ---------------------------------------------------- Inductor's own probe, with its builds counted

_CACHED_CHECKS = [(cpu_vec_isa.VecISA, "_VecISA__bool__impl"), (cpu_vec_isa.VecAVX512, "__bool__"),
                  (cpu_vec_isa.VecAVX512VNNI, "__bool__"), (cpu_vec_isa.VecAMX, "__bool__")]


@pytest.fixture
def fresh_process(monkeypatch, tmp_path):
    """Inductor's real probe code (``valid_vec_isa_list`` and each ISA's checks, extra checks
    included) as a new process with a fresh Inductor cache runs it, with the test builds counted
    and stubbed: each build writes an empty library that "loads". ``new()`` starts another such
    process; everything is restored after the test."""
    if record.probe_key() is None:
        pytest.skip("ext reuses the probe on x86 Linux with a C++ compiler only; this machine is not one")
    monkeypatch.setattr(record, "_ahead", [None])  # no asking left over from an earlier compile
    builds = []

    def build(self, *args, **kwargs):
        builds.append(self.get_target_file_path())
        open(self.get_target_file_path(), "w").close()

    monkeypatch.setattr(cpp_builder.CppBuilder, "build", build)
    monkeypatch.setattr(cpu_vec_isa.VecISA, "_probe_load", lambda self, path: True)

    def new():
        """A new process: Inductor's in-process caches and its cache directory fresh, no builds yet."""
        builds.clear()
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / f"inductor{len(list(tmp_path.iterdir()))}"))
        for owner, name in _CACHED_CHECKS:  # functools.cache'd per instance, and ISAs compare equal by type
            monkeypatch.setattr(owner, name, functools.cache(getattr(owner, name).__wrapped__))
        monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", functools.cache(cpu_vec_isa.valid_vec_isa_list.__wrapped__))
        monkeypatch.setattr(record, "_first_valid", functools.cache(record._first_valid.__wrapped__))
        # new instances: the extra checks set attributes on them
        monkeypatch.setattr(cpu_vec_isa, "supported_vec_isa_list",
                            [type(isa)() if isinstance(isa, (cpu_vec_isa.VecAVX2, cpu_vec_isa.VecAVX512)) else isa
                             for isa in cpu_vec_isa.supported_vec_isa_list])
        return builds

    with inductor_config.patch({"cpp.vec_isa_ok": None}):
        yield new


def _what_inductor_picked() -> list:
    """Per valid ISA: what codegen reads from it (flags, and the extra checks' outcomes)."""
    return [(str(isa), isa.build_arch_flags(), getattr(isa, "_is_avx512_bf16_supported", None),
             getattr(isa, "_is_amx_fp16_supported", None)) for isa in cpu_vec_isa.valid_vec_isa_list()]


def test_a_recorded_machine_runs_no_probe_build(fresh_process):
    cache = AutotuneCache(":memory:")
    builds = fresh_process()
    with record.reused(cache):
        picked = cpu_vec_isa.pick_vec_isa()
        probed = _what_inductor_picked()
    first = len(builds)
    assert first > 0  # the first compile on the machine: Inductor probes, ext records
    builds = fresh_process()
    with record.reused(cache):
        assert cpu_vec_isa.pick_vec_isa() == picked and _what_inductor_picked() == probed
    assert builds == []  # neither the probe nor its extra checks (AVX-512 BF16/VNNI, AMX) build


def test_a_record_under_another_cpus_key_still_probes(fresh_process, monkeypatch):
    cache = AutotuneCache(":memory:")
    builds = fresh_process()
    with record.reused(cache):
        cpu_vec_isa.pick_vec_isa()
    first = len(builds)
    # the same flags, but a CPU that answers the AVX-512 BF16 extra check the other way
    other_answer = not torch.cpu._is_avx512_bf16_supported()
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: other_answer)
    builds = fresh_process()
    with record.reused(cache):
        cpu_vec_isa.pick_vec_isa()
    assert builds and first > 0


@pytest.fixture
def avx512_bf16_host(monkeypatch):
    """The host as an AVX-512 CPU with BF16, whatever this one is: the only CPUs where Inductor's
    extra checks build (on an AVX2 host there is nothing for them to ask)."""
    monkeypatch.setattr(cpu_vec_isa, "x86_isa_checker", lambda: ["avx2", "avx512"])
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)


def test_builds_a_process_ran_before_ext_are_recorded_by_the_next(fresh_process, avx512_bf16_host):
    """A process whose Inductor probed before ext's first compile records the outcome without the
    builds; the next process runs the extra checks once more and adds them."""
    cache = AutotuneCache(":memory:")
    builds = fresh_process()
    cpu_vec_isa.pick_vec_isa()  # plain Inductor first
    with record.reused(cache):
        pass
    builds = fresh_process()
    with record.reused(cache):
        cpu_vec_isa.pick_vec_isa()
    assert builds  # the extra checks, not in the record yet
    builds = fresh_process()
    with record.reused(cache):
        cpu_vec_isa.pick_vec_isa()
    assert builds == []


def _picked() -> tuple:
    """What codegen reads from the ISA Inductor picks: its name, flags and extra checks' outcomes."""
    isa = cpu_vec_isa.pick_vec_isa()
    return (str(isa), isa.build_arch_flags(), getattr(isa, "_is_avx512_bf16_supported", None),
            getattr(isa, "_is_amx_fp16_supported", None))


def _first_isas_builds(one_at_a_time: list[str]) -> list[str]:
    """Of plain Inductor's probe builds (AVX-512 base, its BF16 extra check, AVX2 base, in that
    order on the avx512_bf16_host): those of the first ISA."""
    return one_at_a_time[:2]


def test_a_first_probe_builds_only_up_to_the_first_isa_that_passes_and_picks_the_same(fresh_process,
                                                                                   avx512_bf16_host):
    """Inductor picks the first valid ISA; ext's compile asks no further (the AVX2 build of plain
    Inductor's probe is not run) and Inductor picks exactly what its full probe picks."""
    builds = fresh_process()
    picked = _picked()  # plain Inductor: every ISA, one build at a time
    one_at_a_time = [Path(b).name for b in builds]
    assert len(one_at_a_time) == 3
    builds = fresh_process()
    inductors = cpu_vec_isa.valid_vec_isa_list
    with record.reused(AutotuneCache(":memory:")):
        assert _picked() == picked
        assert [Path(b).name for b in builds] == _first_isas_builds(one_at_a_time)

        def other_thread() -> str:  # Inductor's config patches are per thread: its own setting chooses
            with inductor_config.patch({"cpp.simdlen": 256}):
                return _picked()[0]

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            assert pool.submit(other_thread).result() == "avx2"  # every ISA asked there, as Inductor asks
    assert [Path(b).name for b in builds] == one_at_a_time
    assert cpu_vec_isa.valid_vec_isa_list is inductors  # Inductor's own again after the compile


@pytest.mark.parametrize("setting", ["ATEN_CPU_CAPABILITY", "cpp.simdlen"])
def test_where_a_setting_chooses_among_the_isas_each_is_asked_side_by_side_with_the_same_outcome(
        fresh_process, avx512_bf16_host, monkeypatch, setting):
    """There the probe's builds overlap (two or more at once) and Inductor then picks exactly what
    its probe one build at a time picks, after the very same builds."""
    import threading
    import time

    running, most, lock = [0], [0], threading.Lock()
    stub = cpp_builder.CppBuilder.build

    def slow_build(self, *args, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        stub(self, *args, **kwargs)
        with lock:
            running[0] -= 1

    monkeypatch.setattr(cpp_builder.CppBuilder, "build", slow_build)
    chosen = contextlib.nullcontext()
    if setting == "ATEN_CPU_CAPABILITY":
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    else:
        chosen = inductor_config.patch({"cpp.simdlen": 256})
    with chosen:
        builds = fresh_process()
        picked = _picked()  # plain Inductor: one build at a time
        one_at_a_time = sorted(Path(b).name for b in builds)
        assert most[0] == 1 and picked[0] == "avx2"
        builds = fresh_process()
        record.ask_ahead(AutotuneCache(":memory:"))
        with record.reused(AutotuneCache(":memory:")):
            assert _picked() == picked
    assert sorted(Path(b).name for b in builds) == one_at_a_time and most[0] >= 2


def test_asked_ahead_the_probe_builds_the_same_and_the_record_answers_the_next_process(fresh_process,
                                                                                      avx512_bf16_host):
    """``ask_ahead`` (an ext compile's entry, before AOTAutograd traces) starts the probe's builds in
    the background, up to the first ISA that passes; the compile's probe then picks what Inductor's
    own picks, building nothing more, and the record it writes answers the next process without a build."""
    builds = fresh_process()
    picked = _picked()  # plain Inductor, one build at a time
    first_isas = _first_isas_builds([Path(b).name for b in builds])
    cache = AutotuneCache(":memory:")
    builds = fresh_process()
    record.ask_ahead(cache)
    ahead = record._ahead[0]
    assert ahead is not None
    ahead.result(timeout=60)
    assert [Path(b).name for b in builds] == first_isas  # the first ISA's builds ran ahead...
    with record.reused(cache):
        assert _picked() == picked
    assert [Path(b).name for b in builds] == first_isas  # ...and none again
    assert record._ahead[0] is None  # taken by that compile
    builds = fresh_process()
    with record.reused(cache):
        assert _picked() == picked
    assert builds == []


def test_nothing_is_asked_ahead_where_the_compile_will_not_probe(fresh_process):
    cache = AutotuneCache(":memory:")
    builds = fresh_process()
    with inductor_config.patch({"cpp.vec_isa_ok": True}):
        record.ask_ahead(cache)  # the user's own switch
    assert record._ahead[0] is None
    with record.reused(cache):
        cpu_vec_isa.pick_vec_isa()  # the first compile records the machine
    builds = fresh_process()
    record.ask_ahead(cache)  # recorded: the compile will not probe
    assert record._ahead[0] is None and builds == []


@pytest.mark.parametrize("autotune, asked", [("model", True), ("off", False)])
def test_an_ext_compile_asks_ahead_before_aot_traces_its_graph(monkeypatch, tmp_path, autotune, asked):
    from inductor_ext import backend

    order = []
    monkeypatch.setattr(record, "ask_ahead", lambda cache: order.append("ask_ahead") if isinstance(cache, AutotuneCache)
                        else order.append(f"ask_ahead without the compile's cache: {cache!r}"))
    monkeypatch.setattr(backend, "compile_fx", lambda gm, inputs, **kw: order.append("compile_fx") or gm.forward)
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    backend.ext_backend(gm, [torch.ones(2)], options={"preset": "cpu", "autotune": autotune,
                                                       "autotune_cache": str(tmp_path / "at.db")})
    assert order == (["ask_ahead", "compile_fx"] if asked else ["compile_fx"])


def test_the_asking_ahead_runs_in_a_daemon_thread_the_compile_time_bench_can_tell(monkeypatch):
    """A process that exits before its compile needs the answer does not wait for g++ (a daemon),
    and bench/compile_time.py counts the thread's builds as the probe's by its name."""
    seen = []
    monkeypatch.setattr(record, "_ahead", [None])
    monkeypatch.setattr(record, "probe_key", lambda: "inductor.cpu_vec_isa:test")
    monkeypatch.setattr(record, "_probed_in_process", lambda: False)
    monkeypatch.setattr(record, "_ask_isas", lambda first_only: seen.append(threading.current_thread()) or [])
    with inductor_config.patch({"cpp.vec_isa_ok": None}):
        record.ask_ahead(AutotuneCache(":memory:"))
    assert record._ahead[0].result(timeout=10) == []
    assert seen[0].daemon and seen[0].name.startswith("ext-isa-probe")


def test_the_test_builds_imports_run_in_the_compiles_thread_before_the_asking_starts(monkeypatch):
    order = []
    import_build_modules = record._import_build_modules
    monkeypatch.setattr(record, "_ahead", [None])
    monkeypatch.setattr(record, "probe_key", lambda: "inductor.cpu_vec_isa:test")
    monkeypatch.setattr(record, "_probed_in_process", lambda: False)
    monkeypatch.setattr(record, "_import_build_modules", lambda: order.append(("imports", threading.current_thread())))
    monkeypatch.setattr(record, "_ask_isas", lambda first_only: order.append(("asked", threading.current_thread())) or [])
    with inductor_config.patch({"cpp.vec_isa_ok": None}):
        record.ask_ahead(AutotuneCache(":memory:"))
    record._ahead[0].result(timeout=10)
    assert [what for what, _ in order] == ["imports", "asked"]
    assert order[0][1] is threading.current_thread() and order[1][1] is not threading.current_thread()
    # what it imports: the module the test builds' options need (restored as it was after)
    import torch.utils.cpp_extension

    monkeypatch.setattr(torch.utils, "cpp_extension", torch.utils.cpp_extension)
    monkeypatch.delitem(sys.modules, "torch.utils.cpp_extension")
    import_build_modules()
    assert "torch.utils.cpp_extension" in sys.modules


def test_asking_ahead_that_failed_leaves_the_probe_to_inductor_and_says_why(monkeypatch, caplog):
    failed = concurrent.futures.Future()
    failed.set_exception(OSError("g++: not found"))
    monkeypatch.setattr(record, "_ahead", [failed])
    monkeypatch.setattr(record.cpu_vec_isa, "valid_vec_isa_list", lambda: [])
    with caplog.at_level(logging.DEBUG, logger="inductor_ext"):
        assert record._probe_outcome() == ([], [])
    assert [r.getMessage() for r in caplog.records] == [
        "ext: asking the vector ISAs ahead of Inductor's probe failed: g++: not found"]
    assert record._ahead[0] is None


@pytest.mark.parametrize("preset, asked", [("cpu", True), ("hopper", False)])
def test_dynamos_backend_lookup_asks_ahead_where_the_machines_preset_is_cpu(monkeypatch, preset, asked):
    """``torch.compile(model, backend="ext")`` loads ``dynamo_entry`` (the entry point): the probe's
    builds start there, before the first call traces, for the preset of this machine's device
    and the user's own cache as an ext compile with no options reads it; on a machine whose
    preset is not the cpu one, nothing starts."""
    import importlib
    import importlib.metadata

    from inductor_ext import dynamo_entry, presets

    (entry,) = [e for e in importlib.metadata.entry_points(group="torch_dynamo_backends") if e.name == "ext"]
    assert entry.value == "inductor_ext.dynamo_entry:ext_backend"
    configs, caches, devices = [], [], []
    real_ask = install.ask_isas_ahead
    monkeypatch.setattr(install, "ask_isas_ahead", lambda config: configs.append(config) or real_ask(config))
    monkeypatch.setattr(record, "ask_ahead", caches.append)
    monkeypatch.setattr(presets, "machine_device", lambda: torch.device("cuda", 3))  # any device: only named
    monkeypatch.setattr(presets, "preset_for_device", lambda device: devices.append(device) or preset)
    importlib.reload(dynamo_entry)
    assert devices == [torch.device("cuda", 3)] and [c.preset for c in configs] == [preset]
    assert len(caches) == int(asked)
    if asked:
        assert caches[0].path == ext_choices.cache_for(presets.resolve({"preset": "cpu"})).path


def test_a_failure_at_backend_lookup_is_left_to_the_compile(monkeypatch, caplog):
    import importlib

    from inductor_ext import dynamo_entry, presets

    def broken(device):
        raise RuntimeError("no such device")

    monkeypatch.setattr(presets, "preset_for_device", broken)
    with caplog.at_level(logging.DEBUG, logger="inductor_ext"):
        importlib.reload(dynamo_entry)  # raises nothing: the compile asks again and says what is wrong
    assert [r.getMessage() for r in caplog.records if "lookup" in r.getMessage()] == [
        "ext: not asking the vector ISAs at backend lookup: no such device"]
