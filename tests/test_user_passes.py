"""ext composes with what the user already set: in every Inductor pass slot ext fills, the
user's own pass runs too, before ext's, and its uuid keys Inductor's FX graph cache; a user's
``torch._inductor.config.patch(...)`` context still applies under ext. One training compile
exercises all five slots (pre-grad, joint pre/post, post-grad pre/post)."""

from __future__ import annotations

import uuid

import pytest
import torch
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.utils import run_and_get_code

from inductor_ext.lowering.passes import STAGE_SLOTS, register_pass
from inductor_ext.lowering.passes.base import ExtGraphPass

LOG: list[tuple[str, str]] = []
RUN = uuid.uuid4().hex[:8]  # this session's user passes are new to Inductor's on-disk caches


class UserPass(CustomGraphPass):
    def __init__(self, slot: str, tag: str = "v1") -> None:
        self.slot, self.tag = slot, tag

    def __call__(self, graph: torch.fx.Graph) -> None:
        LOG.append((self.slot, f"user-{self.tag}"))

    def uuid(self) -> str:
        return f"user-pass-{self.slot}-{self.tag}-{RUN}"


def _ext_pass(stage: str) -> type[ExtGraphPass]:
    cls = type(f"Record_{stage}", (ExtGraphPass,), {
        "__module__": __name__, "name": f"test_record_{stage}", "stage": stage,
        "run": lambda self, graph: LOG.append((STAGE_SLOTS[self.stage], "ext")) or 0})
    return register_pass(cls)


EXT_PASSES = [_ext_pass(stage).name for stage in STAGE_SLOTS]


def _compile_and_step(tag: str, extra_options: dict | None = None) -> None:
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    compiled = torch.compile(model, backend="ext", options={"passes": EXT_PASSES, **(extra_options or {})})
    with inductor_config.patch({slot: UserPass(slot, tag) for slot in STAGE_SLOTS.values()}):
        compiled(torch.randn(4, 8)).sum().backward()


@pytest.fixture(scope="module")
def first_log() -> list[tuple[str, str]]:
    LOG.clear()
    _compile_and_step("v1")
    return list(LOG)


@pytest.mark.parametrize("slot", list(STAGE_SLOTS.values()))
def test_user_pass_runs_before_ext_in_every_slot(first_log, slot):
    order = [who for s, who in first_log if s == slot]
    assert order and order[0] == "user-v1" and "ext" in order, first_log
    # each graph the slot saw ran the user's pass, then ext's
    assert order == ["user-v1", "ext"] * (len(order) // 2), order


def test_user_pass_uuid_keys_the_fx_graph_cache(first_log):
    LOG.clear()
    _compile_and_step("v2")  # same graphs, another user pass: a cache hit would skip it
    assert {who for _, who in LOG} == {"user-v2", "ext"}, LOG


def test_user_pass_given_in_options_is_chained_too():
    LOG.clear()
    slot = STAGE_SLOTS["post_grad_pre"]
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(torch.nn.Linear(8, 8), backend="ext",
                      options={"passes": EXT_PASSES, "inductor": {slot: UserPass(slot, "opt")}})(torch.randn(2, 8))
    assert [who for s, who in LOG if s == slot][:2] == ["user-opt", "ext"], LOG


def test_user_config_patch_context_still_applies_under_ext():
    def f(x):
        return torch.relu(x) * 2

    x = torch.randn(5, 3)
    torch._dynamo.reset()
    _, (plain,) = run_and_get_code(torch.compile(f, backend="ext"), x)
    torch._dynamo.reset()
    with inductor_config.patch(size_asserts=False):
        _, (patched,) = run_and_get_code(torch.compile(f, backend="ext"), x)
    assert "assert_size_stride(arg" in plain and "assert_size_stride(arg" not in patched
