#!/bin/bash
# The slices of inductor_ext/autotune/tables/avx2-2threads.json, built from scratch: the table's
# provenance keeps only the last 512 characters of the commands that built it, so this file is
# the whole list. Run it on an idle machine of the form (AVX2, 2 threads): about 2 hours on the
# 2-core AMD EPYC that built the shipped table. Each line adds its slice to the table (--update).
#
#     bash scripts/table_recipes/avx2-2threads.sh [out.json]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-inductor_ext/autotune/tables/avx2-2threads.json}
build() { python scripts/build_decision_tables.py --out "$out" --update --threads 2 "$@"; }

# 768 wide: prefill at 1-512 tokens and decode steps over static caches of 256 and 1024 slots
build --styles llama,gpt2 --widths 768 --dtypes float32,bfloat16 --tokens 1,16,128,512 --cache-slots 256,1024
build --styles bert --widths 768 --dtypes float32,bfloat16 --tokens 16,128,512 --cache-slots ""
# 768 wide at 2048 tokens (the top of the issue's token grid)
build --styles llama,gpt2,bert --widths 768 --dtypes float32,bfloat16 --tokens 2048 --cache-slots ""
# 512 wide (llama2.c's stories42M, BERT-medium): prefill at 1-512 tokens, Llama's decode steps too
build --styles llama --widths 512 --dtypes float32,bfloat16 --tokens 1,16,128,512 --cache-slots 256,1024
build --styles bert --widths 512 --dtypes float32,bfloat16 --tokens 16,128,512 --cache-slots ""
# wider blocks, prefill only
build --styles gpt2 --widths 1024,1280 --dtypes float32,bfloat16 --tokens 16,128,512 --cache-slots ""
build --styles bert --widths 1024 --dtypes float32,bfloat16 --tokens 16,128,512 --cache-slots ""
build --styles llama --widths 2048 --dtypes float32,bfloat16 --tokens 1,16,128,512 --cache-slots ""
build --styles qwen2 --widths 1536 --dtypes float32,bfloat16 --tokens 16,128 --cache-slots ""
build --styles qwen2 --widths 896 --dtypes float32 --tokens 16,128 --cache-slots ""
build --styles mistral --widths 4096 --dtypes float32 --tokens 1,16,128 --cache-slots ""
build --styles mistral --widths 4096 --dtypes bfloat16 --tokens 16,128 --cache-slots ""
build --styles phi3 --widths 3072 --dtypes float32,bfloat16 --tokens 16,128 --cache-slots ""
build --styles gemma --widths 2304 --dtypes float32 --tokens 16,128 --cache-slots ""
