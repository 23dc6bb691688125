"""Inductor's freezing from a backend, without stale weights.

Freezing (``torch._inductor.config.freezing``) bakes the values of parameters and buffers into a
graph compiled for inference, so GEMM templates can pack weights once at compile time. Inductor
freezes what Dynamo installed as graph attributes, and Dynamo does so only when the global
config says freezing at trace time; a backend's options arrive later, when Dynamo has lifted
parameters and buffers to graph inputs. :func:`compile_frozen` therefore installs them as
attributes of a copy of the graph itself (what Dynamo would have done) and compiles that.

Dynamo does not guard on those values: a model trained further (optimizer steps,
``load_state_dict``) and evaluated again under ``torch.no_grad()`` would silently compute with
the old weights. So each call of the frozen graph first checks that every frozen input still
has the version counter and storage it had at compile time (an in-place change bumps the
version; a replaced tensor has another storage). On a change it logs once and recompiles the
graph without freezing, which serves every later call. Inputs the graph itself mutates (a KV
cache updated inside the model) are not frozen by Inductor: they are found on the first call,
whose mutations change their versions, and no longer watched.

When the user's own Inductor config had freezing on while Dynamo traced, Dynamo installed the
parameters and buffers as graph attributes itself; Inductor freezes those just as silently, so
they are watched where they are, in the same way. A write through ``.data`` bumps no version
counter and keeps the storage: no check short of reading the weights sees it.

Inference tensors (made under ``torch.inference_mode()``, as Hugging Face pipelines and serving
stacks load weights) have no version counter, and an in-place write inside inference mode keeps
their storage, so neither signal exists for them. What could still see such a write costs too
much or misses some: a checksum of the data reads every weight on every call (a decode step
would stream its weights twice), a sampled one misses writes elsewhere, the data pointer misses
every in-place write. So they are not frozen: they stay inputs of the compiled graph, read on
every call as eager reads them (what Inductor does without freezing), and only the tensors that
have a version counter are frozen and watched. Where Dynamo installed them as attributes, the
graph is compiled without freezing (Inductor then reads its attributes on every call too).
"""

from __future__ import annotations

import copy
import logging
import operator
from typing import Any, Callable, Sequence

import torch
from torch._dynamo.utils import get_static_address_type

from inductor_ext.lowering.frozen_weights_key import frozen_weights
from inductor_ext.runtime import tensor_watch

log = logging.getLogger("inductor_ext")

# A compiled graph as compile_fx returns it for flat inputs: called with them as arguments.
Compiled = Callable[..., Any]
# (graph, example inputs, freeze?) -> the compiled graph
Compile = Callable[[torch.fx.GraphModule, Sequence[Any], bool], Compiled]


def static_inputs(example_inputs: Sequence[Any]) -> list[int]:
    """Positions of the inputs Dynamo lifted from the module (parameters, buffers): the ones
    freezing turns into constants."""
    return [i for i, x in enumerate(example_inputs)
            if isinstance(x, torch.Tensor) and get_static_address_type(x) is not None]


def is_inference(x: Any) -> bool:
    """Whether ``x`` is an inference tensor: no version counter, so a frozen copy could not be
    checked against it; such tensors are never frozen."""
    return isinstance(x, torch.Tensor) and x.is_inference()


def with_attributes(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                    lifted: Sequence[int]) -> torch.fx.GraphModule:
    """A copy of ``gm`` in which the inputs at ``lifted`` are attributes (get_attr nodes)."""
    graph = copy.deepcopy(gm.graph)
    frozen = torch.fx.GraphModule(gm, graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for i in lifted:
        name, tensor, node = f"_ext_frozen_{i}", example_inputs[i], placeholders[i]
        if isinstance(tensor, torch.nn.Parameter):
            frozen.register_parameter(name, tensor)
        else:
            frozen.register_buffer(name, tensor)
        with graph.inserting_before(node):
            attr = graph.get_attr(name)
        attr.meta.update(node.meta)
        node.replace_all_uses_with(attr)
        graph.erase_node(node)
    frozen.recompile()
    return frozen


def attribute_tensors(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    """The tensors ``gm``'s get_attr nodes read, each once: what freezing folds into constants."""
    found: dict[int, torch.Tensor] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = operator.attrgetter(node.target)(gm)
            if isinstance(value, torch.Tensor):
                found.setdefault(id(value), value)
    return list(found.values())


def _picker(indices: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """``args -> tuple(args[i] for i in indices)``, in C (itemgetter alone returns a bare item
    for one index)."""
    if not indices:
        return lambda args: ()
    get = operator.itemgetter(*indices)
    return get if len(indices) > 1 else (lambda args: (get(args),))


# Per-call checks run on every call of a frozen graph (a decode step), so they stay C-level loops.
_VERSION, _DATA_PTR = operator.attrgetter("_version"), operator.methodcaller("data_ptr")


class FrozenGraph:
    """Calls the frozen graph with the inputs it still takes, or, once a frozen tensor has
    changed, the graph recompiled without freezing with all of them.

    The frozen tensors are either inputs Dynamo lifted (``lifted``: their positions, dropped
    from each call's arguments) or ``attributes`` Dynamo installed on the graph itself (when
    Inductor's freezing was on while it traced: every argument is passed on)."""

    def __init__(self, compiled: Compiled, example_inputs: Sequence[Any], lifted: Sequence[int],
                 thaw: Callable[[], Compiled], attributes: Sequence[torch.Tensor] | None = None) -> None:
        self.compiled = compiled
        self.attributes = None if attributes is None else list(attributes)
        if self.attributes is None:
            self.kept = _picker([i for i in range(len(example_inputs)) if i not in set(lifted)])
            self._watch(lifted, example_inputs)
        else:
            self.kept = tuple  # the arguments as they come (a call's args are a tuple already)
            self._watch(range(len(self.attributes)), self.attributes)
        self.thaw = thaw
        self.thawed: Compiled | None = None
        self.first_call = True

    def _pool(self, args: Sequence[Any]) -> list[Any]:
        """Where the frozen tensors are this call, as the list the C++ storage check reads: its
        arguments, or the graph's attributes."""
        return list(args) if self.attributes is None else self.attributes

    def _watch(self, indices: Sequence[int], pool: Sequence[Any]) -> None:
        self.watched_indices = list(indices)
        self.watched = _picker(self.watched_indices)
        tensors = self.watched(pool)
        self.versions, self.data_ptrs = tuple(map(_VERSION, tensors)), tuple(map(_DATA_PTR, tensors))
        # the same check as one C++ loop, when it can be built here; `changed` stays the judge
        self._watch_fast(pool)
        # by position in the pool, as torch._C._tensors_data_ptrs_at_indices_equal reads them
        self.ptr_at: list[int | None] = [None] * len(pool)
        for i, ptr in zip(self.watched_indices, self.data_ptrs):
            self.ptr_at[i] = ptr

    def _watch_fast(self, pool: Sequence[Any]) -> None:
        # not waiting for the C++ check's first build on this machine (beside the compile): until
        # it is there, calls check in Python and try again (`awaiting`)
        self.fast = tensor_watch.watch(pool, self.watched_indices, wait=False)
        self.awaiting = self.fast is None and tensor_watch.building()

    def changed(self, args: Sequence[Any]) -> int | None:
        """The first watched tensor (its position in the arguments or the attributes) whose
        version or storage differs from the compile's, or None."""
        pool = self._pool(args)
        tensors = self.watched(pool)
        try:
            versions = tuple(map(_VERSION, tensors))
        except RuntimeError:  # an inference tensor (no version) where a watched one was: not the frozen one
            return next(i for i, t in zip(self.watched_indices, tensors) if is_inference(t))
        # storages compared in C++ (cudagraph trees' check): half the time of a Python map
        if versions == self.versions and torch._C._tensors_data_ptrs_at_indices_equal(
                pool, self.ptr_at, self.watched_indices):
            return None
        now = zip(versions, map(_DATA_PTR, tensors))
        return next(i for i, was, is_ in zip(self.watched_indices, zip(self.versions, self.data_ptrs), now)
                    if was != is_)

    def __call__(self, *args: Any) -> Any:
        if self.thawed is not None:
            return self.thawed(*args)
        fast, pool = self.fast, args if self.attributes is None else self.attributes  # C++ reads a tuple too
        if fast is None or not fast.unchanged(pool):
            index = self.changed(args)
            if index is not None:
                return self._thaw(args, index)
            if fast is not None or self.awaiting:
                # unchanged, but held by other tensor objects than when watched: watch those
                self._watch_fast(pool)
        out = self.compiled(*self.kept(args))
        if self.first_call:
            # Tensors this graph mutates are real inputs, not constants: stop watching them.
            self.first_call = False
            pool = self._pool(args)
            tensors = self.watched(pool)
            self._watch([i for i, t, v in zip(self.watched_indices, tensors, self.versions) if t._version == v], pool)
        return out

    def _thaw(self, args: tuple[Any, ...], index: int) -> Any:
        log.warning("ext: %s %d of a graph compiled with freezing changed after compiling (an optimizer step "
                    "or load_state_dict?); recompiling it without freezing. Pass options={'freezing': False} "
                    "to skip the frozen compile when weights keep changing.",
                    "input" if self.attributes is None else "frozen attribute", index)
        self.thawed = self.thaw()
        return self.thawed(*args)


def has_collectives(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` communicates (e.g. SimpleFSDP's gathers of parameter shards): such a graph's
    parameters are not values to fold at compile time."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            if str(node.target).split(".", 1)[0] in _COLLECTIVE_NAMESPACES:  # e.g. "_c10d_functional.all_gather..."
                return True
        elif getattr(node.target, "__module__", "").startswith("torch.distributed"):
            return True
    return False


_COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional", "_dtensor")


def compile_frozen(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], compile: Compile) -> Compiled:
    """``gm`` compiled with its parameters and buffers frozen, guarded against their change; a
    graph with collectives is compiled without freezing."""
    if has_collectives(gm):
        return compile(gm, example_inputs, False)
    if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
        # nested inputs, which compile_fx calls differently: Inductor's freezing as it comes (what
        # it freezes is not told apart here, so every tensor input's values go into the key)
        with frozen_weights(_tensors_in(example_inputs) + attribute_tensors(gm)):
            return compile(gm, example_inputs, True)
    static = static_inputs(example_inputs)
    tensor_watch.build_ahead()  # beside the compile, where the weight check is not built yet
    if not static:
        # Dynamo installed parameters and buffers as attributes (the user's Inductor config had
        # freezing on while it traced): Inductor freezes those; watch them where they are.
        attributes = attribute_tensors(gm)
        if any(map(is_inference, attributes)):
            _say_not_frozen(sum(map(is_inference, attributes)), "the graph is compiled without freezing, its other weights too")
            return compile(gm, example_inputs, False)
        with frozen_weights(attributes):
            compiled = compile(gm, example_inputs, True)
        if not attributes:
            return compiled
        return FrozenGraph(compiled, example_inputs, (), lambda: compile(gm, example_inputs, False), attributes)
    lifted = [i for i in static if not is_inference(example_inputs[i])]
    if len(lifted) < len(static):
        _say_not_frozen(len(static) - len(lifted), "they stay inputs of the compiled graph, read on every call")
        if not lifted:
            return compile(gm, example_inputs, False)
    frozen_gm = with_attributes(gm, example_inputs, lifted)
    kept = [x for i, x in enumerate(example_inputs) if i not in set(lifted)]
    with frozen_weights(attribute_tensors(frozen_gm)):
        compiled = compile(frozen_gm, kept, True)
    return FrozenGraph(compiled, example_inputs, lifted, lambda: compile(gm, example_inputs, False))


def _tensors_in(inputs: Sequence[Any]) -> list[torch.Tensor]:
    """The tensors in ``inputs``, nested lists, tuples and dicts included, in order."""
    leaves, _ = torch.utils._pytree.tree_flatten(list(inputs))
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def _say_not_frozen(count: int, instead: str) -> None:
    log.info("ext: %d parameters/buffers of this inference graph are inference tensors (made under "
             "torch.inference_mode()), which have no version counter to tell an in-place change: not frozen, "
             "%s. Load the weights outside inference mode (torch.no_grad() is enough) to let ext freeze and pack them.",
             count, instead)
