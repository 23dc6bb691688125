"""The C++ weight check of frozen graphs (runtime/tensor_watch): what it sees, what it leaves to
the Python check, and that frozen graphs use it."""

from __future__ import annotations

import logging

import pytest
import torch

from inductor_ext.lowering import frozen_params
from inductor_ext.runtime import tensor_watch, toolchain


@pytest.fixture
def pool():
    return (torch.randn(3, 4), torch.nn.Parameter(torch.randn(4)), 7)


def test_unchanged_tensors_pass(pool):
    watch = tensor_watch.watch(pool, [0, 1])
    assert watch is not None, "the C++ check was not built (is g++ installed?)"
    assert watch.unchanged(pool)
    assert watch.unchanged(list(pool))  # the same objects in a list


def test_an_in_place_write_is_seen(pool):
    watch = tensor_watch.watch(pool, [0, 1])
    with torch.no_grad():
        pool[1].mul_(2)
    assert not watch.unchanged(pool)


def test_a_replaced_storage_is_seen(pool):
    watch = tensor_watch.watch(pool, [0, 1])
    pool[0].data = pool[0].clone()  # same values and version, another storage
    assert not watch.unchanged(pool)


def test_only_watched_positions_count(pool):
    watch = tensor_watch.watch(pool, [1])
    pool[0].add_(1)
    assert watch.unchanged(pool)


def test_another_object_or_a_shorter_pool_means_look_closer(pool):
    watch = tensor_watch.watch(pool, [0, 1])
    assert not watch.unchanged((pool[0].view(3, 4), pool[1], 7))  # same data, another object
    assert not watch.unchanged(pool[:1])
    assert not watch.unchanged(())


def test_tensors_it_cannot_read_are_left_to_python():
    with torch.inference_mode():
        inference = torch.ones(2)  # no version counter
    assert tensor_watch.watch((inference,), [0]) is None

    class Sub(torch.Tensor):
        pass

    assert tensor_watch.watch((torch.ones(2).as_subclass(Sub),), [0]) is None


def test_built_once_and_cached():
    path = tensor_watch.build()
    stamp = path.stat().st_mtime_ns
    assert tensor_watch.build() == path and path.stat().st_mtime_ns == stamp


def test_without_a_compiler_frozen_graphs_check_in_python(monkeypatch, caplog, capfd):
    monkeypatch.setattr(toolchain, "gxx", lambda: None)
    tensor_watch.load.cache_clear()
    try:
        with caplog.at_level(logging.DEBUG, logger="inductor_ext"):
            assert tensor_watch.watch((torch.ones(2),), [0]) is None
        said = capfd.readouterr().err  # ext's logger writes to stderr
        assert "C++ weight check is not available" in said and "install g++" in said
        x, w = torch.randn(2, 3), torch.randn(3, 4)
        torch._dynamo.mark_static_address(w, guard=False)
        compiles = []
        run = frozen_params.compile_frozen(torch.fx.symbolic_trace(lambda x, w: x @ w), [x, w],
                                           lambda g, i, freeze: compiles.append(freeze) or g)
        assert run.fast is None
        run(x, w)
        w.add_(1)
        torch.testing.assert_close(run(x, w), x @ w)
        assert compiles == [True, False]
    finally:
        tensor_watch.load.cache_clear()


def _frozen_matmul():
    x, w = torch.randn(2, 3), torch.randn(3, 4)
    torch._dynamo.mark_static_address(w, guard=False)
    compiles = []
    run = frozen_params.compile_frozen(torch.fx.symbolic_trace(lambda x, w: x @ w), [x, w],
                                       lambda g, i, freeze: compiles.append(freeze) or g)
    return run, x, w, compiles


def test_frozen_graphs_check_in_cpp_and_python_only_looks_closer(monkeypatch):
    run, x, w, compiles = _frozen_matmul()
    assert run.fast is not None
    looked = []
    changed = frozen_params.FrozenGraph.changed
    monkeypatch.setattr(frozen_params.FrozenGraph, "changed", lambda self, args: looked.append(1) or changed(self, args))
    for _ in range(3):
        run(x, w)
    assert looked == []  # served by the C++ check alone
    w.add_(1)
    torch.testing.assert_close(run(x, w), x @ w)
    assert looked == [1] and compiles == [True, False]


def test_steady_calls_keep_the_watch_the_first_call_left():
    """The first call drops what the graph mutates itself and watches the rest anew; later calls
    (each decode step) only check, building no new watch."""
    run, x, w, compiles = _frozen_matmul()
    run(x, w)
    after_first = run.fast
    for _ in range(3):
        run(x, w)
    assert run.fast is after_first and compiles == [True]


def test_an_equal_view_of_the_weight_is_watched_from_then_on(monkeypatch):
    run, x, w, compiles = _frozen_matmul()
    run(x, w)
    before = run.fast
    view = w.view(3, 4)  # the same data and version counter in another object: not a change
    torch.testing.assert_close(run(x, view), x @ w)
    assert compiles == [True] and run.fast is not before and run.fast.unchanged((x, view))


def test_build_once_builds_beside_and_renames_or_says_why(tmp_path):
    target = tmp_path / "lib" / "thing.so"
    runs = []

    def write(out):
        runs.append(out)
        return ["sh", "-c", f"printf built > {out}"]

    assert toolchain.build_once(target, write, "the thing") == target and target.read_text() == "built"
    assert toolchain.build_once(target, write, "the thing") == target and len(runs) == 1  # cached
    broken = tmp_path / "lib" / "broken.so"
    with pytest.raises(ValueError, match="building the broken thing with sh failed:\nno such header"):
        toolchain.build_once(broken, lambda out: ["sh", "-c", "echo no such header >&2; exit 1"], "the broken thing",
                             ValueError)
    left = [p.name for p in target.parent.iterdir()]
    # nothing half-written left (build_once writes beside as ".thing.*"), no broken build; the folder
    # also holds the digest build_once records to recognise its own build
    assert "thing.so" in left and "broken.so" not in left and not [n for n in left if n.startswith(".")], left


def test_a_first_compile_on_a_machine_builds_the_check_beside_it_and_uses_it_once_built(monkeypatch, tmp_path):
    """Where the module is not built yet (a fresh machine), a frozen graph does not wait ~1-3 s of
    g++: it is built in the background, calls check in Python meanwhile (a change still thaws the
    graph), and the first call after the build takes the C++ check."""
    monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(tmp_path / "tools"))
    tensor_watch.load.cache_clear()
    monkeypatch.setattr(tensor_watch, "_building", [])
    try:
        x, w = torch.randn(2, 3), torch.randn(3, 4)
        torch._dynamo.mark_static_address(w, guard=False)
        compiles, building = [], []
        run = frozen_params.compile_frozen(torch.fx.symbolic_trace(lambda x, w: x @ w), [x, w],
                                           lambda g, i, freeze: compiles.append(freeze) or building.append(
                                               tensor_watch.building()) or g)
        assert building == [True]  # started before the compile, to run beside it
        assert run.fast is None and run.awaiting and tensor_watch.building()
        torch.testing.assert_close(run(x, w), x @ w)  # checked in Python while it builds
        tensor_watch._building[0].join(timeout=600)
        assert not tensor_watch.building() and run.fast is None
        run(x, w)
        assert run.fast is not None and not run.awaiting
        assert str(tensor_watch.build()).startswith(str(tmp_path / "tools"))
        w.add_(1)
        torch.testing.assert_close(run(x, w), x @ w)
        assert compiles == [True, False]
        # a change seen while the build still runs thaws the graph as well
        tensor_watch.load.cache_clear()
        monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(tmp_path / "tools2"))
        monkeypatch.setattr(tensor_watch, "_building", [])
        run, x, w, compiles = _frozen_matmul()
        assert run.fast is None and tensor_watch.building()
        w.add_(1)
        torch.testing.assert_close(run(x, w), x @ w)
        assert compiles == [True, False]
        tensor_watch._building[0].join(timeout=600)
    finally:
        tensor_watch.load.cache_clear()


def test_a_caller_that_waits_gets_the_check_built_in_the_foreground(monkeypatch, tmp_path):
    """``watch()`` as tests and direct callers use it (wait=True): on a machine where the module is
    not built yet it is built now, and the watch comes back; a frozen graph's background build
    runs under a name that says what it is."""
    monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(tmp_path / "tools"))
    tensor_watch.load.cache_clear()
    monkeypatch.setattr(tensor_watch, "_building", [])
    try:
        pool = (torch.ones(2),)
        assert tensor_watch.watch(pool, [0]) is not None and not tensor_watch._building
        tensor_watch.load.cache_clear()
        monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(tmp_path / "tools2"))
        builds = []
        real_build = tensor_watch.build
        monkeypatch.setattr(tensor_watch, "build", lambda: builds.append(1) or real_build())
        assert tensor_watch.watch(pool, [0], wait=False) is None
        assert [t.name for t in tensor_watch._building] == ["ext-tensor-watch-build"]
        assert tensor_watch.watch(pool, [0]) is not None  # waits for that build, runs no second one
        assert not tensor_watch.building() and builds == [1]
    finally:
        tensor_watch.load.cache_clear()


def test_a_background_build_that_fails_says_so_at_debug_level_and_is_over(capfd):
    from inductor_ext.runtime import background_builds

    def broken():
        raise RuntimeError("no such header")

    logger = logging.getLogger("inductor_ext")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        background_builds.start(broken, "ext-test-build")
        background_builds.wait()
    finally:
        logger.setLevel(level)
    said = capfd.readouterr().err  # ext's logger writes to stderr
    assert "ext-test-build in the background failed (no such header)" in said, said


def test_the_background_build_and_the_compiler_it_runs_yield_the_cpu(monkeypatch, tmp_path):
    """Nothing waits for the check's build, so it runs at the lowest priority (nice 19), and so
    does the compiler it starts: on a machine's first compile it would otherwise take a core from
    the compile and from the vector-ISA probe's builds. Other background builds keep the default."""
    import os
    import subprocess
    import threading

    from inductor_ext.runtime import background_builds

    seen = []

    def build():
        seen.append((os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),
                     int(subprocess.run(["nice"], capture_output=True, text=True).stdout)))

    monkeypatch.setenv("INDUCTOR_EXT_TOOL_DIR", str(tmp_path / "tools"))
    monkeypatch.setattr(tensor_watch, "_building", [])
    monkeypatch.setattr(tensor_watch, "load", build)
    monkeypatch.setattr(tensor_watch, "_at_hand", lambda: False)
    tensor_watch.build_ahead()
    tensor_watch._building[0].join(timeout=60)
    background_builds.start(build, "ext-test-build").join(timeout=60)
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert seen == [(19, 19), (mine, mine)]
