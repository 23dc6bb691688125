"""An extern family's ``call()`` runs on every call of a compiled graph: it renders its kernel (and
hashes the source to find it loaded) once per problem and config (``templates/base.py``
``rendered``), not on every call. The launch is faked; what is counted is ``render``."""

from __future__ import annotations

import pytest
import torch

from inductor_ext.runtime import metal
from inductor_ext.runtime.kernel_source import KernelSource
from inductor_ext.templates.metal import softmax
from inductor_ext.templates.triton import topk


def _counting(monkeypatch, module):
    calls = []
    real = module.render

    def render(problem, config, target="cpu"):
        calls.append((problem, config, target))
        return real(problem, config, target)

    monkeypatch.setattr(module, "render", render)
    return calls


class _FakeKernel:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def test_topk_renders_once_per_problem_and_config(monkeypatch):
    calls = _counting(monkeypatch, topk)
    monkeypatch.setattr(topk, "load_kernel", lambda ks: _FakeKernel())
    problem = topk.example_problem(4, 64, 8, "float32")
    other = topk.example_problem(4, 128, 8, "float32")
    assert not isinstance(problem, str) and not isinstance(other, str), (problem, other)
    config = topk.FAMILY.configs(problem, "gfx950")[0]
    x = torch.randn(4, 64)
    for _ in range(3):
        topk.call(problem, config, "gfx950", x)
    assert len(calls) == 1, calls
    topk.call(other, config, "gfx950", torch.randn(4, 128))  # another problem is its own kernel
    assert len(calls) == 2, calls


def test_metal_family_renders_once_per_problem_and_config(monkeypatch):
    calls = _counting(monkeypatch, softmax)
    monkeypatch.setattr(metal, "launch", lambda *args: None)
    problem = softmax.example_problem(4, 2048, 0, "float32")
    assert not isinstance(problem, str), problem
    config = softmax.FAMILY.configs(problem, softmax.TARGETS[0])[0]
    x = torch.randn(4, 2048)
    for _ in range(3):
        softmax.call(problem, config, softmax.TARGETS[0], x)
    assert len(calls) == 1, calls


def test_a_kernel_source_hashes_its_text_once(monkeypatch):
    ks = KernelSource(name="k", source="def k(): pass\n", template="t", config={})
    first = ks.source_hash
    monkeypatch.setattr("hashlib.sha256", lambda *a: pytest.fail("hashed again"))
    assert ks.source_hash == first
