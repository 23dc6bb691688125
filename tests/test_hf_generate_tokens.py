"""bench/hf_generate.py: where an arm's greedy tokens leave eager's, the JSON says whether eager
itself had a near-tie there (a bf16 tie another summation order breaks) or a clear winner (a wrong
answer to look into)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import hf_generate  # noqa: E402


def _logits(step_values: list[dict[int, float]], vocab: int = 8) -> tuple[torch.Tensor, ...]:
    """One (1, vocab) fp32 row per generated step, as generate(output_logits=True) returns."""
    steps = []
    for values in step_values:
        row = torch.zeros(1, vocab)
        for token, value in values.items():
            row[0, token] = value
        steps.append(row)
    return tuple(steps)


PROMPT = torch.tensor([[5, 6]])


def test_a_bf16_tie_is_a_near_tie():
    ref = torch.cat([PROMPT, torch.tensor([[1, 3, 2]])], 1)
    arm = torch.cat([PROMPT, torch.tensor([[1, 4, 4]])], 1)
    steps = _logits([{1: 1.0}, {3: 2.234375, 4: 2.234375}, {2: 1.0}])
    d = hf_generate.token_difference(ref, arm, steps, prompt=2, dtype=torch.bfloat16)
    assert d == {"first_step": 1, "eager_token": 3, "arm_token": 4, "eager_logit_margin": 0.0,
                 "logit_unit": 0.015625, "near_tie": True}


def test_a_clear_winner_that_another_arm_missed_is_no_tie():
    ref = torch.cat([PROMPT, torch.tensor([[3]])], 1)
    arm = torch.cat([PROMPT, torch.tensor([[4]])], 1)
    steps = _logits([{3: 2.5, 4: 2.25}])
    d = hf_generate.token_difference(ref, arm, steps, prompt=2, dtype=torch.bfloat16)
    assert d["first_step"] == 0 and d["eager_logit_margin"] == 0.25 and not d["near_tie"], d
    # in fp32 the unit is far smaller: a margin a bf16 model cannot see is still a clear one there
    steps = _logits([{3: 2.2303, 4: 2.2288}])
    d = hf_generate.token_difference(ref, arm, steps, prompt=2, dtype=torch.float32)
    assert d["logit_unit"] < 1e-6 and not d["near_tie"], d
    assert hf_generate.token_difference(ref, arm, steps, prompt=2, dtype=torch.bfloat16)["near_tie"]


def test_a_row_whose_arm_generates_other_tokens_says_where(monkeypatch):
    """measure_row end to end on tiny widths: an "inductor" arm that is eager with its lm_head
    changed (nothing compiles) generates other tokens; the row names the first step that differs."""
    import argparse

    def arm_with_other_weights(arm: str, model: torch.nn.Module) -> torch.nn.Module:
        if arm != "eager":
            other = torch.randn(model.lm_head.weight.shape, generator=torch.Generator().manual_seed(3))
            with torch.no_grad():
                model.lm_head.weight.copy_(other)
        return model

    monkeypatch.setattr(hf_generate, "compile_arm", arm_with_other_weights)
    args = argparse.Namespace(arms=["eager", "inductor"], reps=1, new_tokens=3, prompt=4, prefill=32, eager_once=False)
    row = hf_generate.measure_row(hf_generate.Row("llama", "dynamic", "float32"), args, hf_generate.QUICK, 30e9)
    assert row["same_tokens_as_eager"] == {"eager": True, "inductor": False}
    d = row["token_differences"]["inductor"]
    assert d["first_step"] == 0 and d["eager_logit_margin"] > d["logit_unit"] and not d["near_tie"], d
    assert "graphs_ms" not in row["arms"]["inductor"]  # nothing compiled, nothing to split
