"""The collective check (comms_passes/collective_check), in one process on the fake process group,
and on 2 gloo ranks with hand-made descriptions that differ in one field of the key each, or in
order, count or group (``dist``, ``_gloo_mismatch_worker.py``).

Its two-rank behaviour on compiled graphs (a graph made to differ by rank raises on both ranks,
naming the first differing collective, instead of hanging; flight-recorder entries get FX nodes
and source lines) is tested on 2 gloo ranks in tests/test_comms.py (``dist``).
"""

from __future__ import annotations

import dataclasses
import re
import uuid

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from _gloo_mismatch_worker import FIELD_CHANGES, mismatch_worker
from _gloo_ranks import run_ranks
from inductor_ext import presets
from inductor_ext.config import ExtOptionError
from inductor_ext.comms_passes.collective_check import agree, flight_recorder
from inductor_ext.comms_passes.collective_check.fingerprint import (
    Collective, GraphCollectives, describe_graph, first_difference, user_frame,
)
from inductor_ext.comms_passes.collective_check.graph_pass import CollectiveCheckPass, _check_option, _label, insert_check
from inductor_ext.lowering.passes import build_stages


@pytest.fixture
def fake_world():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    assert not dist.is_initialized()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    yield dist.group.WORLD
    dist.destroy_process_group()


def _collectives(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    full = funcol.all_gather_single(w, 0, dist.group.WORLD)
    y = full @ x
    part = funcol.reduce_scatter_single(y, "sum", 0, dist.group.WORLD)
    return funcol.all_reduce(part.sum(), "sum", dist.group.WORLD)


def _traced(rows: int = 4) -> torch.fx.GraphModule:
    """The ATen graph of ``_collectives`` as Dynamo + AOTAutograd give it (with stack traces)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(_collectives, backend=aot_autograd(fw_compiler=capture))(torch.randn(4, 8), torch.randn(rows, 4))
    torch._dynamo.reset()
    return graphs[0]


def test_user_frame_is_the_innermost_line_outside_torch_and_ext():
    import os

    torch_file = os.path.join(os.path.dirname(torch.__file__), "distributed", "_functional_collectives.py")
    trace = (f'  File "/home/me/train.py", line 10, in step\n    loss = model(x)\n'
             f'  File "/home/me/model.py", line 42, in forward\n    return self.head(h)\n'
             f'  File "{torch_file}", line 229, in all_gather_single\n    tensor = torch.ops.x()\n')
    assert user_frame(trace) == "/home/me/model.py:42: return self.head(h)"
    only_torch = f'  File "{torch_file}", line 229, in all_gather_single\n    tensor = torch.ops.x()\n'
    assert user_frame(only_torch) == f"{torch_file}:229: tensor = torch.ops.x()"
    assert user_frame(None) == "" and user_frame("no frames here") == ""


def test_where_names_the_node_the_bucket_and_the_users_line():
    """What a mismatch report says of a collective's origin: a bucket lists its first four nodes."""
    ag = Collective("all_gather", "all_gather_into_tensor.default", "0", 2, ("float32",), ("[4]",), ("[8]",), "")
    assert ag.where() == "FX node unknown; source line unknown"
    four = dataclasses.replace(ag, node="ag_3", source="model.py:7: h = self.w(x)", bucket_of=("a", "b", "c", "d"))
    assert four.where() == "FX node ag_3; a bucket of 4 (a, b, c, d); from model.py:7: h = self.w(x)"
    five = dataclasses.replace(four, bucket_of=("a", "b", "c", "d", "e"))
    assert five.where() == "FX node ag_3; a bucket of 5 (a, b, c, d, ...); from model.py:7: h = self.w(x)"


def test_what_lists_every_operand_and_the_digest_is_16_bytes():
    two = Collective("all_gather", "all_gather_into_tensor_coalesced.default", "0", 2, ("float32", "bfloat16"),
                     ("[4]", "[2]"), ("[8]", "[4]"), "")
    assert two.what() == "all_gather of float32[4], bfloat16[2] -> [8], [4] over 2 ranks"
    assert len(GraphCollectives("g", (two,)).digest("0")) == 16  # what agree's all-gather exchanges per rank
    assert describe_graph(iter(()), "compiled forward graph [0/0]") == GraphCollectives("compiled forward graph [0/0]", ())


def test_user_frame_without_a_code_line_names_file_and_line_only():
    """A frame whose code line is missing (source not available) gives ``file:line``, never the next
    frame's header as its code, also when it is the last line."""
    trace = ('  File "/home/me/model.py", line 42, in forward\n'
             '  File "/home/me/layers.py", line 7, in f\n    return g(x)\n')
    assert user_frame(trace) == "/home/me/layers.py:7: return g(x)"
    assert user_frame('  File "/home/me/model.py", line 42, in forward') == "/home/me/model.py:42"
    assert user_frame(trace.replace("    return g(x)\n", "")) == "/home/me/layers.py:7"


def test_description_names_kind_group_dtype_sizes_and_order(fake_world):
    desc = describe_graph(_traced().graph.nodes, "g")
    kinds = [c.kind for c in desc.collectives]
    assert kinds == ["all_gather", "reduce_scatter", "all_reduce"]
    ag, rs, ar = desc.collectives
    assert (ag.dtypes, ag.in_shapes, ag.out_shapes, ag.group_size) == (("float32",), ("[4, 4]",), ("[8, 4]",), 2)
    assert rs.extra == "reduce_op=sum" and ar.out_shapes == ("[]",)
    assert ag.group == rs.group == ar.group == desc.groups()[0]
    assert __file__ in ag.source and "all_gather_single(w" in ag.source  # the user's line
    # round trip through the op's argument
    assert GraphCollectives.from_json(desc.to_json()) == desc
    # digests: equal for equal sequences, different for another size, another order
    same = describe_graph(_traced().graph.nodes, "other label")
    other = describe_graph(_traced(rows=6).graph.nodes)
    group = desc.groups()[0]
    assert desc.digest(group) == same.digest(group) != other.digest(group)
    swapped = GraphCollectives("g", (rs, ag, ar))
    assert swapped.digest(group) != desc.digest(group)
    assert first_difference(desc.collectives, other.collectives) == 0
    assert first_difference(desc.collectives, same.collectives) is None
    assert first_difference(desc.collectives, desc.collectives[:2]) == 2


def test_mismatch_report_names_the_first_difference_on_each_side(fake_world):
    a = describe_graph(_traced().graph.nodes, "compiled forward graph [0/0]")
    b = describe_graph(_traced(rows=6).graph.nodes, "compiled forward graph [0/0]")
    group = a.groups()[0]
    text = agree.mismatch_report(group, [a, b, a], me=2, ranks=[0, 1, 2])
    assert "collective #0" in text and "group rank 2" in text
    assert "rank 0: all_gather of float32[4, 4] -> [8, 4]" in text
    assert "rank 1: all_gather of float32[6, 4] -> [12, 4]" in text
    assert text.count("FX node all_gather_into_tensor") == 2 and __file__ in text
    assert 'options={"collective_check": False}' in text
    shorter = GraphCollectives("g", a.collectives[:1])
    text = agree.mismatch_report(group, [a, shorter], me=0, ranks=[0, 1])
    assert "collective #1" in text and "rank 1: nothing (its graph ends after 1 collectives)" in text


def test_pass_is_on_by_default_when_distributed_and_off_by_option():
    assert not dist.is_initialized()
    config = presets.resolve({"preset": "cpu", "passes": ["fsdp_overlap"]})
    assert not CollectiveCheckPass.enabled(config)  # nothing to agree with
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        stages = build_stages(config)
        names = [p.name for p in stages["post_grad_post"].passes]
        assert names == ["fsdp_overlap", "collective_check"]  # after the passes that bucket
        off = presets.resolve({"preset": "cpu", "collective_check": False})
        assert "collective_check" not in [p.name for s in build_stages(off).values() for p in s.passes]
        timed = presets.resolve({"preset": "cpu", "collective_check": {"timeout_s": 5}})
        assert CollectiveCheckPass(timed).timeout_s == 5.0
    finally:
        dist.destroy_process_group()
    for bad in ("yes", {"timeout": 5}, {"timeout_s": 0}):
        with pytest.raises(ExtOptionError, match=r"collective_check.*expected True, False or \{'timeout_s'"):
            presets.resolve({"preset": "cpu", "collective_check": bad})


def test_the_option_takes_a_bool_or_a_positive_timeout_and_names_a_bad_value():
    """``True``/``False`` or ``{'timeout_s': seconds > 0}`` (an int becomes a float); anything else,
    a bool for seconds among them, is refused naming the value."""
    assert _check_option("collective_check", True) is True and _check_option("collective_check", False) is False
    timed = _check_option("collective_check", {"timeout_s": 5})
    assert timed == {"timeout_s": 5.0} and type(timed["timeout_s"]) is float
    assert _check_option("collective_check", {"timeout_s": 0.5}) == {"timeout_s": 0.5}  # any positive time
    default = presets.resolve({"preset": "cpu", "collective_check": {}})
    assert CollectiveCheckPass(default).timeout_s == agree.DEFAULT_TIMEOUT_S
    assert not dist.is_initialized() and CollectiveCheckPass(default).run(torch.fx.symbolic_trace(lambda x: x + 1).graph) == 0
    for bad in ({"timeout_s": True}, {"timeout_s": -1.5}, {"timeout_s": "5"}, {"timeout_s": 5, "x": 1}, 1, None):
        with pytest.raises(ExtOptionError) as refused:
            _check_option("collective_check", bad)
        assert str(refused.value) == (f"options['collective_check'] = {bad!r}: expected True, False or "
                                      "{'timeout_s': seconds > 0}")


def test_the_label_says_forward_or_backward_from_the_graph_inputs():
    """AOTAutograd names a forward graph's inputs ``primals_*`` and a backward's ``tangents_*``."""
    def graph(*names: str) -> torch.fx.Graph:
        g = torch.fx.Graph()
        g.output(tuple(g.placeholder(n) for n in names))
        return g

    assert _label(graph("primals_1", "primals_2")) == "compiled forward graph"
    assert _label(graph("primals_1", "tangents_1")) == "compiled backward graph"
    assert _label(graph("x", "y")) == "compiled graph"


def test_insert_check_orders_each_groups_first_collective_after_it(fake_world):
    gm = _traced()
    token = insert_check(gm.graph, "g", timeout_s=7)
    gm.recompile()
    nodes = list(gm.graph.nodes)
    assert token is nodes[2]  # right after the two inputs
    assert token.args[1:] == (torch.device("cpu"), 7.0)
    control = [n for n in nodes if n.target is torch.ops.higher_order.control_deps]
    assert len(control) == 1 and control[0].args[0] == (token,)  # one group: its first collective
    assert control[0].name == "all_gather_into_tensor"  # renamed back: descriptions still match
    assert GraphCollectives.from_json(token.args[0]).collectives[0].node == "all_gather_into_tensor"
    assert insert_check(torch.fx.symbolic_trace(lambda x: x + 1).graph) is None  # no collectives


def test_the_token_is_made_on_the_first_collectives_device():
    """The device comes from the first collective's value (of a list, its first element); a node
    without a tensor value gives the CPU."""
    from inductor_ext.comms_passes.collective_check.graph_pass import _device

    node = torch.fx.Graph().placeholder("x")
    node.meta["val"] = [torch.empty(2, device="meta"), torch.empty(2)]
    assert _device(node) == torch.device("meta")
    node.meta["val"] = torch.empty(2, device="meta")
    assert _device(node) == torch.device("meta")
    node.meta["val"] = None
    assert _device(node) == torch.device("cpu")


def test_insert_check_goes_after_every_input_and_adds_to_a_pinned_collective(fake_world):
    """With three inputs the check still comes right after the last; its token has a value for later
    passes (an empty uint8 tensor); the label defaults to the graph's; and a first collective that
    is already pinned (fsdp_overlap's control_deps, here a first check's) gets the token as one more
    dependency, its other arguments kept."""
    gm = _traced()
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    with gm.graph.inserting_after(inputs[-1]):
        extra = gm.graph.placeholder("extra")
    first = insert_check(gm.graph)
    assert first.prev is extra and GraphCollectives.from_json(first.args[0]).label == "compiled graph"
    val = first.meta["val"]
    assert val.shape == (0,) and val.dtype == torch.uint8 and val.device == torch.device("cpu")
    (pinned,) = [n for n in gm.graph.nodes if n.target is torch.ops.higher_order.control_deps]
    rest = pinned.args[1:]
    second = insert_check(gm.graph, "g")
    assert pinned.args[0] == (first, second) and pinned.args[1:] == rest


def test_compiled_graph_checks_before_its_first_collective(fake_world):
    """backend="ext" with the pass on: the op is in the generated code, before the first
    collective, and runs (groups of the fake backend never communicate, so it returns)."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    calls = agree.stats["calls"]
    compiled = torch.compile(_collectives, backend="ext", options={"preset": "cpu"})
    _, (code, *_) = run_and_get_code(compiled, torch.randn(4, 8), torch.randn(4, 4))
    body = code[code.index("def call"):]
    check = body.index("torch.ops.inductor_ext.collective_check.default(")
    first = re.search(r"torch\.ops\._c10d_functional\.(?!wait)\w+\.default\(", body).start()
    assert check < first
    assert agree.stats["calls"] == calls + 1
    compiled(torch.randn(4, 8), torch.randn(4, 4))
    assert agree.stats["calls"] == calls + 2
    torch._dynamo.reset()


def _one(group: str, label: str) -> GraphCollectives:
    return GraphCollectives(label, (Collective("all_reduce", "all_reduce.default", group, 2, ("float32",), ("[]",),
                                               ("[]",), "reduce_op=sum"),))


def test_a_spec_is_agreed_on_once_per_process_and_every_call_counted(monkeypatch):
    """The first call asks the other ranks, once per group of the graph (sorted: every rank in the
    same order); later calls return at once. One that failed is asked again, never taken as agreed."""
    agreed = []
    monkeypatch.setattr(agree, "_agree", lambda graph, name, timeout_s: agreed.append((name, timeout_s)))
    label = f"graph {uuid.uuid4().hex}"  # a spec no other test verified in this process
    spec = GraphCollectives(label, (*_one("g1", label).collectives, *_one("g0", label).collectives)).to_json()
    calls = agree.stats["calls"]
    for _ in range(3):
        token = agree.check_op(spec, torch.device("cpu"), 7.0)
    agree.verify(spec)
    assert agreed == [("g0", 7.0), ("g1", 7.0)] and agree.stats["calls"] == calls + 3
    assert token.shape == (0,) and token.dtype == torch.uint8

    def mismatch(graph, name, timeout_s):
        agreed.append(name)
        raise agree.CollectiveMismatchError(name)

    monkeypatch.setattr(agree, "_agree", mismatch)
    failing = _one("g0", f"graph {uuid.uuid4().hex}").to_json()
    for _ in range(2):
        with pytest.raises(agree.CollectiveMismatchError):
            agree.check_op(failing, torch.device("cpu"), 7.0)
    assert agreed[2:] == ["g0", "g0"]


def test_a_group_of_the_fake_backend_is_never_asked(fake_world):
    checks, collectives = agree.stats["checks"], agree.stats["collectives"]
    agree._agree(_one(fake_world.group_name, "g"), fake_world.group_name, 1.0)
    assert (agree.stats["checks"], agree.stats["collectives"]) == (checks, collectives)


def test_a_dump_without_entries_is_returned_as_it_is():
    assert flight_recorder.annotate({"version": "2.10"}) == {"version": "2.10"}


def test_the_check_remembers_the_output_module_that_called_it(monkeypatch):
    """For the flight recorder: the Inductor output module (a file under Inductor's cache folder) a
    few frames above the check is mapped to the graph's description."""
    from pathlib import Path

    from torch._inductor.runtime.cache_dir_utils import cache_dir

    monkeypatch.setattr(agree, "_agree", lambda graph, name, timeout_s: None)
    graph = _one("g0", f"graph {uuid.uuid4().hex}")
    module = str(Path(cache_dir()) / "ab" / f"c{uuid.uuid4().hex}.py")
    code = compile("def call(spec):\n    return check(spec)\n", module, "exec")
    namespace = {"check": lambda spec: agree.check_op(spec, torch.device("cpu"), 1.0)}
    exec(code, namespace)
    try:
        namespace["call"](graph.to_json())
        assert agree._code_files[module] == graph
    finally:
        agree._code_files.pop(module, None)


def test_flight_recorder_entries_get_node_and_source(tmp_path):
    ag = Collective("all_gather", "all_gather_into_tensor.default", "0", 2, ("bfloat16",), ("[4]",),
                    ("[8]",), "", node="all_gather_into_tensor_3", source="model.py:7: h = self.w(x)",
                    bucket_of=("all_gather_into_tensor", "all_gather_into_tensor_1"))
    rs = Collective("reduce_scatter", "reduce_scatter_tensor.default", "0", 2, ("float32",), ("[8]",),
                    ("[4]",), "reduce_op=avg", node="reduce_scatter_tensor", source="model.py:8: y = f(h)")
    code = tmp_path / "output_code.py"
    code.write_text("def call(args):\n"
                    "    buf0 = torch.ops._c10d_functional.all_gather_into_tensor.default(a, 2, '0')\n"
                    "    torch.ops._c10d_functional.wait_tensor.default(buf0)\n"
                    "    buf1 = torch.ops._c10d_functional.reduce_scatter_tensor.default(b, 'avg', 2, '0')\n")
    agree._code_files[str(code)] = GraphCollectives("compiled backward graph [0/0]", (ag, rs))
    try:
        def entry(line, file=str(code)):
            return {"profiling_name": "gloo:all_gather",
                    "frames": [{"filename": "/torch/_ops.py", "line": 1, "name": "__call__"},
                               {"filename": file, "line": line, "name": "call"}]}

        trace = flight_recorder.annotate({"entries": [entry(2), entry(4), entry(9, "/elsewhere.py"),
                                                      entry(1, agree.__file__)]})
        first, second, other, check = trace["entries"]
        assert first["ext_fx_node"] == "all_gather_into_tensor_3" and first["ext_source"] == ag.source
        assert first["ext_bucket_of"] == ["all_gather_into_tensor", "all_gather_into_tensor_1"]
        assert first["ext_graph"] == "compiled backward graph [0/0]"
        assert second["ext_fx_node"] == "reduce_scatter_tensor" and "avg" in second["ext_collective"]
        assert not any(k.startswith("ext") for k in other)
        assert "collective check" in check["ext_note"]
        # a module whose collectives no longer match the description: said, not guessed
        agree._code_files[str(code)] = GraphCollectives("g", (ag,))
        flight_recorder._collective_lines.cache_clear()
        (lone,) = flight_recorder.annotate({"entries": [entry(2)]})["entries"]
        assert "ext_fx_node" not in lone and "issues 2 collectives, its description 1" in lone["ext_note"]
    finally:
        agree._code_files.pop(str(code), None)
        flight_recorder._collective_lines.cache_clear()


# ----------------------------------------------------------------------------------------------
# Two gloo ranks whose descriptions differ in one thing: each field of the key, the order, the
# count, the group. Hand-made descriptions through the check's run-time side (agree.verify), so
# the only cost is two processes and a few 16-byte all-gathers. (A graph made to differ by rank,
# compiled, is test_comms's ``test_collective_check_names_the_first_differing_collective``.)
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mismatched_ranks(tmp_path_factory):
    return run_ranks(mismatch_worker, tmp_path_factory.mktemp("gloo_mismatch"), deadline_s=240)


def _error(ranks: list, case: str, first: int) -> list[str]:
    """Both ranks' errors for ``case``: a mismatch found at once (not the timeout), naming
    collective #first and this rank."""
    errors = []
    for rank, r in enumerate(ranks):
        got = r[case]
        err = got["error"]
        assert err is not None, f"rank {rank}: case {case!r} went undetected (its ranks would hang or exchange wrong data)"
        assert err.startswith("CollectiveMismatchError") and f"collective #{first} on this group" in err, err
        assert f"graph of case {case} on group rank {rank}" in err and got["seconds"] < 15, (err, got["seconds"])
        errors.append(err)
    return errors


@pytest.mark.dist
@pytest.mark.parametrize("field", FIELD_CHANGES)
def test_each_field_of_the_key_is_agreed_on_by_two_gloo_ranks(mismatched_ranks, field):
    for err in _error(mismatched_ranks, field, 1):
        (differ,) = re.findall(r"they differ in (.*)", err)
        assert differ.startswith(f"{field} (") and differ.count(" vs ") == 1, differ  # that field only
        assert "model.py:8: y = self.b(h)" in err  # where it came from, on each side


@pytest.mark.dist
def test_a_dtype_only_mismatch_names_both_dtypes(mismatched_ranks):
    """fp32 on one rank, bf16 on the other, same shapes: the case that removing the dtypes from
    the key would let hang."""
    for err in _error(mismatched_ranks, "dtypes", 1):
        assert "rank 0: reduce_scatter reduce_op=sum of float32[8, 8] -> [4, 8] over 2 ranks" in err
        assert "rank 1: reduce_scatter reduce_op=sum of bfloat16[8, 8] -> [4, 8] over 2 ranks" in err
        assert "they differ in dtypes (('float32',) vs ('bfloat16',))" in err


@pytest.mark.dist
def test_order_count_and_group_of_the_collectives_are_agreed_on(mismatched_ranks):
    assert all(r["groups_sorted"] for r in mismatched_ranks)  # else "group" would wait for the timeout
    for err in _error(mismatched_ranks, "order", 0):  # the same collectives, swapped
        assert "rank 0: all_gather of float32[4, 8]" in err and "rank 1: reduce_scatter" in err
    for err in _error(mismatched_ranks, "count", 2):
        assert "rank 1: nothing (its graph ends after 2 collectives)" in err
    for err in _error(mismatched_ranks, "group", 1):  # on the shared group, rank 1 skips the reduce-scatter
        assert "rank 0: reduce_scatter" in err and "rank 1: all_reduce" in err
    for r in mismatched_ranks:
        assert r["agree"]["error"] is None  # equal sequences pass
