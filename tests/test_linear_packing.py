"""ext's frozen compiles keep linears as ``mm`` for its choices, and leave Inductor's own mkldnn
linear packing as the user's config says, in whichever order the two compile in one process
(``lowering/linear_packing.py``). Inductor registers its freezing patterns once per process, so
the order is only testable from a fresh process: the script below runs in one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from inductor_ext.lowering import linear_packing

SCRIPT = textwrap.dedent("""
    import copy, json, sys
    import torch
    from torch._dynamo.utils import counters
    from inductor_ext.lowering import decision_record

    torch.manual_seed(0)
    x = torch.randn(6, 70)
    base = torch.nn.Sequential(torch.nn.Linear(70, 45), torch.nn.ReLU(), torch.nn.Linear(45, 33, bias=False)).eval()
    with torch.no_grad():
        want = base(x)

    def packed():
        return counters["inductor"]["mkldnn_linear_weight_pack_matcher_count"]

    def run(backend):
        # a fresh copy (Dynamo compiles it anew); the error against eager; linears Inductor packed;
        # the GEMMs that reached ext's choices
        torch._dynamo.reset()
        first, before = len(decision_record.decisions), packed()
        m = copy.deepcopy(base)
        if backend == "ext":
            options = {"autotune": "cache-only", "autotune_cache": sys.argv[1]}
            fn, patch = torch.compile(m, backend="ext", options=options), torch._inductor.config.patch({})
        else:  # the user's own freezing compile, as PyTorch's CPU inference tutorial sets it
            fn, patch = torch.compile(m), torch._inductor.config.patch(freezing=True)
        with patch, torch.no_grad():
            err = (fn(x) - want).abs().max().item()
        return {"backend": backend, "err": err, "packed": packed() - before,
                "ext_ops": sorted(d.op for d in decision_record.decisions[first:])}

    print(json.dumps([run(b) for b in sys.argv[2:]]))
""")


def _in_fresh_process(tmp_path, order: list[str]) -> list[dict]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
           "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "ext.db"), *order], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def ext_first(tmp_path_factory):
    return _in_fresh_process(tmp_path_factory.mktemp("ext_first"), ["ext", "inductor"])


@pytest.fixture(scope="module")
def inductor_first(tmp_path_factory):
    return _in_fresh_process(tmp_path_factory.mktemp("inductor_first"), ["inductor", "ext"])


def test_ext_compiling_first_leaves_the_users_freezing_packing_linears(ext_first):
    ext, inductor = ext_first
    assert ext["ext_ops"] == ["addmm", "mm"] and ext["packed"] == 0, ext
    assert inductor["packed"] == 2, inductor  # what it does in a process without ext


def test_ext_after_the_users_freezing_compile_still_sees_its_linears(inductor_first):
    inductor, ext = inductor_first
    assert inductor["packed"] == 2, inductor
    assert ext["ext_ops"] == ["addmm", "mm"] and ext["packed"] == 0, ext


def test_every_order_computes_the_eager_result(ext_first, inductor_first):
    for run in ext_first + inductor_first:
        assert run["err"] < 1e-5, run


def test_packing_entries_are_found_among_inductors_freezing_patterns():
    """The filter names Inductor's own check; if Inductor renames it, this fails (not the compile)."""
    with linear_packing.linears_left_as_mm():
        inside = linear_packing._passes_with_linear_packing()
    assert inside == []
    assert linear_packing._passes_with_linear_packing(), "no mkldnn linear packing registered by Inductor"
