"""Inductor's vector-ISA probe, remembered in ext's cache.

Before its first C++ kernel in a process, Inductor probes which vector ISAs (AVX2, AVX-512, AMX)
the compiler builds for and this Python can load: about ten test builds, each loaded in a fresh
Python (10-13 s one after another on a 2-core AVX-512 machine, measured 2026-12-06). It keeps the
outcome in its own cache directory only (``.load_ok`` files), so every process with a fresh
Inductor cache pays again: a new container serving a cache built offline with
``inductor-ext tune build``, a CI job, a benchmark arm.

Of the probe's outcome a compile reads only the first ISA that passes (``pick_vec_isa``), unless
``ATEN_CPU_CAPABILITY`` or ``cpp.simdlen`` chooses another: so within ext's compiles Inductor's
list of valid ISAs is asked in order and stops at the first that passes (``_first_valid``), the
ISAs after it never asked (on an AMX machine 4 of the 10 test builds run, ~3 of ~10 s of g++). Where it
must probe (its record absent), ext asks ahead of the compile (``_ask_isas``), in a background
thread: in that order, or every ISA side by side where a setting chooses among them.

ext stores the outcome in its autotune cache (a ``facts`` row) under a key naming everything the
probe depends on: this torch and Python, the C++ compiler (path, size, mtime), the CPU's ISA flags
(with the AVX-512 BF16 and AMX FP16 bits Inductor's extra checks ask about) and the source of
Inductor's probe and build flags. The row keeps which ISAs passed and which of the probe's test
builds passed (``VecISA.check_build``, by ISA, flags and code). Under a record every test build
that passed is answered from it, including the extra checks ``cpp.vec_isa_ok`` does not cover
(AVX-512 VNNI, AVX-512 BF16, AMX, AMX FP16: on an AVX-512 VNNI/BF16 CPU three builds, ~3 s, in
every compile of a process with a fresh Inductor cache). A build the record lacks runs as before
and is added once it passes (a failed one runs again in each process, as Inductor does). When
every ISA a compile asks passed (the first this CPU has, or all of them where a setting chooses),
ext's compiles also set Inductor's switch for an already-probed machine, ``cpp.vec_isa_ok=True``,
so that Inductor's FX graph cache keys are the same from one process to the next; the first
compile on a machine lets Inductor probe first and records the outcome. A user's own
``cpp.vec_isa_ok`` is never touched.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import threading
from typing import Iterator

import torch
from torch._inductor import config as inductor_config
from torch._inductor import cpp_builder, cpu_vec_isa

from inductor_ext.autotune.cache import MAX_FACT, AutotuneCache
from inductor_ext.autotune.cache_entry import BadRow, bounded_json

log = logging.getLogger("inductor_ext")

FACT = "inductor.cpu_vec_isa"


@functools.cache  # an installed torch's sources: read once per process, not on every compile
def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def probe_key() -> str | None:
    """The fact's key on this machine, or None where ext does not reuse the probe (not x86)."""
    if platform.machine() not in ("x86_64", "AMD64") or sys.platform != "linux":
        return None
    found = shutil.which(cpp_builder.get_cpp_compiler())  # Inductor names it ("g++") or gives a path
    if found is None:
        return None  # no compiler: Inductor's own error says what to install
    compiler = os.path.realpath(found)
    stat = os.stat(compiler)
    parts = {"torch": torch.__version__, "python": sys.version, "executable": sys.executable,
             "compiler": [compiler, stat.st_size, stat.st_mtime_ns], "cpu": cpu_vec_isa.x86_isa_checker(),
             # what the extra checks ask the CPU besides those flags (they build only where it says yes)
             "cpu_extra": [torch.cpu._is_avx512_bf16_supported(), torch.cpu._is_amx_fp16_supported()],
             "probe": [_file_digest(cpu_vec_isa.__file__), _file_digest(cpp_builder.__file__)]}
    return f"{FACT}:{hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]}"


def _cpu_isas() -> list[cpu_vec_isa.VecISA]:
    """Inductor's ISA objects this CPU's flags name, best first."""
    flags = cpu_vec_isa.x86_isa_checker()
    return [isa for isa in cpu_vec_isa.supported_vec_isa_list if all(f in flags for f in str(isa).split())]


def candidates() -> list[str]:
    """The ISAs this CPU has (what ``cpp.vec_isa_ok=True`` says yes to), best first."""
    return [str(isa) for isa in _cpu_isas()]


def _asks_the_first_only() -> bool:
    """Whether Inductor picks the first valid ISA (``pick_vec_isa``): no ``ATEN_CPU_CAPABILITY``
    or ``cpp.simdlen`` choosing among them."""
    return not os.environ.get("ATEN_CPU_CAPABILITY") and inductor_config.cpp.simdlen is None \
        and not inductor_config.is_fbcode()


@functools.cache
def _first_valid() -> list[cpu_vec_isa.VecISA]:
    """Inductor's valid ISAs as ``pick_vec_isa`` reads them without a setting choosing among them:
    the first ISA this CPU has that passes Inductor's checks, the ones after it not asked."""
    for isa in _cpu_isas():
        if isa:
            return [isa]
    return []


@contextlib.contextmanager
def _first_valid_asked_only() -> Iterator[None]:
    """Within one compile, Inductor's valid ISAs asked in order up to the first that passes,
    wherever no setting chooses among them (decided in the thread that asks: Inductor's config
    patches are per thread); else every ISA, as Inductor asks."""
    every = cpu_vec_isa.valid_vec_isa_list

    def valid() -> list[cpu_vec_isa.VecISA]:
        return _first_valid() if _asks_the_first_only() else every()

    valid.every = every  # type: ignore[attr-defined]  # what _probed_in_process reads
    cpu_vec_isa.valid_vec_isa_list = valid  # pick_vec_isa reads the module's name
    try:
        yield
    finally:
        cpu_vec_isa.valid_vec_isa_list = every


def _probed_in_process() -> bool:
    """Whether Inductor's probe (all of it, or up to the first valid ISA) ran in this process."""
    every = cpu_vec_isa.valid_vec_isa_list
    every = getattr(every, "every", every)  # within an ext compile, Inductor's own behind ours
    return any(f.cache_info().currsize > 0 for f in (every, _first_valid))


# The asking started at an ext compile's entry (``ask_ahead``), until a compile's record takes it.
_ahead: list[concurrent.futures.Future[list[str]] | None] = [None]


def ask_ahead(cache: AutotuneCache) -> None:
    """At an ext compile's entry, before AOTAutograd traces and freezes its graph: where that
    compile will need Inductor's probe (no record in ``cache``, not probed in this process, no
    ``cpp.vec_isa_ok`` of the user's), start asking the CPU's ISAs in the background, so that the
    test builds (subprocesses) run beside the tracing (one Python thread) instead of after it."""
    if _ahead[0] is not None or inductor_config.cpp.vec_isa_ok is not None or _probed_in_process():
        return
    key = probe_key()
    if key is None or cache.get_fact(key) is not None:
        return
    future: concurrent.futures.Future[list[str]] = concurrent.futures.Future()
    first_only = _asks_the_first_only()  # here: Inductor's config patches are the calling thread's

    def ask() -> None:
        try:
            future.set_result(_ask_isas(first_only))
        except BaseException as e:  # the compile's probe asks again and says what is wrong
            future.set_exception(e)

    _ahead[0] = future
    _import_build_modules()
    # a daemon: a process that exits before its compile needs the answer does not wait for g++
    threading.Thread(target=ask, name="ext-isa-probe-ahead", daemon=True).start()


def _import_build_modules() -> None:
    """The modules the test builds import, imported in the compile's thread: in the asking thread
    they queued for the GIL behind Dynamo's tracing, ~1 s before the first g++ started (Inductor's
    codegen imports them anyway)."""
    import torch.utils.cpp_extension  # noqa: F401


def _probe_outcome() -> tuple[list[str], list[str]]:
    """The ISAs Inductor's probe passed (it runs here unless this process ran it already), and
    the test builds that passed while ext asked ahead of it (``_build_key``)."""
    ahead, _ahead[0] = _ahead[0], None
    passed: list[str] = []
    if ahead is not None:
        try:
            passed = ahead.result()
        except Exception as e:
            log.debug("ext: asking the vector ISAs ahead of Inductor's probe failed: %s", e)
    elif not _probed_in_process():
        passed = _ask_isas(_asks_the_first_only())
    return [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()], passed


def _ask_isas(first_only: bool) -> list[str]:
    """Inductor's probe asks each ISA this CPU has (``bool(isa)``: up to five test builds each,
    every one a g++ build and a load in a fresh Python, ~0.4-2 s); its answers land in Inductor's
    per-ISA caches, where the compile's probe then finds them, reached by Inductor's own code.
    Where the compile reads only the first that passes (``first_only``: ``_asks_the_first_only``
    in the compiling thread) they are asked in order up to it; else side by side, each in its own
    thread (the builds are subprocesses). An ISA whose asking fails is left to the probe, as
    before. Returns the keys of the test builds that passed (the record keeps them)."""
    isas = _cpu_isas()

    def ask(isa: cpu_vec_isa.VecISA) -> tuple[bool, list[str]]:
        passed: list[str] = []

        def check_build(code: str) -> bool:  # this ISA's builds (its extra checks' too), counted
            ok = type(isa).check_build(isa, code)
            if ok:
                passed.append(_build_key(isa, code))
            return ok

        isa.check_build = check_build  # type: ignore[method-assign]  # on this instance, for this call
        try:
            return bool(isa), passed
        except Exception as e:  # Inductor's probe asks again and says what is wrong
            log.debug("ext: asking %s ahead of Inductor's probe failed: %s", isa, e)
            return False, passed
        finally:
            del isa.check_build

    if not isas:
        return []
    if first_only:
        keys: list[str] = []
        for isa in isas:
            ok, passed = ask(isa)
            keys += passed
            if ok:
                break
        return keys
    with concurrent.futures.ThreadPoolExecutor(len(isas), thread_name_prefix="ext-isa-probe") as pool:
        return [key for _, keys in pool.map(ask, isas) for key in keys]


def _build_key(isa: cpu_vec_isa.VecISA, code: str) -> str:
    """One test build: the ISA, the flags it builds with at that moment (an extra check adds its
    own) and the code, what Inductor names the build's output by."""
    return f"{isa}|{isa.build_arch_flags()}|{hashlib.sha256(code.encode()).hexdigest()[:16]}"


@contextlib.contextmanager
def _builds_answered(passed: list[str]) -> Iterator[list[str]]:
    """``VecISA.check_build`` answered yes for the builds in ``passed``; any other build runs as
    before (a failure is never remembered: it may have been a load that timed out on a busy
    machine), and those that pass land in the list this yields."""
    real = cpu_vec_isa.VecISA.check_build
    found: list[str] = []

    def check_build(isa: cpu_vec_isa.VecISA, code: str) -> bool:
        key = _build_key(isa, code)
        if key in passed:
            return True
        ok = real(isa, code)
        if ok:
            found.append(key)
        return ok

    cpu_vec_isa.VecISA.check_build = check_build  # type: ignore[method-assign]
    try:
        yield found
    finally:
        cpu_vec_isa.VecISA.check_build = real  # type: ignore[method-assign]


def _parsed(stored: str | None) -> dict[str, list[str]] | None:
    """A stored record, or None (probe again) when it is absent or not one ext wrote: a fact is
    data from a file like any row, so every field is checked and nothing in it is fatal."""
    if stored is None:
        return None
    try:
        fact = bounded_json(stored, "the vector-ISA record", MAX_FACT, max_depth=2)
    except BadRow as e:
        log.warning("ext: ignoring the stored vector-ISA record: %s; Inductor probes again", e)
        return None
    fields = ("valid", "candidates", "builds")
    if not isinstance(fact, dict) or set(fact) != set(fields) or not all(
            isinstance(fact[f], list) and all(isinstance(x, str) and len(x) <= 512 for x in fact[f]) for f in fields):
        log.warning("ext: ignoring the stored vector-ISA record: not {valid, candidates, builds} lists of names; "
                    "Inductor probes again")
        return None
    return fact


def _every_isa_asked_passed(fact: dict[str, list[str]]) -> bool:
    """Whether the record says every ISA this compile asks passed: the first this CPU has where
    only the first is asked, else all of them (a record from an ext that asked all, or where a
    setting chooses among them)."""
    cpu = candidates()
    if fact.get("candidates") != cpu:
        return False
    return fact.get("valid") == cpu or (_asks_the_first_only() and fact.get("valid", [])[:1] == cpu[:1])


@contextlib.contextmanager
def reused(cache: AutotuneCache) -> Iterator[None]:
    """Around one compile: Inductor's probe answered from ext's record (or run once, by Inductor,
    and recorded), then ``cpp.vec_isa_ok=True`` for the compile when every ISA passed.

    Every compile on such a machine sees the same switch, recorded or just probed, so Inductor's
    FX graph cache keys (which include it) are the same from one process to the next."""
    key = None if inductor_config.cpp.vec_isa_ok is not None else probe_key()
    if key is None:  # the user's own setting, or not a machine ext records
        yield
        return
    fact = _parsed(cache.get_fact(key))
    with _first_valid_asked_only(), _builds_answered(list(fact.get("builds", [])) if fact else []) as found:
        try:
            if fact is None:
                # Inductor's own probe, as its first C++ kernel would run it (free if this process ran it).
                valid, passed_ahead = _probe_outcome()
                found.extend(key for key in passed_ahead if key not in found)
                fact = {"valid": valid, "candidates": candidates(), "builds": list(found)}
                cache.put_fact(key, json.dumps(fact))
            elif not _probed_in_process():
                log.info("ext: Inductor's vector-ISA probe answered from ext's cache (%s)", ", ".join(fact["valid"]))
            if _every_isa_asked_passed(fact):
                with inductor_config.patch({"cpp.vec_isa_ok": True}):
                    yield
            else:
                yield  # an ISA the CPU has failed the probe: Inductor probes each one (answered where recorded)
        finally:
            new = [k for k in found if k not in (fact or {}).get("builds", [])]
            if fact is not None and new:
                # builds the record lacked (an extra check, or a process that probed before ext)
                fact["builds"] = [*fact.get("builds", []), *new]
                cache.put_fact(key, json.dumps(fact))
