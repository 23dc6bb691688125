"""Build a decision table (``inductor_ext/autotune/tables/``): tuned decisions shipped as data.

For each model style, width, dtype and token count asked, a one-layer Hugging Face model of that
style (random weights, nothing downloaded) is tuned by ``inductor-ext tune build`` (the cpu preset,
``autotune="full"``) at that many tokens, one sequence: its GEMMs, batched GEMMs and attention,
with the layouts a real model of the style has; with ``--cache-slots``, also one decode step (one
new token) over a static KV cache of each size (Hugging Face's ``StaticCache``, its 4-D boolean mask
passed in as ``generate()`` passes it): the attention of a decode loop. The decisions are then written as a table: each
entry's key made portable (``decision_tables.portable``: the machine as its CPU form, no package
versions, no template hash) with its measured times, and the table's provenance (CPU, form, date,
torch and inductor_ext versions, this command).

    python scripts/build_decision_tables.py --out my-table.json            # the whole grid (hours)
    python scripts/build_decision_tables.py --out t.json --styles llama --widths 768 --tokens 1,16 \\
        --dtypes float32                                                 # a slice (minutes)
    python scripts/build_decision_tables.py --out t.json --update ...     # add to a table
    python scripts/build_decision_tables.py --out t.json --update --replace ...  # and re-measure a slice

A table is per CPU form (ISA and threads): build it on the machine form it is for (set the
threads with ``--threads``; ``ATEN_CPU_CAPABILITY=avx2`` builds an AVX2 table on an AVX-512 host).
Use it with ``options={"decision_tables": "t.json"}``, or drop it into the package's
``inductor_ext/autotune/tables/`` to ship it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# (hidden, ffn, heads, kv_heads, vocab) of real models of each style; --widths picks by hidden.
STYLES: dict[str, dict[int, tuple[int, int, int, int]]] = {
    "llama": {512: (1376, 8, 8, 32000),  # llama2.c's stories42M
              768: (2048, 12, 12, 32000),  # bench/hf_generate.py's Llama
              2048: (8192, 32, 8, 128256), 3072: (8192, 24, 8, 128256), 4096: (14336, 32, 8, 128256),
              8192: (28672, 64, 8, 128256)},
    "qwen2": {896: (4864, 14, 2, 151936), 1536: (8960, 12, 2, 151936), 2048: (11008, 16, 2, 151936),
              3584: (18944, 28, 4, 152064)},
    "mistral": {4096: (14336, 32, 8, 32768)},
    "gemma": {2048: (16384, 8, 1, 256000), 2304: (9216, 8, 4, 256000)},
    "phi3": {3072: (8192, 32, 32, 32064)},
    "gpt2": {768: (3072, 12, 12, 50257), 1024: (4096, 16, 16, 50257), 1280: (5120, 20, 20, 50257)},
    "bert": {512: (2048, 8, 8, 30522), 768: (3072, 12, 12, 30522), 1024: (4096, 16, 16, 30522)},  # 512: BERT-medium
}
TOKENS = tuple(2 ** i for i in range(12))  # 1 .. 2048
CACHE_SLOTS = (256, 1024, 4096)  # static KV cache sizes a server sets (max_cache_len)
DTYPES = ("float32", "bfloat16")

MODEL_FILE = '''
import torch
import transformers

STYLE, HIDDEN, FFN, HEADS, KV_HEADS, VOCAB, TOKENS, DTYPE, SLOTS = {args!r}


class LogitsOnly(torch.nn.Module):
    """One forward over TOKENS tokens, no KV cache: the prefill (or, at 1 token, decode) GEMMs."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        if STYLE == "bert":
            return self.model(ids).last_hidden_state
        return self.model(ids, use_cache=False).logits


class StaticStep(torch.nn.Module):
    """One decode step over a static KV cache of SLOTS slots: its position and its 4-D boolean
    mask come in as inputs, as generate() passes them."""

    def __init__(self, model, cache):
        super().__init__()
        self.model, self.cache = model, cache

    def forward(self, ids, position, mask):
        return self.model(ids, attention_mask=mask, past_key_values=self.cache, cache_position=position,
                          use_cache=True).logits


def model():
    torch.manual_seed(0)
    if STYLE == "gpt2":
        config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_inner=FFN, n_layer=1, n_head=HEADS,
                                         n_positions=max(TOKENS, 1024))
        made = transformers.GPT2LMHeadModel(config)
    elif STYLE == "bert":
        config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                                         num_hidden_layers=1, num_attention_heads=HEADS,
                                         max_position_embeddings=max(TOKENS, 512))
        made = transformers.BertModel(config, add_pooling_layer=False)
    else:
        cls = {{"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral", "gemma": "Gemma", "phi3": "Phi3"}}[STYLE]
        config = getattr(transformers, cls + "Config")(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=1,
            num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=max(TOKENS, 4096))
        made = getattr(transformers, cls + "ForCausalLM")(config)
    made = made.to(getattr(torch, DTYPE)).eval()
    if not SLOTS:
        return LogitsOnly(made)
    cache = transformers.StaticCache(config=made.config, max_cache_len=SLOTS)
    with torch.no_grad():  # the cache's tensors made (at its first update) before the compile
        made(torch.zeros(1, 1, dtype=torch.long), past_key_values=cache, cache_position=torch.tensor([0]))
    return StaticStep(made, cache)


def inputs():
    ids = torch.randint(0, VOCAB, (1, TOKENS), generator=torch.Generator().manual_seed(1))
    if not SLOTS:
        return (ids,)
    position = torch.tensor([SLOTS // 2])
    return ids, position, (torch.arange(SLOTS) <= position).view(1, 1, 1, SLOTS)
'''


@dataclass(frozen=True)
class Unit:
    """One tune build: a style at one width, dtype and token count (``slots``: one token's decode
    step over a static KV cache of that many slots)."""

    style: str
    hidden: int
    dtype: str
    tokens: int
    slots: int = 0

    def __str__(self) -> str:
        if self.slots:
            return f"{self.style}-{self.hidden} {self.dtype} decode over {self.slots} static cache slots"
        return f"{self.style}-{self.hidden} {self.dtype} {self.tokens} tokens"

    def model_text(self) -> str:
        ffn, heads, kv_heads, vocab = STYLES[self.style][self.hidden]
        return MODEL_FILE.format(args=(self.style, self.hidden, ffn, heads, kv_heads, vocab, self.tokens, self.dtype,
                                       self.slots))


def units(styles: list[str], widths: list[int] | None, tokens: list[int], dtypes: list[str],
          slots: list[int] = ()) -> list[Unit]:
    """Each style's widths (those in ``widths``; all without), by dtype: a forward per token count,
    then a decode step per static cache size (not for ``bert``, an encoder)."""
    return [unit for s in styles for h in sorted(STYLES[s]) if widths is None or h in widths for d in dtypes
            for unit in [*(Unit(s, h, d, t) for t in tokens), *(Unit(s, h, d, 1, n) for n in slots if s != "bert")]]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _commands(earlier: str, this: str) -> str:
    """The commands that built a table, joined by ``&&``, cut to the provenance's 512 characters
    (the latest kept whole)."""
    joined = f"{earlier} && {this}" if earlier else this
    return joined if len(joined) <= 512 else ("... " + joined[-508:] if len(this) <= 508 else this[:512])


def merge(entries: dict[str, Any], digest: str, entry: Any, replace: bool) -> bool:
    """Put ``entry`` into ``entries`` under ``digest`` unless the table holds that problem already
    (``replace``: then it is measured anew and the new entry wins); whether the problem is new."""
    new = digest not in entries
    if new or replace:
        entries[digest] = entry
    return new


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the table file to write (JSON)")
    parser.add_argument("--update", action="store_true", help="add to the table at --out (its entries win ties)")
    parser.add_argument("--replace", action="store_true",
                        help="with --update: the new measurements replace the table's for the same problems "
                             "(a slice rebuilt after a timing change)")
    parser.add_argument("--styles", default=",".join(STYLES), help=f"of {', '.join(STYLES)}")
    parser.add_argument("--widths", help="hidden widths to build (default: every width of each style)")
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="token counts (default 1..2048, x2)")
    parser.add_argument("--cache-slots", default=",".join(map(str, CACHE_SLOTS)),
                        help=f"static KV cache sizes of the decode steps (default {','.join(map(str, CACHE_SLOTS))}; "
                             "'' for none)")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help=f"of {', '.join(DTYPES)}")
    parser.add_argument("--threads", type=int, help="intra-op threads (default: torch's)")
    parser.add_argument("--dry-run", action="store_true", help="list the builds, build nothing")
    args = parser.parse_args()
    styles = [s for s in args.styles.split(",") if s]
    for s in styles:
        if s not in STYLES:
            parser.error(f"--styles: {s!r} is not one of {', '.join(STYLES)}")
    dtypes = [d for d in args.dtypes.split(",") if d]
    for d in dtypes:
        if d not in DTYPES:
            parser.error(f"--dtypes: {d!r} is not one of {', '.join(DTYPES)}")
    try:
        plan = units(styles, _ints(args.widths) if args.widths else None, _ints(args.tokens), dtypes,
                     _ints(args.cache_slots))
    except ValueError as e:
        parser.error(str(e))
    if not plan:
        parser.error("no style has any of those widths")
    if args.replace and not args.update:
        parser.error("--replace replaces entries of the table --update adds to: give both")
    if args.dry_run:
        print("\n".join(map(str, plan)))
        return 0

    import torch

    from inductor_ext import __version__, tune
    from inductor_ext.autotune import decision_tables
    from inductor_ext.autotune.cache_entry import Entry
    from inductor_ext.targets import cpu

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    form = cpu.host_form()
    entries: dict[str, Entry] = {}
    earlier = ""  # the commands that built the table so far (--update)
    if args.update and out.exists():
        table = decision_tables.load_table(out)
        if table is None:
            parser.error(f"--update: {out} is no table this inductor_ext reads (see the line above)")
        entries.update({d: e for d, e in table.entries.items()})
        earlier = table.provenance.get("command", "")
    with tempfile.TemporaryDirectory(prefix="decision_table_") as scratch:
        for i, unit in enumerate(plan):
            started = time.monotonic()
            spec = Path(scratch) / f"unit{i}.py"
            spec.write_text(unit.model_text())
            db = Path(scratch) / f"unit{i}.db"
            try:
                built = tune.build(f"{spec}:model", db, inputs_spec=f"{spec}:inputs", progress=False)
            except Exception as e:  # one unit failing (a style this transformers lacks) skips it
                print(f"[{i + 1}/{len(plan)}] {unit}: skipped: {str(e).splitlines()[0]}", flush=True)
                continue
            new = 0
            for entry in built.entries():
                key = decision_tables.portable(entry.key, form)
                moved = Entry.from_dict({**entry.to_dict(), "key": key.to_dict(), "device_name": form})
                new += merge(entries, key.digest(), moved, args.replace)
            built.close()
            print(f"[{i + 1}/{len(plan)}] {unit}: {new} new decisions ({time.monotonic() - started:.0f} s)", flush=True)
    provenance = {"cpu": cpu.host_name(), "form": form, "date": datetime.date.today().isoformat(),
                  "torch": torch.__version__, "inductor_ext": __version__,
                  "command": _commands(earlier, " ".join(["python", *sys.argv]))}
    text = decision_tables.table_text(entries.values(), provenance)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, out)
    print(f"{out}: {len(entries)} decisions for {form}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
