"""``torch.compile(model, backend="ext")``: presets and options in, Inductor with our passes out."""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
from typing import Any, Callable, Sequence

import torch
from torch._inductor import list_mode_options
from torch._inductor.compile_fx import compile_fx, compile_fx_inner
from torch._dynamo.utils import counters
from torch._inductor.virtualized import V

from inductor_ext import codegen as codegens
from inductor_ext import dumps, presets, targets, tracing
from inductor_ext.codegen import DeviceCodegen
from inductor_ext.config import ExtConfig, ExtOptionError
from inductor_ext.autotune import cache_layers
from inductor_ext.lowering import ext_choices, frozen_params, install
from inductor_ext.logs import autotune_log
from inductor_ext.lowering.decision_record import decisions
from inductor_ext.lowering.ext_choices import ExtChoices
from inductor_ext.runtime.interpret import enable_triton_interpreter

log = logging.getLogger("inductor_ext")

_graph_ids = itertools.count()


def resolve_config(example_inputs: Sequence[Any], options: dict[str, Any] | None = None,
                   mode: str | None = None) -> tuple[ExtConfig, dict[str, Any]]:
    """The ExtConfig and the Inductor mode patches for one compile."""
    options = dict(options or {})
    mode_patches: dict[str, Any] = {}
    if mode is not None:
        if mode in presets.PRESETS:
            options.setdefault("preset", mode)
        elif mode in list_mode_options():
            mode_patches = dict(list_mode_options(mode))
            if mode_patches.get("max_autotune"):
                options.setdefault("autotune", "full")
        else:
            raise ExtOptionError(f"unknown mode {mode!r} for backend='ext'; use an Inductor mode "
                                 f"({', '.join(list_mode_options())}) or a preset ({', '.join(presets.PRESETS)})")
    if "dump_dir" not in options and os.environ.get("INDUCTOR_EXT_DUMP_DIR"):
        options["dump_dir"] = os.environ["INDUCTOR_EXT_DUMP_DIR"]
    config = presets.resolve(options, example_inputs)
    if config.dump_dir and (problem := dumps.dump_dir_problem(config.dump_dir)) is not None:
        raise ExtOptionError(f"options['dump_dir'] = {config.dump_dir!r}: {problem}; give a folder you can write")
    return config, mode_patches


def ext_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
                options: dict[str, Any] | None = None, mode: str | None = None, **_: Any) -> Callable[..., Any]:
    """The ``ext`` Dynamo backend (registered through the ``torch_dynamo_backends`` entry point)."""
    config, mode_patches = resolve_config(example_inputs, options, mode)
    warn_device_mismatch(config, example_inputs)
    install.ask_isas_ahead(config)
    codegen = device_codegen(config)
    if install.uses_triton_interpreter(config, codegen is not None):
        enable_triton_interpreter()
    patches = {**mode_patches, **install.inductor_patches(config, codegen is not None, mode_patches)}
    if config.dump_dir or tracing.enabled():  # a dump or a TORCH_TRACE shows each kernel's FX nodes
        patches["trace.provenance_tracking_level"] = 1  # kernel -> FX nodes and user lines
    log.info("ext: preset %s, target %s, passes %s, templates %s, autotune %s",
             config.preset, config.target, list(config.passes), list(config.templates), config.autotune)
    if patches.get("freezing") and not torch.is_grad_enabled():  # an inference graph: Inductor freezes it
        return frozen_params.compile_frozen(gm, example_inputs, lambda g, inputs, freeze: _compile(
            config, codegen, g, inputs, {**patches, "freezing": freeze}))
    return _compile(config, codegen, gm, example_inputs, patches)


_mismatches_told: set[tuple[str, str]] = set()


def warn_device_mismatch(config: ExtConfig, example_inputs: Sequence[Any]) -> None:
    """A preset chosen for another device than the inputs' serves nothing of its own (ATen and
    Inductor do the work): say so once per (preset, device) at WARNING, naming both."""
    device = next((x.device.type for x in example_inputs if isinstance(x, torch.Tensor)), None)
    expected = "cpu" if config.interpret else config.device_type
    if device is None or device == expected or config.preset == "aten" or (config.preset, device) in _mismatches_told:
        return
    _mismatches_told.add((config.preset, device))
    hint = " (or add options={'interpret': True} to run its kernels on CPU tensors)" if device == "cpu" else ""
    log.warning("ext: preset %r is for %s tensors%s but this graph's inputs are on %s: none of its templates "
                "can serve them, so ATen and Inductor do; use preset 'auto' or %r%s",
                config.preset, config.device_type, " (on CPU tensors with interpret)" if config.interpret else "",
                device, presets.preset_for_device(torch.device(device)), hint)


def _compile(config: ExtConfig, codegen: DeviceCodegen | None, gm: torch.fx.GraphModule,
             example_inputs: Sequence[Any], patches: dict[str, Any]) -> Callable[..., Any]:
    inner = functools.partial(_inner_compile, config)
    stack = contextlib.ExitStack()
    if config.dump_dir:
        # The AOTAutograd cache would skip inner_compile and so the dump; Inductor's FX graph
        # cache still applies, and a hit still yields the output code we dump.
        stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    if codegen is not None:
        stack.enter_context(codegen.install(config))
    stack.enter_context(install.freezing_context(patches))  # ext's C++ GEMMs serve the linears
    # Our handler for the whole compile: Inductor would otherwise create one lazily from the
    # patched inductor_choices_class and keep it for every later compile in this thread.
    hits = counters["aot_autograd"]["autograd_cache_hit"]
    with stack, V.set_choices_handler(ExtChoices(config)):
        compiled = compile_fx(gm, example_inputs, inner_compile=inner, config_patches=patches)
    if counters["aot_autograd"]["autograd_cache_hit"] > hits:  # inner compile never ran: say why
        _served_cached("AOTAutograd's cache")
    return compiled


def _served_cached(cache: str) -> None:
    """One line (``TORCH_LOGS=ext_autotune``) for a graph whose compile made no decision because
    a cache of Inductor's handed back the whole compiled graph: its choices came with it."""
    autotune_log.info("ext: graph served by %s: its kernel choices were made when it was first compiled "
                      "and are cached with it (no ext decision now)", cache)


def device_codegen(config: ExtConfig) -> DeviceCodegen | None:
    """ext's device codegen for this compile: the target's (Metal for mps, ...), installed for
    its device, or for CPU tensors in interpret mode; None when Inductor's own codegen serves."""
    name = targets.get(config.target).codegen
    if name is None:
        return None
    codegen = codegens.get(name)
    if not codegen.enabled(config):
        return None
    missing = codegen.missing()
    if missing:
        raise ExtOptionError(f"preset {config.preset!r} generates {codegen.language} kernels with ext's {name} "
                             f"codegen, which cannot run here: {missing}")
    return codegen


def _inner_compile(config: ExtConfig, gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                   **kwargs: Any) -> Any:
    """Inductor's inner compile (forward, backward, inference) with ext's choices installed."""
    first, seen = len(decisions), dumps.provenance_keys()
    # Inductor caches its choices handler per thread on first use and then ignores the
    # inductor_choices_class config (which we still patch: its uuid keys the FX graph cache).
    # Install ours for exactly this compile, and put back whatever was there. The device codegen
    # too: the backward graph is compiled at the first backward(), after ext_backend returned.
    codegen = device_codegen(config)
    with contextlib.ExitStack() as stack, V.set_choices_handler(ExtChoices(config)):
        stack.enter_context(install.compile_context(config))
        # the FX graph cache's key holds only the cache entries a graph of these sizes could use
        stack.enter_context(cache_layers.graph_scope(ext_choices.graph_dims(gm, example_inputs)))
        if codegen is not None:
            stack.enter_context(codegen.install(config))
        hits = counters["inductor"]["fxgraph_cache_hit"]
        compiled = compile_fx_inner(gm, example_inputs, **kwargs)
    if counters["inductor"]["fxgraph_cache_hit"] > hits and len(decisions) == first:
        _served_cached("Inductor's FX graph cache")
    tracing.kernels(lambda: dumps.traced_kernels(getattr(compiled, "source_code", None) or "",
                                                 dumps.provenance_since(seen)))  # tlparse
    if not config.dump_dir:
        return compiled
    kind = "backward" if kwargs.get("is_backward") else ("inference" if kwargs.get("is_inference") else "forward")
    code = getattr(compiled, "source_code", None)
    if code is None:
        log.warning("ext: no output code to dump for %s graph (%s)", kind, type(compiled).__name__)
        return compiled
    module_globals = getattr(getattr(compiled, "current_callable", None), "__globals__", {})
    dumps.write(config.dump_dir, f"graph{next(_graph_ids):03d}_{kind}", code, gm, decisions[first:],
                dumps.provenance_since(seen), dumps.gpu_asm(module_globals))
    return compiled
