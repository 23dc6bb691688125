"""``torch.compile(model, backend="ext")`` on CPU matches eager: forward, no_grad forward, a training step.

Each model is compiled once per module (grad and no_grad graphs, built by its fixture) and
every test checks against a deep copy of the model taken at the start of the test. A spy on
``inductor_ext.backend.resolve_config`` proves that Dynamo's ``"ext"`` really is our backend.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import inductor_ext.backend as ext_backend_module
from inductor_ext.config import ExtConfig
from inductor_ext.models.transformer_block import TransformerBlock

RTOL, ATOL = 1e-4, 1e-5  # fp32
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-5


# --- models ---------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, d_in=16, hidden=32, d_out=8):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.gelu(self.fc1(x)))))


class ConvNet(nn.Module):
    """conv - batchnorm (train mode: batch statistics, running stats updated) - relu - pool, twice."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.adaptive_avg_pool2d(F.relu(self.bn2(self.conv2(x))), 1)
        return self.fc(torch.flatten(x, 1))


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@dataclass
class Case:
    model: nn.Module  # the eager module; its parameters are the compiled module's
    compiled: Callable[..., torch.Tensor]
    inputs: torch.Tensor
    loss: Callable[[torch.Tensor], torch.Tensor]
    compiles: int = 0  # ext backend calls while the fixture built the grad and no_grad graphs


def _mse_to(target):
    return lambda out: F.mse_loss(out, target)


def _cross_entropy_to(labels):
    return lambda out: F.cross_entropy(out, labels)


MODEL_SPECS = {
    "mlp": (MLP, (4, 16), lambda: _mse_to(_randn(4, 8, seed=11))),
    "transformer": (TransformerBlock, (2, 8, 32), lambda: _mse_to(_randn(2, 8, 32, seed=12))),
    "convnet": (ConvNet, (2, 3, 16, 16), lambda: _cross_entropy_to(torch.tensor([1, 7]))),
}


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ext_calls():
    """Every call of the ext backend in this module, as the ExtConfig it resolved."""
    calls: list[ExtConfig] = []
    real = ext_backend_module.resolve_config

    def spy(*args, **kwargs):
        config, patches = real(*args, **kwargs)
        calls.append(config)
        return config, patches

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ext_backend_module, "resolve_config", spy)
        yield calls
    torch._dynamo.reset()  # leave no compiled frames holding our models behind


@pytest.fixture(scope="module", params=list(MODEL_SPECS))
def case(request, ext_calls):
    cls, shape, make_loss = MODEL_SPECS[request.param]
    torch.manual_seed(0)
    model = cls().train()
    compiled = torch.compile(model, backend="ext")
    c = Case(model, compiled, _randn(*shape, seed=1), make_loss())
    before = len(ext_calls)
    # Build both graphs once: the training graph (forward and, lazily, backward) and the
    # inference graph. Tests after this must not compile again.
    compiled(c.inputs).sum().backward()
    with torch.no_grad():
        compiled(c.inputs)
    model.zero_grad(set_to_none=True)
    c.compiles = len(ext_calls) - before
    return c


def _assert_close(actual, expected, what, rtol=RTOL, atol=ATOL):
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert torch.allclose(actual, expected, rtol=rtol, atol=atol), (
        f"{what}: max abs diff {(actual - expected).abs().max().item():.3g}")


def _assert_same_state(model, ref, what, rtol=RTOL, atol=ATOL):
    for (name, a), (_, b) in zip(model.state_dict().items(), ref.state_dict().items()):
        if a.is_floating_point():
            _assert_close(a, b, f"{what}: {name}", rtol, atol)
        else:
            assert torch.equal(a, b), f"{what}: {name}"


# --- tests ----------------------------------------------------------------------------------


def test_ext_is_a_registered_dynamo_backend():
    assert "ext" in torch._dynamo.list_backends()
    assert torch._dynamo.lookup_backend("ext") is ext_backend_module.ext_backend


def test_ext_backend_compiled_each_model(case, ext_calls):
    # One Dynamo graph with grad, one without: no graph breaks, both through the ext backend.
    assert case.compiles == 2
    assert all(c.preset == "cpu" and c.autotune == "model" for c in ext_calls)


def test_forward_matches_eager(case):
    ref = copy.deepcopy(case.model)
    out = case.compiled(case.inputs)
    expected = ref(case.inputs)
    assert out.requires_grad and out.grad_fn is not None
    _assert_close(out, expected, "forward")
    _assert_same_state(case.model, ref, "state after forward")  # batchnorm running stats


def test_no_grad_forward_matches_eager(case):
    ref = copy.deepcopy(case.model)
    with torch.no_grad():
        out = case.compiled(case.inputs)
        expected = ref(case.inputs)
    assert not out.requires_grad
    _assert_close(out, expected, "no_grad forward")
    _assert_same_state(case.model, ref, "state after no_grad forward")


def test_training_step_matches_eager(case, ext_calls):
    before = len(ext_calls)
    ref = copy.deepcopy(case.model)
    opt = torch.optim.SGD(case.model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(2):  # the second step runs on updated weights and momentum
        opt.zero_grad(set_to_none=True)
        ref_opt.zero_grad(set_to_none=True)
        loss = case.loss(case.compiled(case.inputs))
        ref_loss = case.loss(ref(case.inputs))
        _assert_close(loss, ref_loss, f"step {step}: loss")
        loss.backward()
        ref_loss.backward()
        params = dict(case.model.named_parameters())
        ref_params = dict(ref.named_parameters())
        assert params.keys() == ref_params.keys()
        for name, p in params.items():
            assert p.grad is not None, f"step {step}: no gradient for {name}"
            _assert_close(p.grad, ref_params[name].grad, f"step {step}: grad of {name}", GRAD_RTOL, GRAD_ATOL)
        opt.step()
        ref_opt.step()
        _assert_same_state(case.model, ref, f"step {step}: state after SGD step", GRAD_RTOL, GRAD_ATOL)
    assert len(ext_calls) == before, "the training step recompiled"


def test_compile_counter_with_ext_backend(ext_calls):
    """Through Dynamo's own CompileCounterWithBackend("ext"): one frame, compiled by ext."""
    counter = torch._dynamo.testing.CompileCounterWithBackend("ext")
    torch.manual_seed(0)
    model = MLP()
    before = len(ext_calls)
    with torch.no_grad():
        out = torch.compile(model, backend=counter)(_randn(4, 16, seed=2))
        expected = model(_randn(4, 16, seed=2))
    assert counter.frame_count == 1
    assert len(ext_calls) == before + 1
    _assert_close(out, expected, "forward via CompileCounterWithBackend")


# --- autotune="quick" on CPU ----------------------------------------------------------------

# Run in a fresh interpreter: Inductor caches its choices handler per thread on first use
# (see test_second_compile_uses_its_own_options below), and caches would skip the lowering
# whose decisions we read.
QUICK_SCRIPT = textwrap.dedent("""
    import copy, json, sys
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, sys.argv[1])
    from test_backend_models import MLP, _randn
    import inductor_ext.backend as backend
    from inductor_ext.lowering import decision_record, ext_choices

    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    configs = []
    real = backend.resolve_config
    def spy(*args, **kwargs):
        config, patches = real(*args, **kwargs)
        configs.append(config)
        return config, patches
    backend.resolve_config = spy

    torch.manual_seed(0)
    model = MLP()
    ref = copy.deepcopy(model)
    x, target = _randn(4, 16, seed=1), _randn(4, 8, seed=2)
    compiled = torch.compile(model, backend="ext", options={"autotune": "quick"})
    out = compiled(x)
    F.mse_loss(out, target).backward()
    expected = ref(x)
    F.mse_loss(expected, target).backward()
    grads_match = all(torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-5)
                      for p, q in zip(model.parameters(), ref.parameters()))
    print(json.dumps({
        "configs": [(c.preset, c.autotune, list(c.templates)) for c in configs],
        "forward_match": torch.allclose(out, expected, rtol=1e-4, atol=1e-5),
        "grads_match": grads_match,
        "decisions": [{"op": d.op, "winner": d.winner, "reason": d.reason,
                       "kinds": [c["kind"] for c in d.candidates]} for d in decision_record.decisions],
    }))
""")


def test_autotune_quick_on_cpu_falls_back_to_aten():
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "INDUCTOR_EXT_DUMP_DIR")}
    proc = subprocess.run([sys.executable, "-c", QUICK_SCRIPT, os.path.dirname(__file__)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["configs"] == [["cpu", "quick", ["cpp.gemm", "cpp.decode_attention", "cpp.flash_attention"]]]
    assert result["forward_match"] and result["grads_match"]
    decisions = result["decisions"]
    # Forward: two addmm (fc1 and fc2; fc3 too); backward: mm for the weight/input gradients.
    assert {d["op"] for d in decisions} == {"mm", "addmm"}, decisions
    for d in decisions:
        assert d["winner"] == d["op"], d  # the ATen kernel, named after its op
        assert d["kinds"] == ["aten"], d  # no C++ template candidate was offered for training
        assert d["reason"].startswith("fallback: ") and "not a compile-time constant" in d["reason"], d


# --- one compile's options never leak into the next ----------------------------------------


class _Second(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        return self.fc(x)


def test_second_compile_uses_its_own_options():
    # Inductor caches its choices handler per thread; ext installs its own for each compile.
    from torch._inductor.virtualized import V
    from inductor_ext.lowering import decision_record, ext_choices

    x = _randn(4, 16, seed=3)
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False), torch.no_grad():
        torch.compile(_Second(), backend="ext")(x)  # autotune "off"; V.choices now exists
        n = len(decision_record.decisions)
        torch.compile(_Second(), backend="ext", options={"autotune": "quick"})(x)
        assert len(decision_record.decisions) > n  # the quick compile considered templates
        assert not isinstance(V.choices, ext_choices.ExtChoices)  # and put Inductor's back
        n = len(decision_record.decisions)
        torch.compile(_Second(), backend="inductor")(x)
        assert len(decision_record.decisions) == n  # plain Inductor never sees ext
