"""Hugging Face ``generate()`` on CPU: eager vs Inductor vs Inductor max-autotune vs backend="ext",
measured side by side in one run (issue 29, item 4).

Models (random init, nothing downloaded; HF_HUB_OFFLINE=1 is fine):
  llama   a Llama-style decoder with llama2.c's stories110M widths (dim 768, 12 layers, 12 heads,
          SwiGLU 2048, vocab 32000: ~110M parameters), greedy generate() of --new-tokens tokens
          after a --prompt-token prompt, batch 1, with the ``static`` and the ``dynamic`` KV cache,
          and ``static1024``: the static cache sized 1024 (``max_cache_len``) as a server sizes it,
          so each decode step's attention reads mostly empty slots (fp32 only)
  gpt2    GPT-2 small's widths (768, 12 layers, 12 heads, vocab 50257), one forward over a
          --prefill-token prompt (no cache): a prefill / encoder-style call, large-M GEMMs
each in fp32 and bf16, under torch.no_grad().

Arms (each a deep copy of the model with its forward compiled, as Hugging Face recommends for
torch.compile: ``model.forward = torch.compile(model.forward)``; the static cache through
``cache_implementation="static"``):
  eager                  the model as written
  inductor               torch.compile(forward)
  inductor_max_autotune  torch.compile(forward, mode="max-autotune") with Inductor's freezing on,
                         as PyTorch's CPU tutorial runs it
  ext                    torch.compile(forward, backend="ext"): the cpu preset as a new user gets it
                         (autotune="model": decision tables and the cost model, nothing timed; its
                         own cache in a fresh folder, $INDUCTOR_EXT_CACHE_DIR)

Decode rows compare each arm's tokens with eager's (``same_tokens_as_eager``); where they differ,
``token_differences`` gives the first step that differs and eager's logit margin there between its
token and the arm's, against one unit of the logits' dtype (``near_tie``: a bf16 tie that another
summation order breaks the other way).

Per row: each arm's median and IQR (``ms`` per call: one generate() or one prefill forward;
``tokens_per_s`` = new tokens / generate seconds, which includes the short prompt's prefill),
its first call's seconds (``compile_s``: every compile that call triggers, recompiles of the dynamic
cache included), and for decode rows ``roofline``: the weight bytes a token reads (every parameter
but the embedding table, which a token reads one row of) over the read bandwidth measured here
(a large ``sum``), divided by the measured seconds per token: 1.0 is the memory bound. Decode rows
also split each call: ``forward_ms``, the seconds inside the arm's forward (the compiled graphs and
Dynamo's guards; one forward per new token, each reading every weight once), within it
``graphs_ms``, the seconds inside Inductor's compiled graphs (kernels and the wrapper calling them:
what a backend decides), and ``outside_ms``, the rest of generate() (Hugging Face's loop, logits
processing, stopping checks: eager code, the same in every arm), each the median over the arm's
calls after its first; ``graphs_roofline`` is the memory bound over ``graphs_ms`` (above 1.0 where
the kernels read faster than the ``sum`` does).
Timed calls are interleaved (each round runs every arm twice in a row and times the second) so
load from other processes hits every arm alike, while each timed call finds the caches its own arm
left, as a serving loop of one model does (timing the first instead: bf16 decode 97.6 against 74.6
ms per call, every arm alike). That does not cover where each arm's weights sit: on the VMs this
was written on, the same read of a 98 MB tensor took 3.3-4.3 ms by copy (six copies, interleaved, one process), and
the lm_head's kernel 2.0-3.7 ms by process. ``--processes N`` runs the whole measurement in N fresh
processes; each arm's ``ms`` is then the median of the processes' medians, ``p25_ms``/``p75_ms``
their quartiles, ``per_process_ms`` each one, and ``ext_ratio_per_process`` ext against the best
Inductor arm in each process.

Prefill rows split one more call of each compiled arm, profiled (``torch.profiler``, CPU), into
``split_ms``: ``attention`` (ATen's SDPA kernel, or ext's op serving it), ``library_gemm``
(ATen's mm/addmm/bmm and the oneDNN/MKL packed linears: library calls) and ``rest`` (Inductor's
generated C++ kernels, ext's C++ GEMM templates among them, and the wrapper): each op's self time,
so nothing is counted twice; one call, with the profiler's overhead, so the parts say where the
time goes, not what the timed calls took.

``targets`` (each row's ratio, ``met`` and, when missed, ``why``):
  ext_vs_best_inductor   ext against the faster of inductor and inductor_max_autotune, every row:
                         >= 1.1x on prefill rows and the static1024 row; on the other decode rows
                         (both arms near the read bound) >= 1.0x, or within the arms' spread, with
                         ext's graphs at >= 0.9 of the read bound; on a decode row that misses,
                         ``ceiling``: the most ext could reach there with its graphs at the memory
                         bound and the rest of its call as measured
  ext_first_compile      ext's first call <= 1.5x inductor_max_autotune's, every row

    python bench/hf_generate.py [--json] [--rows llama_static_float32,...] [--quick] [--reps 5]
        [--processes 1] [--new-tokens 32] [--prompt 16] [--prefill 512] [--layers 12] [--threads N]
        [--arms eager,inductor,inductor_max_autotune,ext] [--eager-once]

``--eager-once`` calls eager once, for the reference, and times only the compiled arms: on a CPU
without bf16 dot products (AVX2) ATen's bf16 GEMMs make one eager or Inductor-default bf16 prefill
call take ~95 s (its addmm ran 3.1 s at 512 x 3072 x 768 here), so that row is run as
``--rows gpt2_prefill_bfloat16 --eager-once --arms eager,inductor_max_autotune,ext``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inductor_ext.runtime.timing import Timing, interleaved  # noqa: E402
from target_report import print_targets  # noqa: E402  (bench/, beside this script)

ARMS = ("eager", "inductor", "inductor_max_autotune", "ext")
INDUCTOR_ARMS = ("inductor", "inductor_max_autotune")
SPEED_TARGET, COMPILE_TARGET = 1.1, 1.5
# Decode rows whose graphs both arms run near the read bound (every weight read once a token): parity
# within the spread, ext's graphs at >= this fraction of the bound. static1024 keeps SPEED_TARGET.
DECODE_PARITY, DECODE_ROOFLINE = 1.0, 0.9


@dataclass(frozen=True)
class Widths:
    dim: int = 768
    layers: int = 12
    heads: int = 12
    ffn: int = 2048
    llama_vocab: int = 32000
    gpt2_vocab: int = 50257
    positions: int = 1024


QUICK = Widths(dim=64, layers=1, heads=4, ffn=128, llama_vocab=512, gpt2_vocab=512, positions=128)


@dataclass(frozen=True)
class Row:
    model: str  # "llama" (generate) or "gpt2" (prefill)
    cache: str  # "static", "static1024" (sized 1024), "dynamic", or "none" (a prefill forward)
    dtype: str

    @property
    def name(self) -> str:
        return f"{self.model}_{self.cache}_{self.dtype}" if self.model == "llama" else f"{self.model}_prefill_{self.dtype}"

    @property
    def decode(self) -> bool:
        return self.model == "llama"


def all_rows() -> list[Row]:
    return [Row("llama", cache, dtype) for dtype in ("float32", "bfloat16") for cache in ("static", "dynamic")] + \
           [Row("llama", "static1024", "float32")] + \
           [Row("gpt2", "none", dtype) for dtype in ("float32", "bfloat16")]


def build(row: Row, w: Widths) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    if row.model == "llama":
        config = transformers.LlamaConfig(vocab_size=w.llama_vocab, hidden_size=w.dim, intermediate_size=w.ffn,
                                          num_hidden_layers=w.layers, num_attention_heads=w.heads,
                                          num_key_value_heads=w.heads, max_position_embeddings=w.positions)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(vocab_size=w.gpt2_vocab, n_embd=w.dim, n_layer=w.layers, n_head=w.heads,
                                         n_positions=w.positions, bos_token_id=w.gpt2_vocab - 1,
                                         eos_token_id=w.gpt2_vocab - 1)
        model = transformers.GPT2LMHeadModel(config)
    return model.to(getattr(torch, row.dtype)).eval()


# -------------------------------------------------------------------------------------- arms


def own_forward(model: torch.nn.Module, arm: str) -> None:
    """Give the arm's model a forward of its own code object: Dynamo keeps compiled graphs per
    code object, and arms sharing one would check each other's guards on every call."""
    f = type(model).forward
    code = f.__code__.replace(co_name=f"forward_{arm}")
    forward = types.FunctionType(code, f.__globals__, code.co_name, f.__defaults__, f.__closure__)
    forward.__wrapped__ = getattr(f, "__wrapped__", f)  # HF's decorators read the signature through it
    model.__class__ = type(f"{type(model).__name__}_{arm}", (type(model),), {"forward": forward})


def compile_arm(arm: str, model: torch.nn.Module) -> torch.nn.Module:
    if arm == "eager":
        return model
    own_forward(model, arm)
    if arm == "inductor":
        model.forward = torch.compile(model.forward)
    elif arm == "inductor_max_autotune":
        model.forward = torch.compile(model.forward, mode="max-autotune")
    elif arm == "ext":
        # A first run: the user's own cache (decisions, machine facts, ext's built tools) in a fresh
        # folder. Named as autotune_cache, an untimed compile would read the file as a read-only
        # layer ("does not exist") and still ask the machine's own cache after it.
        os.environ["INDUCTOR_EXT_CACHE_DIR"] = tempfile.mkdtemp(prefix="hf_generate_ext_")
        model.forward = torch.compile(model.forward, backend="ext")
    else:
        raise ValueError(f"unknown arm {arm!r}; arms: {', '.join(ARMS)}")
    return model


def arm_context(arm: str) -> Any:
    """Freezing for the max-autotune arm on every call: the dynamic cache recompiles later ones."""
    return torch._inductor.config.patch(freezing=arm == "inductor_max_autotune")


def call_for(row: Row, model: torch.nn.Module, args: argparse.Namespace, w: Widths,
             logits: bool = False) -> Callable[[], Any]:
    """The row's call; ``logits``: generate() also returns each step's logits (a ModelOutput)."""
    g = torch.Generator().manual_seed(1)
    if row.decode:
        ids = torch.randint(0, w.llama_vocab, (1, args.prompt), generator=g)
        kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                      pad_token_id=0, cache_implementation=row.cache.removesuffix("1024"),
                      **({"max_cache_len": min(1024, w.positions)} if row.cache == "static1024" else {}),
                      disable_compile=True)  # the arm compiled forward itself; HF's auto-compile stays out
        if logits:
            kwargs.update(output_logits=True, return_dict_in_generate=True)
        return lambda: model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    ids = torch.randint(0, w.gpt2_vocab, (1, args.prefill), generator=g)
    return lambda: model(ids, use_cache=False).logits


# ---------------------------------------------------------------------------------- measuring


def read_bandwidth(threads: int) -> float:
    """Bytes per second a large ``sum`` reads here (the best of a few; 256 MiB of fp32)."""
    x = torch.ones(64 * 2**20)
    x.sum()
    best = min(_seconds(x.sum) for _ in range(8))
    return x.numel() * x.element_size() / best


def _seconds(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# seconds of the current call spent inside the arm's forward and inside Inductor's compiled graphs
inside = {"forward": 0.0, "graphs": 0.0}


def adding_seconds(fn: Callable[..., Any], key: str) -> Callable[..., Any]:
    """``fn``, adding the seconds of every call to ``inside[key]``."""

    @functools.wraps(fn)  # Hugging Face reads forward's signature through it
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            inside[key] += time.perf_counter() - t0

    return timed


def timed_forward(model: torch.nn.Module) -> None:
    """Time every call of ``model.forward`` (the arm's compiled one) into ``inside["forward"]``."""
    model.forward = adding_seconds(model.forward, "forward")


def time_compiled_graphs() -> None:
    """Time every compiled graph (its kernels and the wrapper that calls them: what a backend
    decides; Dynamo's guards and AOTAutograd's wrappers stay out) into ``inside["graphs"]``.
    Inductor calls each graph, ext's included, through ``CompiledFxGraph.__call__``."""
    from torch._inductor.output_code import CompiledFxGraph

    if getattr(CompiledFxGraph.__call__, "hf_generate_timed", False):
        return
    timed = adding_seconds(CompiledFxGraph.__call__, "graphs")
    timed.hf_generate_timed = True  # type: ignore[attr-defined]
    CompiledFxGraph.__call__ = timed


def weight_bytes_per_token(model: torch.nn.Module) -> int:
    """Every parameter a decode step reads in full: all but the input embedding table."""
    embed = model.get_input_embeddings().weight
    return sum(p.numel() * p.element_size() for p in model.parameters() if p is not embed)


# a profiled op's name -> the part of a prefill call it belongs to (the first pattern that matches)
SPLIT_PARTS = (("attention", re.compile(r"^(aten::_?scaled_dot_product\w*|inductor_ext::[\w.]*attention)$")),
               ("library_gemm", re.compile(r"^(aten::(mm|addmm|bmm|baddbmm)|mkldnn::_linear_pointwise.*|"
                                           r"mkl::_mkl_linear|aten::_mkl_linear|inductor_ext::mk(l|ldnn)_packed_\w+)$")))


def split_call(run: Callable[[], Any]) -> dict[str, float]:
    """Milliseconds of one profiled ``run()`` by part (``SPLIT_PARTS``, ``rest`` for the others):
    the self time of every op, so an op that calls another is not counted twice."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        run()
        total_us = (time.perf_counter() - t0) * 1e6
    parts = dict.fromkeys((*(name for name, _ in SPLIT_PARTS), "rest"), 0.0)
    for event in prof.key_averages():
        part = next((name for name, pattern in SPLIT_PARTS if pattern.search(event.key)), None)
        if part is not None:
            parts[part] += event.self_cpu_time_total
    parts["rest"] = max(total_us - sum(parts.values()), 0.0)
    return {part: round(us / 1e3, 3) for part, us in parts.items()}


def measure_row(row: Row, args: argparse.Namespace, w: Widths, bandwidth: float) -> dict[str, Any]:
    from inductor_ext.lowering import decision_record

    torch._dynamo.reset()
    base = build(row, w)
    outs, compile_s, fns, models = {}, {}, {}, {}
    splits: dict[str, list[tuple[float, float, float]]] = {}  # per arm and call: seconds in all, forward, graphs
    first = len(decision_record.decisions)
    time_compiled_graphs()
    for arm in args.arms:
        model = models[arm] = compile_arm(arm, copy.deepcopy(base))
        timed_forward(model)
        call = call_for(row, model, args, w)
        splits[arm] = []

        def run(arm: str = arm, call: Callable[[], torch.Tensor] = call) -> torch.Tensor:
            inside.update(forward=0.0, graphs=0.0)
            t0 = time.perf_counter()
            with arm_context(arm), torch.no_grad():
                out = call()
            splits[arm].append((time.perf_counter() - t0, inside["forward"], inside["graphs"]))
            return out

        t0 = time.perf_counter()
        outs[arm] = run()
        compile_s[arm] = round(time.perf_counter() - t0, 2)
        if not (arm == "eager" and args.eager_once):
            fns[arm] = run
        print(f"  {row.name} {arm}: first call {compile_s[arm]:.1f} s", file=sys.stderr)
    made = decision_record.decisions[first:]
    timings = interleaved(fns, args.reps, lead_in=1)
    result: dict[str, Any] = {"row": asdict(row), "compile_s": compile_s, "arms": {}}
    for arm, t in timings.items():
        result["arms"][arm] = _arm_figures(t, row, args)
    if row.decode:
        ref = outs["eager"]
        result["same_tokens_as_eager"] = {arm: bool(torch.equal(o, ref)) for arm, o in outs.items()}
        if not all(result["same_tokens_as_eager"].values()):
            with torch.no_grad():
                steps = call_for(row, models["eager"], args, w, logits=True)().logits
            dtype = getattr(torch, row.dtype)
            result["token_differences"] = {arm: token_difference(ref, o, steps, args.prompt, dtype)
                                           for arm, o in outs.items() if not result["same_tokens_as_eager"][arm]}
        per_token_bytes = weight_bytes_per_token(base)
        bound_s = per_token_bytes / bandwidth
        result["weight_bytes_per_token"] = per_token_bytes
        result["bound_ms"] = round(bound_s * args.new_tokens * 1e3, 3)  # every forward at the memory bound
        for arm, t in timings.items():
            figures = result["arms"][arm]
            figures["roofline"] = float(f"{bound_s / (t.median / args.new_tokens):.3g}")
            calls = splits[arm][1:]  # the first call compiled
            figures["forward_ms"] = round(statistics.median(f for _, f, _ in calls) * 1e3, 3)
            figures["outside_ms"] = round(statistics.median(c - f for c, f, _ in calls) * 1e3, 3)
            graphs_ms = round(statistics.median(g for _, _, g in calls) * 1e3, 3)
            if graphs_ms > 0:  # a compiled arm
                figures["graphs_ms"] = graphs_ms
                figures["graphs_roofline"] = float(f"{result['bound_ms'] / graphs_ms:.3g}")
    else:
        ref = outs["eager"].float()
        scale = ref.abs().max().item()
        result["max_rel_err_vs_eager"] = {arm: (o.float() - ref).abs().max().item() / scale for arm, o in outs.items()}
        for arm in timings:
            if arm != "eager":
                result["arms"][arm]["split_ms"] = split_call(fns[arm])
    result["ext_decisions"] = {"total": len(made), "templates_won": sum(_template_won(d) for d in made),
                               "from_cache": sum(d.reason.startswith("cache") for d in made),
                               "reasons": dict(collections.Counter(re.split(r"[:;(]", d.reason)[0].strip() for d in made))}
    return result


def token_difference(ref: torch.Tensor, tokens: torch.Tensor, ref_logits: tuple[torch.Tensor, ...],
                     prompt: int, dtype: torch.dtype) -> dict[str, Any]:
    """Where an arm's greedy tokens first leave eager's, and eager's own logits there: a margin
    between the two tokens within one unit of the logits' dtype is a near-tie that any other
    summation order may flip, not a wrong answer."""
    new_ref, new = ref[0, prompt:], tokens[0, prompt:]
    step = int((new_ref != new).nonzero()[0])
    logits = ref_logits[step][0].float()  # Hugging Face hands them over in fp32
    mine, theirs = logits[new_ref[step]], logits[new[step]]
    at = mine.to(dtype)  # the unit of the model's dtype at this logit
    unit = float(torch.nextafter(at, at.new_tensor(float("inf"))) - at)
    margin = float(mine - theirs)
    return {"first_step": step, "eager_token": int(new_ref[step]), "arm_token": int(new[step]),
            "eager_logit_margin": margin, "logit_unit": unit, "near_tie": margin <= unit}


def _template_won(decision: Any) -> bool:
    """Whether one of ext's template candidates won the decision (not ATen or a packed ATen GEMM)."""
    return any(c.get("name") == decision.winner and c.get("kind") == "template" for c in decision.candidates)


def _arm_figures(t: Timing, row: Row, args: argparse.Namespace) -> dict[str, Any]:
    figures = {"ms": round(t.median * 1e3, 3), "p25_ms": round(t.p25 * 1e3, 3), "p75_ms": round(t.p75 * 1e3, 3),
               "n": t.samples}
    if row.decode:
        figures["tokens_per_s"] = round(args.new_tokens / t.median, 2)
    return figures


# ----------------------------------------------------------------------------------- targets


def targets(rows: dict[str, Any]) -> dict[str, Any]:
    speed, compile_rows = {}, {}
    for name, r in rows.items():
        arms = r["arms"]
        if "ext" not in arms or not any(a in arms for a in INDUCTOR_ARMS):
            continue
        best = min((a for a in INDUCTOR_ARMS if a in arms), key=lambda a: arms[a]["ms"])
        ratio = arms[best]["ms"] / arms["ext"]["ms"]
        noise = max((arms[a]["p75_ms"] - arms[a]["p25_ms"]) / arms[a]["ms"] for a in (best, "ext"))
        parity = r["row"].get("cache") in ("static", "dynamic")
        want = DECODE_PARITY if parity else SPEED_TARGET
        met = ratio >= want
        if parity:  # within the spread counts, and ext's graphs must be near the read bound
            met = (met or ratio >= 1 / (1 + noise)) and arms["ext"].get("graphs_roofline", 0) >= DECODE_ROOFLINE
        row: dict[str, Any] = {"vs": best, "ratio": round(ratio, 3), "rel_iqr": round(noise, 3), "want": want,
                               "met": met}
        if not row["met"]:
            d = r["ext_decisions"]
            why = [f"ext {ratio:.2f}x {best}"]
            if ratio > 1 / (1 + noise) and ratio < 1 + noise:
                why.append(f"within noise (IQR {noise:.0%})")
            why.append(f"{d['templates_won']} of {d['total']} ext decisions went to a template")
            if "graphs_ms" in arms["ext"]:
                ext, other = arms["ext"], arms[best]
                rest = ext["ms"] - ext["graphs_ms"]
                row["ceiling"] = round(other["ms"] / (rest + min(ext["graphs_ms"], r["bound_ms"])), 3)
                why.append(f"ext's compiled graphs take {ext['graphs_ms']:.1f} ms of its {ext['ms']:.1f} ms call "
                           f"({ext['graphs_roofline']:.2f} of the read bound's {r['bound_ms']:.1f} ms), {best}'s "
                           f"{other['graphs_ms']:.1f} ms ({other['graphs_roofline']:.2f}); the other {rest:.1f} ms "
                           f"(generate()'s eager loop {ext['outside_ms']:.1f} ms, Dynamo's guards and wrappers "
                           f"{ext['forward_ms'] - ext['graphs_ms']:.1f} ms) are not the backend's")
                if row["ceiling"] < SPEED_TARGET:
                    why.append(f"out of reach here: with its graphs at the read bound ext would be at most "
                               f"{row['ceiling']:.2f}x {best}")
            elif "split_ms" in arms["ext"] and "split_ms" in arms[best]:
                why.append("one profiled call each, ms of attention / library GEMMs / the rest: "
                           + "; ".join(f"{arm} " + " / ".join(f"{v:.1f}" for v in arms[arm]["split_ms"].values())
                                       for arm in ("ext", best)))
            row["why"] = "; ".join(why)
        speed[name] = row
        if "inductor_max_autotune" in r["compile_s"]:
            c = r["compile_s"]["ext"] / r["compile_s"]["inductor_max_autotune"]
            crow: dict[str, Any] = {"ratio": round(c, 3), "ext_s": r["compile_s"]["ext"],
                                    "inductor_max_autotune_s": r["compile_s"]["inductor_max_autotune"],
                                    "met": c <= COMPILE_TARGET}
            if not crow["met"]:
                d = r["ext_decisions"]
                crow["why"] = (f"ext decided {d['total'] - d['from_cache']} of {d['total']} GEMM problems from an empty "
                               "cache, building its C++ candidates and timing each of them flushed and warm, "
                               "where max-autotune builds and times one per problem "
                               "(bench/compile_time.py shows where a cold compile's time goes)")
            compile_rows[name] = crow
    return {
        "ext_vs_best_inductor": {"want": f"ext >= {SPEED_TARGET}x the best Inductor arm on prefill rows and "
                                         f"static1024, >= {DECODE_PARITY}x within the spread with its graphs at >= "
                                         f"{DECODE_ROOFLINE} of the read bound on the other decode rows",
                                 "met": bool(speed) and all(r["met"] for r in speed.values()),
                                 "ratio": min((r["ratio"] for r in speed.values()), default=None), "per_row": speed},
        "ext_first_compile": {"want": f"ext's first call <= {COMPILE_TARGET}x inductor_max_autotune's on every row",
                              "met": bool(compile_rows) and all(r["met"] for r in compile_rows.values()),
                              "ratio": max((r["ratio"] for r in compile_rows.values()), default=None),
                              "per_row": compile_rows},
    }


# ------------------------------------------------------------------------- several processes


def in_processes(n: int) -> dict[str, Any]:
    """This command's figures (``--json``) from ``n`` fresh processes, one after another, combined."""
    # this command's arguments without --processes and its value (sys.argv[i] is the one before a)
    argv = [a for i, a in enumerate(sys.argv[1:]) if a != "--processes" and sys.argv[i] != "--processes"
            and not a.startswith("--processes=") and a != "--json"]
    runs = []
    for i in range(n):
        print(f"hf_generate: process {i + 1} of {n}", file=sys.stderr)
        done = subprocess.run([sys.executable, __file__, *argv, "--json"], stdout=subprocess.PIPE, text=True,
                              timeout=4 * 3600)
        if done.returncode != 0:
            raise SystemExit(f"hf_generate: process {i + 1} failed (exit {done.returncode})")
        runs.append(json.loads(done.stdout))
    return combine(runs)


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per row and arm, the median of the runs' medians with their quartiles (``statistics``'
    inclusive method: with 3 runs, the middle of each half), and each run's; first calls by median."""
    figures = {**runs[0], "processes": len(runs), "wall_s": round(sum(r["wall_s"] for r in runs), 1),
               "load_average_after": runs[-1]["load_average_after"], "rows": {}}
    for name, first in runs[0]["rows"].items():
        row = {**first, "arms": {}, "compile_s": {}}
        if "bound_ms" in first:
            row["bound_ms"] = statistics.median(r["rows"][name]["bound_ms"] for r in runs)
        for arm in first["arms"]:
            per = [r["rows"][name]["arms"][arm]["ms"] for r in runs]
            q = statistics.quantiles(per, n=4, method="inclusive") if len(per) > 1 else [per[0]] * 3
            combined = {**first["arms"][arm], "ms": round(statistics.median(per), 3), "p25_ms": round(q[0], 3),
                        "p75_ms": round(q[2], 3), "n": len(per), "per_process_ms": per}
            for key in ("tokens_per_s", "roofline", "forward_ms", "outside_ms", "graphs_ms", "graphs_roofline"):
                if key in combined:
                    combined[key] = statistics.median(r["rows"][name]["arms"][arm][key] for r in runs)
            if "split_ms" in combined:
                combined["split_ms"] = {part: statistics.median(r["rows"][name]["arms"][arm]["split_ms"][part]
                                                                for r in runs) for part in combined["split_ms"]}
            row["arms"][arm] = combined
            row["compile_s"][arm] = statistics.median(r["rows"][name]["compile_s"][arm] for r in runs)
        row["ext_ratio_per_process"] = [r["targets"]["ext_vs_best_inductor"]["per_row"][name]["ratio"]
                                        for r in runs if name in r["targets"]["ext_vs_best_inductor"]["per_row"]]
        figures["rows"][name] = row
    figures["targets"] = targets(figures["rows"])
    return figures


# -------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--rows", help=f"comma-separated (default: all): {', '.join(r.name for r in all_rows())}")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {', '.join(ARMS)}")
    parser.add_argument("--reps", type=int, default=5, help="timed rounds per row")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens of the generate() rows")
    parser.add_argument("--prefill", type=int, default=512, help="prompt tokens of the prefill rows")
    parser.add_argument("--layers", type=int, default=Widths.layers)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--eager-once", action="store_true",
                        help="call eager once, as the reference, and time only the compiled arms (bf16 prefill "
                             "on a CPU without bf16 dot products: eager's ATen bf16 GEMMs take ~95 s a call)")
    parser.add_argument("--processes", type=int, default=1,
                        help="run the measurement in this many fresh processes and combine them (see above)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny widths, 1 layer, 3 new tokens, rows llama_static_float32 and gpt2_prefill_float32: "
                             "checks the script, the figures mean little")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    known = {r.name: r for r in all_rows()}
    w = Widths(layers=args.layers)
    if args.quick:
        w = QUICK
        args.new_tokens, args.prompt, args.prefill, args.reps = 3, 4, 32, min(args.reps, 3)
        args.rows = args.rows or "llama_static_float32,gpt2_prefill_float32"
    names = args.rows.split(",") if args.rows else list(known)
    bad = [n for n in names if n not in known]
    if bad:
        parser.error(f"--rows: unknown {', '.join(bad)}; rows: {', '.join(known)}")
    args.arms = args.arms.split(",")
    if "eager" not in args.arms or any(a not in ARMS for a in args.arms):
        parser.error(f"--arms: a subset of {', '.join(ARMS)} that includes eager (the reference)")
    if args.prompt + args.new_tokens > w.positions or args.prefill > w.positions:
        parser.error(f"--prompt + --new-tokens and --prefill must fit {w.positions} positions")

    if args.processes < 1:
        parser.error(f"--processes {args.processes}: at least 1")
    if args.processes > 1:
        report(in_processes(args.processes), args)
        return
    started = time.perf_counter()
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    bandwidth = read_bandwidth(args.threads)
    print(f"hf_generate: {len(names)} rows x {len(args.arms)} arms, {args.threads} threads, load {load}, "
          f"read bandwidth {bandwidth / 1e9:.1f} GB/s", file=sys.stderr)
    from inductor_ext.tune import fresh_inductor_caches

    rows = {}
    with fresh_inductor_caches(), contextlib.redirect_stdout(sys.stderr):  # cold Inductor caches for every arm
        for name in names:
            rows[name] = measure_row(known[name], args, w, bandwidth)
            print(f"  {name}: " + ", ".join(f"{a} {t['ms']:.1f} ms" for a, t in rows[name]["arms"].items()),
                  file=sys.stderr)
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]
    figures = {"widths": asdict(w), "quick": args.quick, "threads": args.threads, "reps": args.reps,
               "new_tokens": args.new_tokens, "prompt": args.prompt, "prefill": args.prefill,
               "read_bandwidth_gb_s": round(bandwidth / 1e9, 2), "cpu_count": os.cpu_count(), "load_average": load,
               "load_average_after": load_after, "wall_s": round(time.perf_counter() - started, 1),
               "rows": rows, "targets": targets(rows)}
    report(figures, args)


def report(figures: dict[str, Any], args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"read bandwidth {figures['read_bandwidth_gb_s']} GB/s, {figures['threads']} threads, "
          f"load {figures['load_average']} -> {figures['load_average_after']}"
          + (f", {figures['processes']} processes" if "processes" in figures else ""))
    for name, r in figures["rows"].items():
        print(f"{name:26s} " + "  ".join(f"{a} {t['ms']:.1f} ms [{t['p25_ms']:.1f}-{t['p75_ms']:.1f}]"
                                         + (f" roofline {t['roofline']:.2f}" if "roofline" in t else "")
                                         + (f" (graphs {t['graphs_ms']:.1f} ms at {t['graphs_roofline']:.2f})"
                                            if "graphs_ms" in t else "")
                                         for a, t in r["arms"].items()))
        print(f"{'':26s} compile " + ", ".join(f"{a} {s:.1f} s" for a, s in r["compile_s"].items()))
    print_targets(figures["targets"], "per_row")


if __name__ == "__main__":
    main()
