"""The model zoo: Hugging Face architectures at random-init tiny sizes, built from configs (nothing
is downloaded; HF_HUB_OFFLINE=1 is set before transformers is imported), and the checks every
preset's zoo tests run on them against eager.

Sizes: hidden 32-64, 2 layers, sequence 8, vocabulary 128. Dropout is 0 so a training step is
deterministic and comparable with eager.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Callable

os.environ["HF_HUB_OFFLINE"] = "1"  # no hub access here: a config that reached for it must fail, not hang

import torch  # noqa: E402
import transformers  # noqa: E402

MODELS = ("llama", "mixtral", "gpt2", "bert", "t5", "vit")
GENERATIVE = ("llama", "mixtral", "gpt2", "t5")  # the ones with generate() and a KV cache
VOCAB, SEQ, BATCH = 128, 8, 2
NEW_TOKENS = 3

# fp32 throughout: compiled kernels may sum in another order than eager, nothing more. A kernel that
# computed in TF32 or bf16 is off by ~1e-3 relative and fails these.
FP32_TOL = {"atol": 2e-5, "rtol": 2e-4}
GRAD_TOL = {"atol": 5e-5, "rtol": 1e-3}  # backward sums over the batch and sequence once more


def _config(name: str) -> transformers.PretrainedConfig:
    if name == "llama":
        return transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    if name == "mixtral":
        return transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                          num_local_experts=4, num_experts_per_tok=2)
    if name == "gpt2":
        return transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    if name == "bert":
        return transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=64, max_position_embeddings=64,
                                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if name == "t5":
        return transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                     dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    if name == "vit":
        return transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=64, num_labels=10,
                                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    raise ValueError(f"unknown zoo model {name!r}; the zoo has {', '.join(MODELS)}")


_CLASSES: dict[str, Callable[[Any], torch.nn.Module]] = {
    "llama": transformers.LlamaForCausalLM, "mixtral": transformers.MixtralForCausalLM,
    "gpt2": transformers.GPT2LMHeadModel, "bert": transformers.BertForMaskedLM,
    "t5": transformers.T5ForConditionalGeneration, "vit": transformers.ViTForImageClassification,
}


def build(name: str) -> torch.nn.Module:
    """A fresh random-init model (the same weights for the same name), in eval mode."""
    torch.manual_seed(0)
    model = _CLASSES[name](_config(name))
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.disable_compile = True  # the test compiles forward itself, with backend="ext"
    return model.eval()


def inputs(name: str, labels: bool = False) -> dict[str, torch.Tensor]:
    """One batch for ``name`` (with ``labels`` for a loss when asked)."""
    gen = torch.Generator().manual_seed(1)
    if name == "vit":
        out = {"pixel_values": torch.randn(BATCH, 3, 16, 16, generator=gen)}
        if labels:
            out["labels"] = torch.randint(0, 10, (BATCH,), generator=gen)
        return out
    ids = torch.randint(2, VOCAB, (BATCH, SEQ), generator=gen)
    out = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if name == "t5":
        out["decoder_input_ids"] = torch.randint(2, VOCAB, (BATCH, SEQ // 2), generator=gen)
    if labels:
        out["labels"] = (out["decoder_input_ids"] if name == "t5" else ids).clone()
        out.pop("decoder_input_ids", None)  # T5 shifts the labels right itself
    return out


def compile_ext(model: torch.nn.Module, options: dict[str, Any]) -> torch.nn.Module:
    return torch.compile(model, backend="ext", options=options)


def served_since(first: int) -> set[str]:
    """The template families (not ATen) that won a GEMM in the decisions made after the first ``first``."""
    from inductor_ext.lowering import decision_record

    return {c["family"] for d in decision_record.decisions[first:] for c in d.candidates
            if c["name"] == d.winner and c["kind"] == "template"}


def _decisions() -> int:
    from inductor_ext.lowering import decision_record

    return len(decision_record.decisions)


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str, tol: dict[str, float] = FP32_TOL) -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, eager {want.dtype}"
    torch.testing.assert_close(got, want, **tol, msg=lambda m: f"{what}: {m}")


def check_inference(name: str, options: dict[str, Any], mode: Callable[[], Any] = torch.no_grad) -> set[str]:
    """Logits of the compiled model under ``mode`` (``torch.no_grad`` or ``torch.inference_mode``)
    equal eager's. Returns the template families that served a GEMM."""
    torch._dynamo.reset()
    first = _decisions()
    model = build(name)
    batch = inputs(name)
    with mode():
        want = model(**batch).logits
        got = compile_ext(model, options)(**batch).logits
    assert_close(got, want, f"{name} logits under {mode.__name__}")
    return served_since(first)


def check_training_step(name: str, options: dict[str, Any]) -> set[str]:
    """One step (forward, backward, SGD step) of the compiled model gives eager's loss, gradients
    and updated parameters. Returns the template families that served a GEMM."""
    torch._dynamo.reset()
    first = _decisions()
    eager = build(name).train()
    compiled = copy.deepcopy(eager)
    batch = inputs(name, labels=True)
    losses = []
    for model in (eager, compile_ext(compiled, options)):
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    assert_close(losses[1], losses[0], f"{name} loss")
    eager_params = dict(eager.named_parameters())
    for pname, p in compiled.named_parameters():
        want = eager_params[pname]
        if want.grad is None:
            assert p.grad is None, f"{name} {pname}: a gradient where eager has none"
            continue
        assert_close(p.grad, want.grad, f"{name} grad of {pname}", GRAD_TOL)
        assert_close(p.detach(), want.detach(), f"{name} {pname} after the step", GRAD_TOL)
    return served_since(first)


def check_generate(name: str, options: dict[str, Any], cache: str) -> None:
    """Greedy ``generate()`` with a ``static`` or ``dynamic`` KV cache, forward compiled: the same
    token ids as eager and the same logits at every step."""
    torch._dynamo.reset()
    model = build(name)
    batch = inputs(name)
    batch.pop("decoder_input_ids", None)
    kwargs = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                  return_dict_in_generate=True, cache_implementation=cache, pad_token_id=0)
    with torch.no_grad():
        want = model.generate(**batch, **kwargs)
        model.forward = torch.compile(model.forward, backend="ext", options=options)
        got = model.generate(**batch, **kwargs)
    assert torch.equal(got.sequences, want.sequences), (f"{name} {cache} cache: tokens {got.sequences.tolist()}, "
                                                       f"eager {want.sequences.tolist()}")
    assert len(got.logits) == len(want.logits) == NEW_TOKENS
    for step, (g, w) in enumerate(zip(got.logits, want.logits)):
        assert_close(g, w, f"{name} {cache} cache logits of new token {step}")
