"""The decoder models that the demo, the benches and the tests build, in one place.

Plain torch only: a module here imports ``torch`` and nothing of ours, never ``torch._inductor``,
so every layer may use them, from ``demo`` down, and so may a bench script on a lent GPU machine
(torch 2.11 there); tests/test_layers.py checks it. Each model is kept as the graphs it was
written to produce: their differences are what they exercise, so they are not merged into one.

| module | model | used by |
|---|---|---|
| ``llama.py`` | Llama-style training model (GQA, RoPE, SwiGLU; loss) | ``inductor-ext comms``, bench/collective_check.py, FSDP tests |
| ``moe_block.py`` | decoder block with a dense top-k MoE | ``inductor-ext demo`` |
| ``kv_decoder.py`` | stories15M-shaped decoder with a KV cache | bench/cpu_decode.py |
| ``decode_step.py`` | one decode step, Llama or MoE (``torch._grouped_mm``) | bench/mps_decode.py |
| ``metal_block.py`` | decoder block with FP8 projection and grouped-GEMM MoE | tests/test_metal_block.py |
| ``transformer_block.py`` | pre-LayerNorm causal transformer block | tests/test_backend_models.py |
"""
