"""``inductor-ext demo``: a small decoder block compiled with backend="ext", checked and timed.

It prints the preset, the passes applied, every generated kernel with the choice that won
against ATen, the compile time, and the speed against eager and backend="inductor", all
measured in this one run.
"""

from __future__ import annotations

import copy
import tempfile
import time
from typing import Any, Callable

import torch
from torch import nn

from inductor_ext.models.moe_block import DecoderBlock
from inductor_ext.runtime import timing


def make_model(device: str = "cpu", batch: int = 4, seq: int = 64, dim: int = 256) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = DecoderBlock(dim=dim).to(device).eval()
    return model, torch.randn(batch, seq, dim, device=device)


def _cold_compile(model: nn.Module, x: torch.Tensor, backend: str, options: dict[str, Any] | None) -> tuple[Any, float]:
    """The compiled model and its first call's seconds, with every Inductor cache fresh (so no
    arm reuses what another one compiled). No ``torch._dynamo.reset()``: it would drop the other
    arm's compiled code, which then compiled (and autotuned) again while being timed."""
    from inductor_ext import tune

    compiled = torch.compile(copy.deepcopy(model), backend=backend, **({"options": options} if options else {}))
    with tune.fresh_inductor_caches():
        t0 = time.perf_counter()
        compiled(x)
        return compiled, time.perf_counter() - t0


def _warm_up(device: str) -> None:
    """Pay what the first compile of a process pays once (imports, the C++ toolchain), so that
    neither timed arm carries it."""
    _cold_compile(nn.Linear(8, 8).to(device), torch.randn(2, 8, device=device), "inductor", None)


def device_description(device: str) -> str:
    """What the header names the device as: the GPU's own name where torch knows it."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.get_device_name(device)
    if kind == "xpu":
        return torch.xpu.get_device_name(device)
    return {"mps": "Apple GPU (MPS)", "cpu": "cpu"}.get(kind, kind)


def run(device: str | None = None, dump_dir: str | None = None, interpret: bool = False,
        reps: int = 20, out: Callable[[str], None] = print, size: dict[str, int] | None = None) -> dict[str, Any]:
    from inductor_ext import dumps, presets, progress
    from inductor_ext.autotune import decision_text
    from inductor_ext.lowering import decision_record
    from inductor_ext.lowering.passes import base as pass_base

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    # The interpreter runs kernels in numpy: keep the problem small there.
    model, x = make_model(device, **(size or ({"batch": 1, "seq": 16, "dim": 64} if interpret else {})))
    options: dict[str, Any] = {"dump_dir": dump_dir or tempfile.mkdtemp(prefix="inductor_ext_demo_")}
    if interpret:  # the hopper preset's Triton kernels, run on CPU tensors in Triton's interpreter
        options.update(preset="hopper", interpret=True, autotune="quick")
    config = presets.resolve(dict(options), [x])
    out(f"device      {device} ({device_description(device)})")
    out(f"preset      {config.preset} (target {config.target}, autotune {config.autotune}, templates {list(config.templates)})")

    first_decision, first_pass = len(decision_record.decisions), len(pass_base.applied)
    with torch.no_grad():
        expected = model(x)
        _warm_up(device)
        with progress.autotune_progress():  # one line: decisions done / total and the problem just decided
            ext_model, compile_s = _cold_compile(model, x, "ext", options)
        got = ext_model(x)
        ok = torch.allclose(got, expected, rtol=1e-3, atol=1e-4)
        max_err = (got - expected).abs().max().item()
        ind_model, ind_compile_s = _cold_compile(model, x, "inductor", None)
        timing_reps = 3 if interpret else reps
        sync = torch.cuda.synchronize if device == "cuda" else None
        times = timing.interleaved({"eager": lambda: model(x), "ext": lambda: ext_model(x),
                                    "inductor": lambda: ind_model(x)}, timing_reps, sync)

    applied = pass_base.applied[first_pass:]
    out(f"passes      {', '.join(f'{n} ({s}, {r} rewrites)' for n, s, r in applied) or 'none (this preset enables none)'}")
    out(f"check       {'OK' if ok else 'MISMATCH'}: max |ext - eager| = {max_err:.2e}")
    out(f"compile     ext {compile_s:.1f} s, inductor {ind_compile_s:.1f} s (first call, includes tracing; both cold: "
        "fresh Inductor caches, after one warm-up compile)")
    index = dumps.read_index(options["dump_dir"])
    out(f"kernels     {len(index['kernels'])} (dumps in {options['dump_dir']}):")
    for line in dumps.format_table(index).splitlines():
        out("  " + line)
    gemms = decision_record.decisions[first_decision:]
    for d in gemms:
        out(f"gemm        {decision_text.decision_line(d.node, d.problem, d.winner, d.reason, d.candidates)}")
    if not gemms:
        out(f"gemm        every GEMM went to ATen: autotune is {config.autotune!r} in preset {config.preset!r}")
    out(f"speed       eager {times['eager'].text()}, ext {times['ext'].text()}, inductor {times['inductor'].text()}")
    out(f"ratios      {timing.compare(times['ext'], times['eager'], 'ext', 'eager')}; "
        f"{timing.compare(times['ext'], times['inductor'], 'ext', 'inductor')}")
    if interpret:
        out("note        interpret mode runs ext's Triton kernels in the Triton interpreter (numpy): "
            "it shows what is generated and chosen, its speed means nothing")
    return {"ok": ok, "max_err": max_err, "compile_s": compile_s, "inductor_compile_s": ind_compile_s,
            **{f"{arm}_s": t.median for arm, t in times.items()}, "timings": times,
            "kernels": len(index["kernels"]), "preset": config.preset}


def tune_model() -> nn.Module:
    """The demo block at the interpreter's size, for ``inductor-ext tune build`` examples."""
    return make_model("cpu", batch=1, seq=16, dim=64)[0]


def tune_inputs() -> tuple[torch.Tensor]:
    return (make_model("cpu", batch=1, seq=16, dim=64)[1],)


def main(device: str | None, dump_dir: str | None, interpret: bool) -> int:
    result = run(device, dump_dir, interpret)
    return 0 if result["ok"] else 1
