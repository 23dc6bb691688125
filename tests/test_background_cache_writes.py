"""FX graph cache entries written beside the compile (lowering/background_cache_writes.py); a
graph compiled again in the same process still finds its entry: test_cpp_gemm.py's
test_a_cached_graph_never_serves_another_models_packed_weights (its third compile is a hit)."""

from __future__ import annotations

import logging
import os
import sys
import threading

import pytest
from torch._inductor.codecache import FxGraphCache

from inductor_ext.lowering import background_cache_writes
from inductor_ext.lowering.background_cache_writes import wait_for_writes, written_in_background
from inductor_ext.testing.patches import assert_in_force_only_inside


@pytest.fixture
def slow_disk(monkeypatch):
    """Inductor's write and lookup, recorded; the write holds until ``release`` is set."""
    release, events = threading.Event(), []

    def write(key, content):
        release.wait(10)
        if key == "broken":
            raise OSError("No space left on device")
        events.append(("written", key, content))

    monkeypatch.setattr(FxGraphCache, "_write_to_local_cache", staticmethod(write))
    monkeypatch.setattr(FxGraphCache, "_lookup_graph",
                        staticmethod(lambda key, *a, **k: events.append(("looked up", key)) or "entry"))
    return release, events


def test_the_compile_does_not_wait_for_the_write_and_a_lookup_does(slow_disk):
    release, events = slow_disk
    with written_in_background():
        FxGraphCache._write_to_local_cache("k", b"packed weights")  # returns while the disk holds
        assert events == []
        threading.Timer(0.2, release.set).start()
        assert FxGraphCache._lookup_graph("k", [], True, None, None) == "entry"
    assert events == [("written", "k", b"packed weights"), ("looked up", "k")]


def test_a_failed_write_says_so_once_and_fails_nothing(slow_disk, caplog):
    release, events = slow_disk
    release.set()
    with caplog.at_level(logging.WARNING, logger="inductor_ext"), written_in_background():
        FxGraphCache._write_to_local_cache("broken", b"x")
        FxGraphCache._write_to_local_cache("k", b"y")
        wait_for_writes()
    assert events == [("written", "k", b"y")]
    assert [r.getMessage() for r in caplog.records] == [
        "ext: Inductor's FX graph cache entry broken could not be written (OSError: No space left on device); "
        "the graph compiles again in the next process"]


def test_writes_happen_on_a_low_priority_thread_the_interpreter_waits_for_at_exit(slow_disk):
    release, events = slow_disk
    release.set()
    with written_in_background():
        FxGraphCache._write_to_local_cache("k", b"y")
        wait_for_writes()
    (writer,) = [t for t in threading.enumerate() if t.name.startswith("ext-fx-cache-write")]
    assert not writer.daemon
    if sys.platform == "linux":  # yields the CPU to the graph's first calls
        assert os.getpriority(os.PRIO_PROCESS, writer.native_id) == 19
    assert background_cache_writes._pending == []


@pytest.mark.parametrize("name", ["_write_to_local_cache", "_lookup_graph"])
def test_inductors_functions_are_back_after_the_compile(name):
    assert_in_force_only_inside(FxGraphCache, name, written_in_background)
