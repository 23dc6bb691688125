"""First compile time on CPU, where it goes, and what the compiled graphs then run at (issues 29
and 49), measured side by side in one run.

Models: ``demo`` (inductor_ext/demo.py's decoder block at its default size), ``llama``
(bench/hf_generate.py's Llama widths, 768 wide, SwiGLU 2048, 2 layers: one forward over a 16-token
prompt, logits out), ``gpt2`` (hf_generate.py's GPT-2 prefill row: 768 wide, 512 tokens, 2 layers),
``bert`` (a BERT-base-shaped encoder, 2 layers, batch 4 x 128 tokens) and, on request, ``bench``
(bench/cpu_decode.py's stories15M-shaped decoder, one decode step after a 512-token prefill).
Layers repeat their GEMMs, so more layers add graph size, not decisions.

Arms, each a fresh process with fresh Inductor and ext cache folders (nothing in-process is warm):
  inductor               torch.compile(model)
  inductor_max_autotune  torch.compile(model, mode="max-autotune"), freezing on (PyTorch's CPU tutorial)
  ext_default            backend="ext" as a new user gets it: the cpu preset's autotune="model"
                         (decision tables, then the cost model; nothing timed), an empty autotune cache
  ext_full               backend="ext", autotune="full": every decision timed, into a cache file
  ext_shipped            backend="ext" (defaults) with ext_full's cache file copied into a read-only
                         folder and named by autotune_cache: a cache shipped with the model

A first compile is timed from the ``torch.compile(...)`` call (Dynamo's backend lookup: Inductor's
modules imported for every arm, ext's too for the ext arms) to the end of the first call. The few
ext modules this script imports before that call to time their functions are imported only in the
ext arms, and the seconds they took are counted in ``compile_call``. Before the arms, ext's package
is compiled to bytecode, as pip does when it installs a wheel: an editable install under
``PYTHONDONTWRITEBYTECODE`` (set on these machines) would otherwise compile ext's ~170 modules from
source in every process, ~0.3 s that no installed user pays.

Where the time goes (seconds of wall time in the compiling thread, each counted once, innermost wins):
  compile_call       the ``torch.compile(...)`` call itself (imports and the backend's lookup)
  isa_probe          Inductor's vector-ISA probe (cpu_vec_isa.VecISA.check_build: test builds, each
                     loaded in a fresh Python); ext reuses its outcome from its cache, and where it
                     must probe asks the ISAs up to the first that passes (vec_isa_record._ask_isas),
                     in a thread from Dynamo's backend lookup: only the compile's wait for it counts
  candidate_builds   C++ builds of autotuning candidates (select_algorithm's precompile, ext's
                     lowering/parallel_builds.py, and builds that happen inside a benchmark)
  benchmarking       timing the choices (select_algorithm's benchmark; ext's flushed and warm timers,
                     lowering/cold_timing.py, run inside it)
  inductor_builds    C++ builds outside autotuning (the compiled graph's own kernels, waited for)
  rest               the remainder: Dynamo, AOTAutograd, Inductor's lowering, scheduling, codegen
beside: ``builds`` (how many C++ builds per phase), ``dynamo_timed`` (torch's own compile-time
counters, summed per key, for the largest keys), and ``runtime_ms``: the compiled model's calls
after the first, timed in the same process (median and interquartile range).

Runtimes measured in different processes differ by more than the arms do on this kind of machine
(one arm's medians ranged 97-135 ms over three processes of the bert row; ext_shipped, serving
ext_full's very decisions, ran 1.38x ext_full's in another pair of processes), so after its arms
each model gets one more process, ``paired``: every arm compiled side by side (ext_default before
ext_full, which tunes into this process's own cache; ext_shipped from a read-only copy of the
arms' ext_full cache), then called in rounds, one call of each per round in an order reversed
every round. Per arm its median and IQR, and per runtime target the ratio of each round: the
runtime targets are judged on those (the median ratio; "within noise" where its lower quartile is
within the limit). The per-process runtimes stay in each arm's ``runtime_ms``.

Targets (in ``targets``, each with its ratio, ``met`` and, when missed, ``why``), on each model:
  default_compile    ext_default's first compile <= 1.0x inductor's
  shipped_compile    ext_shipped's first compile <= 0.8x inductor's
  default_runtime    ext_default's runtime <= 1/0.97x ext_full's (>= 0.97x its speed)
  default_vs_inductor  ext_default's runtime <= the faster Inductor arm's
  shipped_runtime    ext_shipped's runtime <= ext_full's
A runtime target is judged side by side (``paired``, above): met "within noise" where its
per-round ratio's lower quartile is within the limit.

    python bench/compile_time.py [--json] [--models demo,llama,gpt2,bert] [--repeats 1] [--quick]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from target_report import print_targets  # noqa: E402  (bench/, beside this script)

ARMS = ("inductor", "inductor_max_autotune", "ext_default", "ext_full", "ext_shipped")
MODELS = ("demo", "llama", "gpt2", "bert", "bench")
DEFAULT_MODELS = ("demo", "llama", "gpt2", "bert")
PHASES = ("isa_probe", "candidate_builds", "benchmarking", "inductor_builds")
# first-call seconds: arm <= limit x base
TARGETS = {"default_compile": ("ext_default", "inductor", 1.0),
           "shipped_compile": ("ext_shipped", "inductor", 0.8)}
# runtime: arm's median <= limit x base's ("best_inductor": the faster Inductor arm), or within noise
RUNTIME_TARGETS = {"default_runtime": ("ext_default", "ext_full", 1 / 0.97),
                   "default_vs_inductor": ("ext_default", "best_inductor", 1.0),
                   "shipped_runtime": ("ext_shipped", "ext_full", 1.0)}


# ------------------------------------------------------------------------- in the arm's process


class PhaseClock:
    """Exclusive wall time per phase in the compiling (main) thread: a phase entered inside
    another one takes its time out of the outer one. Builds in other threads (a precompile pool)
    are counted, and their time goes to whatever the main thread is in meanwhile."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.builds: dict[str, int] = collections.defaultdict(int)
        self._stack: list[list[Any]] = []  # [phase, start, time taken by inner phases]
        self.ext_imports = 0.0  # seconds of ext's imports install_clock made before the timed call

    def current(self) -> str | None:
        return self._stack[-1][0] if self._stack else None

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        frame = [name, time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            spent = time.perf_counter() - frame[1]
            self.seconds[name] += spent - frame[2]
            if self._stack:
                self._stack[-1][2] += spent

    def wrap(self, owner: Any, attr: str, phase: str | Callable[[], str]) -> None:
        original = getattr(owner, attr)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(phase() if callable(phase) else phase):
                return original(*args, **kwargs)

        setattr(owner, attr, timed)


def install_clock(ext: bool) -> PhaseClock:
    """Wrap the functions a cold CPU compile spends its time in (Inductor's, and ext's where
    ``ext``: the seconds their imports took are ``clock.ext_imports``)."""
    from torch._inductor import async_compile, cpp_builder, cpu_vec_isa, select_algorithm

    clock = PhaseClock()

    def build_phase() -> str:
        where = clock.current()  # in a pool thread too: the main thread's phase decides
        if threading.current_thread().name.startswith("ext-isa-probe"):  # asked ahead, beside the main thread
            where = "isa_probe"
        phase = {"isa_probe": "isa_probe", "candidate_builds": "candidate_builds",
                 "benchmarking": "candidate_builds"}.get(where or "", "inductor_builds")
        clock.builds[phase] += 1
        return phase

    clock.wrap(cpu_vec_isa.VecISA, "check_build", "isa_probe")
    clock.wrap(cpp_builder.CppBuilder, "build", build_phase)
    clock.wrap(async_compile.AsyncCompile, "wait", "inductor_builds")
    clock.wrap(select_algorithm.AlgorithmSelectorCache, "benchmark", "benchmarking")
    if ext:
        t0 = time.perf_counter()
        from inductor_ext.lowering import decision_record, parallel_builds, vec_isa_record  # noqa: F401

        clock.ext_imports = time.perf_counter() - t0
        clock.wrap(parallel_builds, "build_all", "candidate_builds")  # ext's own precompile of a decision's candidates
        clock.wrap(vec_isa_record, "_ask_isas", "isa_probe")  # ext asks the probe's ISAs ahead, in a thread
        clock.wrap(vec_isa_record, "_probe_outcome", "isa_probe")  # waiting for the asking ahead
    original = select_algorithm.AlgorithmSelectorCache.make_precompile_fn

    def make_precompile_fn(self: Any, *args: Any, **kwargs: Any) -> Any:
        fn = original(self, *args, **kwargs)

        def precompile(*a: Any, **k: Any) -> Any:
            with clock.phase("candidate_builds"):
                return fn(*a, **k)

        for attr in ("precompile_key",):  # do_autotuning reads it off the function
            if hasattr(fn, attr):
                setattr(precompile, attr, getattr(fn, attr))
        return precompile

    select_algorithm.AlgorithmSelectorCache.make_precompile_fn = make_precompile_fn  # type: ignore[method-assign]
    return clock


def make_model(name: str, quick: bool) -> tuple[Any, tuple[Any, ...]]:
    import torch

    if name == "demo":
        from inductor_ext import demo

        model, x = demo.make_model("cpu", **({"batch": 1, "seq": 8, "dim": 32} if quick else {}))
        return model, (x,)
    if name == "bench":
        from inductor_ext.models.kv_decoder import SMOKE, Shape
        from inductor_ext.models.kv_decoder import make_model as make_decoder

        shape = SMOKE if quick else Shape()
        pos = 16 if quick else 512
        g = torch.Generator().manual_seed(1000)
        return make_decoder(shape, torch.float32), (torch.randint(0, shape.vocab, (1, 1), generator=g), pos)
    if name == "gpt2":  # hf_generate.py's gpt2_prefill_float32 row with 2 layers (compile work per layer repeats)
        import hf_generate

        w = hf_generate.QUICK if quick else hf_generate.Widths(layers=2)
        model = hf_generate.build(hf_generate.Row("gpt2", "none", "float32"), w)
        ids = torch.randint(0, w.gpt2_vocab, (1, 32 if quick else 512), generator=torch.Generator().manual_seed(1))

        class LogitsOnly(torch.nn.Module):  # hf_generate.py's prefill call: no cache, logits out
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, ids: torch.Tensor) -> torch.Tensor:
                return self.model(ids, use_cache=False).logits

        return LogitsOnly(), (ids,)
    if name in ("llama", "bert"):
        import transformers

        torch.manual_seed(0)
        if name == "llama":  # hf_generate.py's Llama widths
            w = hf_generate_widths(quick)
            config = transformers.LlamaConfig(vocab_size=w.llama_vocab, hidden_size=w.dim, intermediate_size=w.ffn,
                                              num_hidden_layers=2, num_attention_heads=w.heads,
                                              num_key_value_heads=w.heads, max_position_embeddings=w.positions)
            inner, ids = transformers.LlamaForCausalLM(config), torch.randint(0, w.llama_vocab, (1, 16))
        else:  # BERT-base widths, batch 4 x 128
            dim, ffn, heads, vocab = (64, 128, 4, 512) if quick else (768, 3072, 12, 30522)
            config = transformers.BertConfig(vocab_size=vocab, hidden_size=dim, intermediate_size=ffn,
                                             num_hidden_layers=2, num_attention_heads=heads)
            inner, ids = transformers.BertModel(config, add_pooling_layer=False), torch.randint(0, vocab, (4, 128))

        class Forward(torch.nn.Module):  # one forward, no cache: logits or the encoder's states out
            def __init__(self) -> None:
                super().__init__()
                self.model = inner.eval()

            def forward(self, ids: torch.Tensor) -> torch.Tensor:
                if name == "bert":
                    return self.model(ids).last_hidden_state
                return self.model(ids, use_cache=False).logits

        return Forward(), (ids,)
    raise ValueError(f"unknown model {name!r}; models: {', '.join(MODELS)}")


def hf_generate_widths(quick: bool) -> Any:
    import hf_generate

    return hf_generate.QUICK if quick else hf_generate.Widths(layers=2)


def run_arm(arm: str, model_name: str, cache_db: str, quick: bool) -> dict[str, Any]:
    """In this (fresh) process: compile the model for the arm once; the first call's seconds and
    where they went."""
    import torch
    from torch._dynamo.utils import compilation_time_metrics

    model, args = make_model(model_name, quick)
    clock = install_clock(ext=arm.startswith("ext"))
    t0 = time.perf_counter() - clock.ext_imports  # ext's modules imported above: part of the call
    if arm == "inductor":
        compiled = torch.compile(model, dynamic=False)
    elif arm == "inductor_max_autotune":
        compiled = torch.compile(model, mode="max-autotune", dynamic=False)
    elif arm == "ext_default":
        compiled = torch.compile(model, backend="ext", dynamic=False)
    elif arm == "ext_full":
        compiled = torch.compile(model, backend="ext", options={"autotune": "full", "autotune_cache": cache_db},
                                 dynamic=False)
    elif arm == "ext_shipped":
        compiled = torch.compile(model, backend="ext", options={"autotune_cache": cache_db}, dynamic=False)
    else:
        raise ValueError(f"unknown arm {arm!r}; arms: {', '.join(ARMS)}")
    compile_call = time.perf_counter() - t0
    with torch._inductor.config.patch(freezing=arm == "inductor_max_autotune"), torch.no_grad():
        compiled(*args)
        total = time.perf_counter() - t0
        runtime = time_calls(compiled, args, quick)
    phases = {"compile_call": round(compile_call, 3), **{p: round(clock.seconds.get(p, 0.0), 3) for p in PHASES}}
    phases["rest"] = round(total - sum(phases.values()), 3)
    timed = {key: round(sum(v), 3) for key, v in compilation_time_metrics.items()}
    decisions: list[Any] = []
    if arm.startswith("ext"):
        from inductor_ext.lowering import decision_record  # imported by install_clock already

        decisions = decision_record.decisions
    reasons = collections.Counter(re.split(r"[:;]", d.reason)[0] for d in decisions)
    return {"seconds": round(total, 3), "phases": phases, "builds": dict(clock.builds),
            "dynamo_timed": dict(sorted(timed.items(), key=lambda kv: -kv[1])[:12]),
            "decisions": len(decisions), "decision_reasons": dict(reasons), "runtime_ms": runtime}


PAIRED = ARMS  # ext_default before ext_full: ext_full's decisions go to the process's own cache


def run_paired(model_name: str, cache_db: str, quick: bool) -> dict[str, Any]:
    """In this (fresh) process: the model compiled for each arm of ``PAIRED`` (ext_shipped from
    ``cache_db``), then called in rounds, each arm once a round, the order reversed every round, so
    that every arm meets the machine as it is then; each arm's calls (ms) in round order."""
    import torch

    model, args = make_model(model_name, quick)
    compiled: dict[str, Any] = {}
    for arm in PAIRED:
        if arm == "inductor":
            compiled[arm] = torch.compile(model, dynamic=False)
        elif arm == "inductor_max_autotune":
            compiled[arm] = torch.compile(model, mode="max-autotune", dynamic=False)
        elif arm == "ext_default":
            compiled[arm] = torch.compile(model, backend="ext", dynamic=False)
        elif arm == "ext_full":  # tunes into this process's fresh cache folder, after ext_default compiled
            compiled[arm] = torch.compile(model, backend="ext", options={"autotune": "full"}, dynamic=False)
        else:  # ext_full's decisions from the arms, untimed, as ext_shipped served them
            compiled[arm] = torch.compile(model, backend="ext", options={"autotune_cache": cache_db}, dynamic=False)

    def call(arm: str) -> float:
        with torch._inductor.config.patch(freezing=arm == "inductor_max_autotune"), torch.no_grad():
            t0 = time.perf_counter()
            compiled[arm](*args)
            return (time.perf_counter() - t0) * 1e3

    winners: dict[str, list[str]] = {}  # each ext arm's decisions, in the order it made them
    for arm in PAIRED:  # compile, then two warm-up calls
        made = _decisions_so_far()
        for _ in range(3):
            call(arm)
        if arm.startswith("ext"):
            winners[arm] = [d.winner for d in _decisions_since(made)]
    calls: dict[str, list[float]] = {arm: [] for arm in PAIRED}
    spent, rounds = 0.0, 0
    while rounds < 9 or (spent < (0.5 if quick else 10.0) and rounds < 40):
        for arm in (PAIRED if rounds % 2 == 0 else PAIRED[::-1]):
            calls[arm].append(call(arm))
            spent += calls[arm][-1] / 1e3
        rounds += 1
    return {"calls_ms": {arm: [round(t, 3) for t in ts] for arm, ts in calls.items()}, "winners": winners}


def _decisions_so_far() -> int:
    """How many decisions ext has recorded in this process (0 before ext is imported)."""
    record = sys.modules.get("inductor_ext.lowering.decision_record")
    return 0 if record is None else len(record.decisions)


def _decisions_since(made: int) -> list[Any]:
    record = sys.modules.get("inductor_ext.lowering.decision_record")
    return [] if record is None else record.decisions[made:]


def paired_figures(calls: dict[str, list[float]]) -> dict[str, Any]:
    """Each arm's median and IQR, and each paired target's per-round ratio (median, IQR, p10-p90)."""
    def quartiles(values: list[float]) -> dict[str, float]:
        q = statistics.quantiles(values, n=4)
        d = statistics.quantiles(values, n=10)
        return {"median": round(statistics.median(values), 4), "q1": round(q[0], 4), "q3": round(q[2], 4),
                "p10": round(d[0], 4), "p90": round(d[-1], 4)}

    arms = {arm: {k: round(v, 3) for k, v in quartiles(ts).items()} | {"calls": len(ts)} for arm, ts in calls.items()}
    best = min(("inductor", "inductor_max_autotune"), key=lambda a: arms[a]["median"])
    ratios = {}
    for target, (arm, base, _) in RUNTIME_TARGETS.items():
        against = best if base == "best_inductor" else base
        ratios[target] = {"against": against,
                          **quartiles([a / b for a, b in zip(calls[arm], calls[against])])}
    return {"arms": arms, "ratios": ratios}


def time_calls(compiled: Any, args: tuple[Any, ...], quick: bool) -> dict[str, float]:
    """The compiled model's calls after the first: median and interquartile range (ms) of at least
    5 calls, more until ~2 s are spent (at most 40)."""
    for _ in range(2):
        compiled(*args)
    samples: list[float] = []
    spent = 0.0
    while len(samples) < 5 or (spent < (0.2 if quick else 2.0) and len(samples) < 40):
        t0 = time.perf_counter()
        compiled(*args)
        samples.append((time.perf_counter() - t0) * 1e3)
        spent += samples[-1] / 1e3
    q = statistics.quantiles(samples, n=4)
    return {"median": round(statistics.median(samples), 3), "q1": round(q[0], 3), "q3": round(q[2], 3),
            "calls": len(samples)}


# ---------------------------------------------------------------------------------- the driver


def spawn(arm: str, model_name: str, cache_db: str, quick: bool) -> dict[str, Any]:
    """The arm (or ``paired``) run in a fresh process with fresh cache folders; its JSON."""
    with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor"),
               "INDUCTOR_EXT_CACHE_DIR": os.path.join(tmp, "ext"), "INDUCTOR_EXT_ISA_CACHE": os.path.join(tmp, "isa"),
               "TRITON_CACHE_DIR": os.path.join(tmp, "triton")}
        for name in ("TRITON_INTERPRET", "TORCH_LOGS"):
            env.pop(name, None)
        command = [sys.executable, __file__, "--arm", arm, "--model-name", model_name, "--cache-db", cache_db]
        done = subprocess.run(command + (["--quick"] if quick else []), env=env, capture_output=True, text=True,
                              timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"arm {arm} on {model_name} failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def why_missed(arm: dict[str, Any], base: dict[str, Any], base_name: str) -> str:
    """Which phases make up the gap, largest first."""
    keys = ("compile_call", *PHASES, "rest")
    gaps = sorted(((arm["phases"][k] - base["phases"][k], k) for k in keys), reverse=True)
    parts = [f"{k} {d:+.1f} s" for d, k in gaps if abs(d) >= 0.05]
    builds = arm["builds"].get("candidate_builds", 0)
    return (f"{arm['seconds'] - base['seconds']:+.1f} s against {base_name}: " + ", ".join(parts)
            + f" ({builds} candidate C++ builds, {arm['decisions']} decisions)")


def targets(per_model: dict[str, dict[str, Any]]) -> dict[str, Any]:
    found = {}
    for target, (arm, base, limit) in TARGETS.items():
        rows, met = {}, True
        for model, r in per_model.items():
            ratio = r["median_s"][arm] / r["median_s"][base]
            row: dict[str, Any] = {"ratio": round(ratio, 3), "met": ratio <= limit,
                                   arm: round(r["median_s"][arm], 2), base: round(r["median_s"][base], 2)}
            if not row["met"]:
                row["why"] = why_missed(r["arms"][arm], r["arms"][base], base)
            rows[model] = row
            met &= row["met"]
        found[target] = {"want": f"{arm} <= {limit}x {base} on every model", "met": met,
                         "ratio": max(row["ratio"] for row in rows.values()), "per_model": rows}
    for target, (arm, base, limit) in RUNTIME_TARGETS.items():
        rows, met = {}, True
        for model, r in per_model.items():
            rows[model] = paired_row(r, target, arm, limit)
            met &= rows[model]["met"]
        found[target] = {"want": f"{arm} runtime <= {limit:.3g}x {base}'s on every model, or within noise",
                         "met": met, "ratio": max(row["ratio"] for row in rows.values()), "per_model": rows}
    return found


def paired_row(r: dict[str, Any], target: str, arm: str, limit: float) -> dict[str, Any]:
    """A runtime target's row from the model's paired rounds: met where the median per-round
    ratio is within ``limit``, within noise where its lower quartile is."""
    paired = r["paired"]
    ratio = paired["ratios"][target]
    against = ratio["against"]
    noise = ratio["q1"] <= limit < ratio["median"]
    row = {"ratio": round(ratio["median"], 3), "met": ratio["median"] <= limit or noise, "within_noise": noise,
           "paired": True, "ratio_iqr": [ratio["q1"], ratio["q3"]], "ratio_p10_p90": [ratio["p10"], ratio["p90"]],
           f"{arm}_ms": paired["arms"][arm]["median"], f"{against}_ms": paired["arms"][against]["median"]}
    if not row["met"]:
        reasons = r["arms"][arm]["decision_reasons"]
        if target == "shipped_runtime" and "shipped_same_decisions_as_full" in paired:
            reasons = {"same decisions as ext_full in this process": paired["shipped_same_decisions_as_full"],
                       **reasons}
        row["why"] = (f"side by side, {arm}/{against} per round {ratio['median']:.3f} (IQR {ratio['q1']:.3f}-"
                      f"{ratio['q3']:.3f}): {arm} {paired['arms'][arm]['median']:.1f} ms against {against} "
                      f"{paired['arms'][against]['median']:.1f} ms; {arm}'s decisions: {dict(reasons)}")
    return row


def shipped_copy(cache_db: Path, folder: Path) -> str:
    """``cache_db`` copied into ``folder``, both made read-only (as an image layer or a read-only
    mount ships it; root ignores the modes, ext reads a named layer read-only either way)."""
    folder.mkdir()
    shipped = folder / cache_db.name
    shutil.copyfile(cache_db, shipped)
    shipped.chmod(0o444)
    folder.chmod(0o555)
    return str(shipped)


def measure(model_name: str, repeats: int, quick: bool, work: Path) -> dict[str, Any]:
    samples: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for r in range(repeats):
        full = work / f"{model_name}_full_{r}"
        full.mkdir(mode=0o700)
        for arm in ARMS:  # ext_full before ext_shipped: ext_full's cache is what ext_shipped ships
            db = str(full / "cache.db")
            if arm == "ext_shipped":
                db = shipped_copy(full / "cache.db", work / f"{model_name}_shipped_{r}")
            samples[arm].append(spawn(arm, model_name, db, quick))
            print(f"  {model_name} {arm}: {samples[arm][-1]['seconds']:.1f} s, "
                  f"runtime {samples[arm][-1]['runtime_ms']['median']:.2f} ms", file=sys.stderr)
    # the runtimes side by side, ext_shipped from the last repeat's ext_full cache
    paired = spawn("paired", model_name, shipped_copy(full / "cache.db", work / f"{model_name}_paired"), quick)
    figures = paired_figures(paired["calls_ms"])
    # whether ext_shipped served the decisions ext_full made in the paired process (both near ties
    # and timing noise can make a second tuning pick otherwise)
    winners = paired["winners"]
    figures["shipped_same_decisions_as_full"] = winners.get("ext_shipped") == winners.get("ext_full")
    figures["winners"] = winners
    print(f"  {model_name} side by side: " + ", ".join(f"{a} {v['median']:.2f} ms" for a, v in figures["arms"].items()),
          file=sys.stderr)
    median = {arm: statistics.median(s["seconds"] for s in runs) for arm, runs in samples.items()}
    # the breakdown of the run closest to the median
    arms = {arm: min(runs, key=lambda s: abs(s["seconds"] - median[arm])) for arm, runs in samples.items()}
    return {"median_s": median, "samples_s": {a: [s["seconds"] for s in runs] for a, runs in samples.items()},
            "spread_s": {a: [min(v), max(v)] for a, v in ((a, [s["seconds"] for s in runs]) for a, runs in samples.items())},
            "arms": arms, "paired": figures,
            # decisions ext_shipped did not find in the cache ext_full filled (and decided untimed)
            "ext_shipped_misses": sum(n for reason, n in arms["ext_shipped"]["decision_reasons"].items()
                                      if reason != "cache")}


def bytecode_compiled() -> None:
    """ext's package compiled to bytecode (``__pycache__`` beside its sources), as pip leaves an
    installed wheel: the arms' processes then read it instead of compiling every module."""
    import compileall

    import inductor_ext

    if not compileall.compile_dir(os.path.dirname(inductor_ext.__file__), quiet=1):
        raise SystemExit("could not compile inductor_ext to bytecode (see above)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help=f"comma-separated subset of {', '.join(MODELS)}")
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per arm (the median is reported)")
    parser.add_argument("--quick", action="store_true", help="tiny models: checks the script, the figures mean little")
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--model-name", help=argparse.SUPPRESS)
    parser.add_argument("--cache-db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm == "paired":
        print(json.dumps(run_paired(args.model_name, args.cache_db, args.quick)))
        return
    if args.arm:
        print(json.dumps(run_arm(args.arm, args.model_name, args.cache_db, args.quick)))
        return
    models = args.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; models: {', '.join(MODELS)}")

    started = time.perf_counter()
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    work = Path(tempfile.mkdtemp(prefix="bench_compile_cache_"))
    bytecode_compiled()
    per_model = {m: measure(m, args.repeats, args.quick, work) for m in models}
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]
    figures = {"quick": args.quick, "repeats": args.repeats, "cpu_count": os.cpu_count(), "load_average": load,
               "load_average_after": load_after, "wall_s": round(time.perf_counter() - started, 1),
               "models": per_model, "targets": targets(per_model)}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"first call, median of {args.repeats} fresh process(es) per arm (seconds); load {load} -> {load_after}")
    for model, r in per_model.items():
        print(f"{model}: " + ", ".join(f"{a} {s:.1f}" for a, s in r["median_s"].items()))
        for arm, a in r["arms"].items():
            rt = a["runtime_ms"]
            print(f"  {arm:22s} " + ", ".join(f"{k} {v:.1f}" for k, v in a["phases"].items())
                  + f"  (C++ builds {a['builds']}); runtime {rt['median']:.2f} ms (IQR {rt['q1']:.2f}-{rt['q3']:.2f})"
                  + f"; decisions {a['decision_reasons']}")
        print("  side by side (one process, calls alternated): " + ", ".join(
            f"{arm} {v['median']:.2f} ms (IQR {v['q1']:.2f}-{v['q3']:.2f})" for arm, v in r["paired"]["arms"].items()))
    print_targets(figures["targets"], "per_model")


if __name__ == "__main__":
    main()
