"""The model zoo on the cpu preset (Inductor's C++ codegen, ext's C++ GEMM and decode attention
families autotuned against ATen): every model under ``torch.no_grad`` and ``torch.inference_mode``,
one training step, and greedy ``generate()`` with a static and a dynamic KV cache, each against
eager. The default run holds the cases without the ``zoo`` mark; ``pytest -m zoo`` runs the rest."""

from __future__ import annotations

import pytest
import torch

import zoo_models as zoo

CPU = {"preset": "cpu"}

# The default run: the models the device presets leave out, once each (T5's training step alone took
# minutes: its backward holds twice a decoder's GEMMs); the decoder and the MoE train on blackwell
# by default, and everything else runs on `-m zoo`.
DEFAULT_INFERENCE = {("bert", "inference_mode"), ("vit", "no_grad"), ("t5", "no_grad")}
DEFAULT_TRAINING: set[str] = set()
DEFAULT_GENERATE = {("gpt2", "static")}


def _cases(all_cases, default):
    return [pytest.param(*c if isinstance(c, tuple) else (c,), marks=() if c in default else pytest.mark.zoo)
            for c in all_cases]


@pytest.mark.parametrize("name, mode", _cases([(m, g) for m in zoo.MODELS for g in ("no_grad", "inference_mode")],
                                              DEFAULT_INFERENCE))
def test_inference_matches_eager(name: str, mode: str) -> None:
    zoo.check_inference(name, CPU, getattr(torch, mode))


@pytest.mark.parametrize("name", _cases(zoo.MODELS, DEFAULT_TRAINING))
def test_training_step_matches_eager(name: str) -> None:
    zoo.check_training_step(name, CPU)


@pytest.mark.parametrize("name, cache", _cases([(m, c) for m in zoo.GENERATIVE for c in ("static", "dynamic")],
                                               DEFAULT_GENERATE))
def test_generate_matches_eager(name: str, cache: str) -> None:
    zoo.check_generate(name, CPU, cache)


@pytest.mark.zoo
def test_weights_made_under_inference_mode() -> None:
    """A model built (weights created) inside ``torch.inference_mode()``, as serving code does."""
    torch._dynamo.reset()
    with torch.inference_mode():
        model = zoo.build("llama")
        batch = zoo.inputs("llama")
        want = model(**batch).logits
        got = zoo.compile_ext(model, CPU)(**batch).logits
    zoo.assert_close(got, want, "llama built under inference_mode")
