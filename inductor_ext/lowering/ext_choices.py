"""ext's InductorChoices: offers our templates beside ATen, consults the autotune cache, and
decides the winner (a template must beat ATen by the configured margin). What it records of each
decision is ``decision_record.py``; the source hash in its cache keys, ``template_keys.py``.

The backend installs one instance per compile (``V.set_choices_handler``); the same factory is
also set as ``inductor_choices_class`` so its uuid() enters the FX graph cache key.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import math
from typing import Any, Callable

import torch
from torch._inductor import config as inductor_config
from torch._inductor.choices import InductorChoices
from torch._inductor.select_algorithm import ExternKernelChoice
from torch._inductor.virtualized import V

from inductor_ext import targets
from inductor_ext.autotune import decide, decision_tables, decision_text, pdl_policy, policy, tune_queue
from inductor_ext.autotune.cache import AutotuneCache, Entry, ProblemKey
from inductor_ext.autotune import cache_layers
from inductor_ext.autotune.cache_layers import DecisionSources
from inductor_ext.autotune.cost_model import CostModel, Prediction
from inductor_ext.config import ExtConfig
from inductor_ext.lowering import (adapters, aten_choices, candidate_guard, cold_timing, frozen_weights_key, ops,
                                   parallel_builds, pdl_consumers, returned_outputs)
from inductor_ext.logs import autotune_log
from inductor_ext.lowering.decision_record import (Decision, announce, cache_candidate, candidate_record,
                                                   decision_of, decisions, dropped, problem_text, rule_candidate)
from inductor_ext.lowering.ops._spec import symbolic_indices
from inductor_ext.lowering import refusals
from inductor_ext.lowering.refusals import Refusal
from inductor_ext.lowering.template_keys import templates_hash
from inductor_ext.runtime import background_builds, extras, fresh_pages
from inductor_ext.targets import cpu as cpu_target
from inductor_ext.templates import registry
from inductor_ext.templates.family import Family

log = logging.getLogger("inductor_ext.autotune")

UNTIMED = ("model", "background")  # efforts that serve from caches, tables and the cost model, timing nothing


def available_templates() -> dict[str, Family]:
    """Every template family by name (``templates/registry.py``)."""
    return registry.families()


def sources_for(config: ExtConfig) -> DecisionSources:
    """Where this compile's decisions are looked up (read-only layers named by ``autotune_cache``,
    then the user's own cache) and written (the user's cache): ``autotune/cache_layers.py``."""
    named = config.autotune_cache
    paths = () if named is None else (named,) if isinstance(named, str) else tuple(named)
    return DecisionSources(paths, times=config.autotune in ("quick", "full"),
                           cached=not inductor_config.force_disable_caches)


def tables_for(config: ExtConfig) -> decision_tables.TableSet:
    """The decision tables a compile reads: those named by ``decision_tables``, then the package's."""
    named = config.decision_tables
    paths = () if named is None else (named,) if isinstance(named, str) else tuple(named)
    return decision_tables.TableSet.for_paths(paths)


STREAMED_MAX_ROWS = 8  # fp32 GEMMs of at most this many rows read their weight faster than they use it


def decode_shaped(op_name: str, kernel_inputs: Any) -> bool:
    """Whether a CPU op is a decode step's, so that inside the model each call streams what it
    reads from memory (timed so: ``cold_timing.time_streamed``): a GEMM of a few static rows
    against a frozen weight, or attention of one query token over a KV cache (each layer's cache
    is read once a step, after every other layer's weights and cache). Flushed instead, a call
    also finds the interpreter's and the dispatcher's own memory cold, which a decode loop never
    does: a kernel called from Python was timed ~250 us slower than it runs there."""
    if kernel_inputs.device_type != "cpu":
        return False
    if op_name == "decode_attention":
        return True
    if op_name not in ("mm", "addmm"):
        return False
    inputs = ops.op_inputs(op_name, kernel_inputs)
    if isinstance(inputs, str):
        return False
    x, w_t = inputs.spec.inputs[-2:]
    return w_t.constant and not any(x.dynamic) and x.shape[0] <= STREAMED_MAX_ROWS


def cache_for(config: ExtConfig) -> AutotuneCache:
    """The user's own writable cache of this compile: new decisions and machine facts go there."""
    return sources_for(config).writable


class ExtChoices(InductorChoices):
    def __init__(self, config: ExtConfig) -> None:
        super().__init__()
        self.config = config

    @functools.cached_property
    def sources(self) -> DecisionSources:
        """Read once per compile: the layers as they are when it starts."""
        return sources_for(self.config)

    @functools.cached_property
    def tables(self) -> decision_tables.TableSet:
        """The decision tables of an ``autotune="model"`` compile (the user's, then the package's)."""
        return tables_for(self.config)

    def model(self, form: str) -> CostModel:
        """The cost model over the tables' entries measured on machines of ``form`` (one per compile)."""
        models = self.__dict__.setdefault("_models", {})
        if form not in models:
            models[form] = CostModel.from_entries(self.tables.entries(form))
        return models[form]

    def form(self, key: ProblemKey) -> str:
        """The machine as decision tables name it: a CPU by its form (``targets/cpu.py: host_form``),
        any other device by its name."""
        return cpu_target.host_form() if self.config.device_type == "cpu" else key.device_name

    def uuid(self) -> str:
        parts = [self.config.to_json(), templates_hash(self.config)]
        if self.config.autotune != "off":  # the graph holds the entries it could be served, exactly
            parts.append(self.sources.digest(cache_layers.current_scope()))
        if self.config.autotune in (*UNTIMED, "quick"):  # and the tables and machine form that served or pruned it
            parts += [self.tables.digest(), cpu_target.host_form() if self.config.device_type == "cpu" else ""]
        weights = frozen_weights_key.current_digest()  # a frozen graph's packed weights are its entry's
        if weights is not None:
            parts.append(weights)
        return hashlib.sha256("|".join(parts).encode()).hexdigest()

    def serves(self, op_name: str) -> bool:
        """Whether this compile offers any template family for ``op_name``."""
        return self.config.autotune != "off" and any(op_name in registry.get(f).ops for f in self.config.templates)

    def get_template_configs(self, kernel_inputs: Any, templates: list[Any], op_name: str,
                             kwarg_overrides: dict[str, dict[str, Any]] | None = None) -> list[Any]:
        choices = super().get_template_configs(kernel_inputs, templates, op_name, kwarg_overrides)
        # Inductor asks once per lowering with its ATen choice in the list: add ours then.
        if not choices or not any(isinstance(t, ExternKernelChoice) for t in templates):
            return choices
        return self.offer(op_name, kernel_inputs, choices)

    def offer(self, op_name: str, kernel_inputs: Any, choices: list[Any]) -> list[Any]:
        """``choices`` (ATen's, first one the default) plus ours, or one cached/fallback choice."""
        families = [f for f in self.config.templates if op_name in registry.get(f).ops]
        if not families or self.config.autotune == "off":
            return choices
        node = V.graph.current_node.name if V.graph.current_node is not None else "?"
        returned = self._times_returned_output(kernel_inputs)
        decision = Decision(node=node, op=op_name, problem=problem_text(op_name, kernel_inputs, returned))
        decisions.append(decision)
        aten_choices.extend(self.config, op_name, kernel_inputs, choices)
        decision.candidates = [candidate_record(c, "aten", "aten", None, None) for c in choices]
        prepared = {}
        for family in families:
            module = registry.get(family)
            ready = (refusals.here(self.config, module, kernel_inputs.device_type,
                                   bool(getattr(V.graph, "cpp_wrapper", False)))
                     or adapters.prepare(module, kernel_inputs, op_name))
            if isinstance(ready, Refusal):
                log.info("%s", ready.line(node, f"{op_name} {decision.problem}"))
                decision.reason = f"fallback: {ready}"
            else:
                prepared[family] = self._with_pdl(module, ready)
        if not prepared:
            return self._only(choices, decision, choices[0], decision.reason)
        decision.key = self._key(op_name, kernel_inputs, returned)
        use_cache = decide.uses_cache(bool(forced_templates(self.config)))
        found = self.sources.get(decision.key) if use_cache else None
        untimed = decide.untimed(self.config.autotune, found is not None)
        if found is not None:
            autotune_log.debug("%s: %s %s decided by the cache %s", node, op_name, decision.problem, found[1])
            return self._from_cache(found[0], choices, prepared, decision)
        if self.config.autotune in UNTIMED and use_cache:  # nothing timed
            key = decision.key
            picked = self._untimed_pick(choices, prepared, decision)
            if self.config.autotune == "background":
                self._queue(key, op_name, kernel_inputs)
            return picked
        if untimed is not None:
            return self._only(choices, decision, choices[0], untimed)
        prediction = self._quick_prediction(decision.key)
        if prediction is not None and prediction.template_loses(self.config.template_margin):
            why = f"model: no template timed, none would win: {prediction.text()}"
            if len(choices) == 1:
                return self._only(choices, decision, choices[0], why)
            autotune_log.debug("%s: %s %s %s", node, op_name, decision.problem, why)
            prepared = {}  # ATen's choices are timed among themselves
        for family, ready in prepared.items():
            module = registry.get(family)
            offered = []
            default = adapters.default_config(module, ready, self.config.target)
            # asked twice for a ruled-out default: cached, so it logs one line
            ruled_out = None if family in forced_templates(self.config) else functools.cache(
                functools.partial(_measured, module, ready.problem, self.config.target, node))
            # forced under an untimed effort: the forced family's candidates are timed as under "quick"
            effort = "quick" if self.config.autotune in UNTIMED else self.config.autotune
            near = self._configs_near(module, prediction)
            if near:  # quick: the configs that won nearby in the tables, not the default proposals
                proposed = policy.candidates(module, ready.problem, self.config.target, effort,
                                             [policy.ModelPolicy(near)], ruled_out)[:policy.QUICK_FROM_MODEL]
            else:
                proposed = policy.candidates(module, ready.problem, self.config.target, effort, ruled_out=ruled_out)
            if default is not None and all(c.config != default for c in proposed) \
                    and (ruled_out is None or not ruled_out(default)):
                proposed.append(policy.Candidate(default, "default"))  # the baseline is timed unless ruled out
            for cand in proposed:
                refusal = refusals.config(module, ready.problem, cand.config, self.config.target)
                if refusal is not None:
                    log.info("%s", refusal.line(node))
                    continue
                try:
                    choice = self._append(module, choices, ready, cand.config)
                except Exception as e:  # a broken candidate is dropped, never fatal
                    choice, why = None, candidate_guard.reason(e)
                else:
                    why = "Inductor could not generate it"
                if choice is None:
                    log.warning("ext: dropped %s config %s for %s: %s", family, cand.config, node, why)
                    continue
                offered.append(cand.config)
                decision.candidates.append(candidate_record(choice, "template", family, cand.policy,
                                                            registry.config_to_dict(cand.config),
                                                            cand.config == default))
                # a failure while Inductor builds or times it drops it (inf), never the compile
                candidate_guard.guard(choice, functools.partial(dropped, decision, len(decision.candidates) - 1))
            if module.choice_kind == "extern":
                adapters.prebuild_extern(module, ready.problem, offered, self.config.target, kernel_inputs.device_type)
        for i, choice in enumerate(choices):  # one candidate per choice, in order
            decision.track(choice, i)
        if returned:
            cold_timing.time_as_returned(choices)
        if decode_shaped(op_name, kernel_inputs):
            cold_timing.time_streamed(choices)
        parallel_builds.build_all(choices)  # side by side, and over before Inductor times the first
        decision.reason = "benchmark"
        return choices

    def _append(self, family: Family, choices: list[Any], ready: Any, config: Any) -> Any | None:
        choice = adapters.append(family, choices, ready, config, self.config.target)
        if choice is not None and family.pdl and ready.problem.use_pdl:
            pdl_consumers.mark(choice)  # so the kernel after it waits (gdc_wait) and launches with PDL
        return choice

    def _with_pdl(self, family: Family, ready: Any) -> Any:
        """Set the problem's use_pdl by the pdl option and pdl_policy's rule, for a family that
        declares PDL (``Family.pdl``) on a target that has it (NVIDIA only).

        The consumer is taken to read the output directly: Inductor makes only a kernel that
        reads the template's output wait on it (pdl_consumers), and a producer that releases
        its dependents early costs nothing when no dependent was launched with PDL."""
        problem = ready.problem
        if not family.pdl or not targets.has(self.config.target, targets.PDL):
            return ready
        use = pdl_policy.use_pdl(self.config.pdl, problem.m, problem.n, problem.k, True)
        return dataclasses.replace(ready, problem=dataclasses.replace(problem, use_pdl=use))

    def _only(self, choices: list[Any], decision: Decision, choice: Any, reason: str) -> list[Any]:
        """Hand Inductor a single choice: it then uses it without benchmarking anything."""
        decision.winner, decision.reason = choice.name, reason
        decision.track(choice, next(i for i, c in enumerate(decision.candidates) if c["name"] == choice.name))
        if reason == "cache":
            decision.cached_under = decision.key
        decision.key = None  # nothing was timed: nothing to write
        autotune_log.debug("%s", decision_text.decision_line(decision.node, decision.problem, choice.name, reason,
                                                             decision.candidates))
        announce(decision)
        return [choice]

    def _from_cache(self, entry: Entry, choices: list[Any], prepared: dict[str, Any], decision: Decision,
                    source: str = "cache") -> list[Any]:
        if entry.winner == "aten":
            name = entry.config.get("name")
            aten = next((c for c in choices if c.name == name), choices[0])
            return self._only(choices, decision, aten, source)
        module = registry.families().get(entry.winner)
        if module is None or entry.winner not in prepared:
            return self._only(choices, decision, choices[0],
                              f"fallback: the {source}'s winner {entry.winner} is not enabled")
        chosen = self._servable(module, prepared[entry.winner], entry.config, decision.node)
        if chosen is None:
            return self._only(choices, decision, choices[0], f"fallback: the {source}'s config could not be generated")
        decision.candidates.append(candidate_record(chosen, "template", entry.winner, source, entry.config))
        return self._only(choices, decision, chosen, source)

    def _build_beside(self, module: Family, ready: Any, config: Any) -> None:
        """An extern family served untimed builds its kernel at the graph's first call (g++ on
        the critical path, ~1 s for ``cpp.flash_attention``): where it has ``prebuild``, that
        build starts now, beside the rest of the compile."""
        if module.choice_kind != "extern" or module.prebuild is None:
            return
        device_type = ready.inputs[0].get_device().type
        background_builds.start(functools.partial(adapters.prebuild_extern, module, ready.problem, [config],
                                                  self.config.target, device_type), f"ext-prebuild-{module.name}")

    def _servable(self, module: Family, ready: Any, config_dict: dict[str, Any], node: str) -> Any | None:
        """The choice of ``module`` for ``config_dict``, or None where its family refuses the config
        for this problem (a config from a cache or a table for another problem is data, not a promise).
        Every untimed pick (cache, table, model) is served through here: a kernel it needs built
        starts building now (``_build_beside``)."""
        try:
            config = registry.config_from_dict(module, config_dict)
        except ValueError as e:
            log.info("ext: %s config %s not usable for %s: %s", module.name, config_dict, node, e)
            return None
        refusal = refusals.config(module, ready.problem, config, self.config.target)
        if refusal is not None:
            log.info("%s", refusal.line(node))
            return None
        chosen = self._append(module, [], ready, config)
        if chosen is not None:
            self._build_beside(module, ready, config)
        return chosen

    def _queue(self, key: ProblemKey, op_name: str, kernel_inputs: Any) -> None:
        """``autotune="background"``: queue a GEMM or an attention served untimed for the background worker."""
        if op_name not in tune_queue.QUEUED_OPS:
            return
        options = {"preset": self.config.preset, "templates": list(self.config.templates),
                   "template_margin": self.config.template_margin, "freezing": self.config.freezing}
        constants = tuple(ops.constant_name(n) is not None for n in kernel_inputs.nodes())  # frozen weights
        job = tune_queue.Job(key, constants, torch.get_num_threads(), options)
        queue = tune_queue.TuneQueue()
        try:
            if queue.add(job):
                autotune_log.debug("%s: %s queued for background tuning", V.graph.current_node, key.describe())
                tune_queue.start_worker(queue)
        except tune_queue.BadQueue as e:
            log.warning("ext: background tuning queues nothing: %s", e)

    def _quick_prediction(self, key: ProblemKey) -> Prediction | None:
        """Under ``autotune="quick"`` (nothing forced), the cost model's word on ``key``: it prunes
        what is timed (``cost_model.Prediction.template_loses``, ``_configs_near``)."""
        if self.config.autotune != "quick" or forced_templates(self.config):
            return None
        form = self.form(key)
        return self.model(form).predict(decision_tables.portable(key, form))

    @staticmethod
    def _configs_near(module: Family, prediction: Prediction | None) -> list[Any]:
        """The family's configs that won near the problem, as config objects (a table's config
        the family cannot read is skipped: it is data, not a promise)."""
        configs = []
        for config in prediction.configs_of(module.name) if prediction is not None else ():
            try:
                configs.append(registry.config_from_dict(module, dict(config)))
            except ValueError:
                continue
        return configs

    def _lost_here(self, module: Family, ready: Any, config: Any) -> bool:
        """Whether the family rules ``config`` out for this problem (measured to lose here)."""
        try:
            return refusals.measured(module, ready.problem, registry.config_from_dict(module, dict(config)),
                                     self.config.target) is not None
        except ValueError:
            return True

    def _untimed_pick(self, choices: list[Any], prepared: dict[str, Any], decision: Decision) -> list[Any]:
        """``autotune="model"``, nothing cached: a decision table's entry for this problem, else the
        cost model's pick (a template only where it predicts a win by the margin, its error
        included), else ATen's side: the ATen-side choice that beat the op by the margin on average
        in the nearest table entries (of the problem's kind, else of its library kind, ``cost_model.library_kind_of``)
        where this compile offers it, else ATen's default. Nothing is timed
        and nothing is written."""
        assert decision.key is not None
        form = self.form(decision.key)
        found = self.tables.get(decision.key, form)
        if found is not None:
            entry, table = found
            autotune_log.debug("%s: %s %s decided by the decision table %s", decision.node, decision.op,
                               decision.problem, table)
            return self._from_cache(entry, choices, prepared, decision, source="table")
        prediction = self.model(form).predict(decision_tables.portable(decision.key, form))
        if prediction.template_wins(self.config.template_margin):
            for family, config in prediction.configs:
                module = registry.families().get(family)
                if module is None or family not in prepared or self._lost_here(module, prepared[family], config):
                    continue
                chosen = self._servable(module, prepared[family], dict(config), decision.node)
                if chosen is not None:
                    decision.candidates.append(candidate_record(chosen, "template", family, "model", dict(config)))
                    return self._only(choices, decision, chosen, f"model: {prediction.text()}")
        aten = prediction.aten_pick(self.config.template_margin)
        served = next((c for c in choices if c.name == aten), None) if aten else None
        if served is not None and prediction.aten_choice is not None:
            gain = math.exp(prediction.aten_choice[1])
            n = prediction.aten_choice_entries
            entry = "in the nearest table entry" if n == 1 else f"on average in the {n} nearest table entries that timed it"
            if prediction.aten_choice_from:
                entry += f" ({'one' if n == 1 else 'the nearest'} with {prediction.aten_choice_from})"
            return self._only(choices, decision, served, f"model: {aten}, {gain:.2f}x faster than {decision.op} "
                                                         f"{entry}; {prediction.text()}")
        return self._only(choices, decision, choices[0], f"model: ATen's default; {prediction.text()}")

    def _times_returned_output(self, kernel_inputs: Any) -> bool:
        """Whether this problem's choices are timed writing fresh pages: its output is returned by
        the graph (``lowering/returned_outputs.py``) and timed by ``cold_timing`` on an OS that
        lets it drop pages. Elsewhere timing does not depend on it, and neither does the key."""
        if self.config.device_type != "cpu" or kernel_inputs.device_type != "cpu" or not fresh_pages.supported():
            return False
        return returned_outputs.returned(V.graph.current_node)

    def _key(self, op_name: str, kernel_inputs: Any, returned: bool = False) -> ProblemKey:
        dtypes = tuple(str(n.get_dtype()).removeprefix("torch.") for n in kernel_inputs.nodes())
        return ProblemKey(
            op=op_name, shapes=kernel_inputs.shapes_hinted(), strides=kernel_inputs.strides_hinted(),
            dtypes=dtypes, device_name=targets.device_name(kernel_inputs.device()), arch=self.config.target,
            versions={"torch": torch.__version__, "triton": extras.installed_version("triton")},
            template_hash=templates_hash(self.config), preset=self.config.preset,
            fp32_precision=ops.problem_fp32_precision(op_name, dtypes),
            dynamic=symbolic_indices(kernel_inputs.nodes()),  # shapes hold the hints it is tuned at
            returned=returned)

    def override_best_choice(self, best_choice: Any, timings: dict[Any, float]) -> Any:
        """Inductor's fastest ``best_choice`` through ext's rules (``autotune/decide.py``); the
        decision records every time and the winner, and the cache remembers it."""
        decision = decision_of(timings)
        for choice in timings if decision is not None else ():  # Inductor's own from a call ext offered
            if decision.index_of(choice) is None:  # nothing in (max-autotune's Triton addmm): baseline too
                decision.candidates.append(candidate_record(choice, "aten", "aten", None, None))
                decision.track(choice, len(decision.candidates) - 1)
        records = [(choice, rule_candidate(choice, t, decision)) for choice, t in timings.items()]
        choice_of = {id(record): choice for choice, record in records}
        best = next(r for c, r in records if c is best_choice)
        forced_families = forced_templates(self.config)
        picked, reason = decide.pick(best, [r for _, r in records], self.config.template_margin, forced_families)
        chosen = choice_of[id(picked)]
        if decision is None:
            return chosen
        for choice, record in records:
            i = decision.index_of(choice)
            if i is not None:
                decision.candidates[i]["time_us"] = round(record.time_ms * 1000, 3)
                if record.warm_ms is not None:  # CPU: also timed warm
                    decision.candidates[i]["warm_time_us"] = round(record.warm_ms * 1000, 3)
        winner = decision.candidates[decision.index_of(chosen)]
        decision.winner, decision.reason = winner["name"], reason
        autotune_log.debug("%s", decision_text.decision_line(decision.node, decision.problem, decision.winner, reason,
                                                             decision.candidates))
        if decision.key is not None and decide.uses_cache(bool(forced_families)):
            self._remember(decision, winner, *decide.decided_times([r for _, r in records], picked))
        announce(decision)
        return chosen

    def _remember(self, decision: Decision, winner: dict[str, Any], winner_ms: float, aten_time_ms: float | None,
                  flag: str | None) -> None:
        """Winner and ATen times in the regime the decision was made in (``decide.decided_times``):
        what ``tune show`` divides for a speed-up (none when the OS set the times); decided on warm
        times or fallen back to ATen for that, the reason says why."""
        is_aten = winner["kind"] == "aten"
        entry = Entry(
            key=decision.key, winner="aten" if is_aten else winner["family"],
            config={"name": winner["name"]} if is_aten else winner["config_dict"],
            winner_time_us=round(winner_ms * 1000, 3) if math.isfinite(winner_ms) else 0.0,
            aten_time_us=None if aten_time_ms is None else round(aten_time_ms * 1000, 3),
            candidates=[cache_candidate(c) for c in decision.candidates],
            # margin or not, a benchmark decided it (the dumps keep the detailed reason), unless the OS set a time
            reason=f"fallback: {flag}" if flag else "benchmark", device_name=decision.key.device_name)
        try:
            self.sources.put(entry)
        except ValueError as e:  # what the cache's reader would refuse is not stored; the compile goes on
            log.warning("ext: the decision for %s (%s) is not cached: %s", decision.node, decision.key.describe(), e)


def offered_families(config: ExtConfig, op_name: str, device: str) -> list[Family]:
    """The enabled families this compile offers for ``op_name`` on ``device`` (before asking
    each whether it serves the problem): what a graph pass checks before making an op that
    only pays off when a template may serve it."""
    if config.autotune == "off":
        return []
    return [m for m in map(registry.get, config.templates)
            if op_name in m.ops and refusals.here(config, m, device) is None]


def _measured(family: Family, problem: Any, target: str, node: str, config: Any) -> str | None:
    """The family's reason to leave ``config`` untimed (the measured stage), logged; None to time it."""
    refusal = refusals.measured(family, problem, config, target)
    if refusal is None:
        return None
    autotune_log.info("%s", refusal.line(node))
    return refusal.reason


def forced_templates(config: ExtConfig) -> tuple[str, ...]:
    """The families ``force_template`` names (one name or several)."""
    force = config.force_template
    return () if force is None else (force,) if isinstance(force, str) else tuple(force)


def graph_dims(gm: torch.fx.GraphModule, example_inputs: Any) -> frozenset[int]:
    """Every static size of every tensor in ``gm`` and its inputs: the scope of the cache entries
    its key holds (``cache_layers.graph_scope``)."""
    tensors = [node.meta.get("val") for node in gm.graph.nodes] + list(example_inputs)
    dims = set()
    for value in tensors:
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor):
                dims.update(d for d in t.shape if isinstance(d, int))
    return frozenset(dims)


def choices_factory(config: ExtConfig) -> Callable[[], ExtChoices]:
    return functools.partial(ExtChoices, config)


adapters.register_extern_choices()
