"""Inductor's own gfx1250 Tensor Data Mover codegen, generated and checked on a machine without
the GPU (tiers I and C for what the ``gfx1250`` preset switches on: ``targets.amd.INDUCTOR_TDM``).

torch 2.15's Inductor writes tensor descriptors into pointwise/reduction kernels and FlexAttention
forward/decode only after probing a live ROCm >= 7.14 gfx1250 device. Here that probe and the
device queries around it are answered by :func:`gfx1250_device` (a test/asm context only: nothing
in ext's compile path enters it), so Inductor's real codegen runs for fake ``cuda`` tensors:

    graph = generate(fn, *cpu_inputs, tdm=True)     # Inductor's wrapper + kernels, as on an MI450
    ks = kernel_source(graph.kernels[name])         # one kernel as a standalone module -> runtime
    outs = run(graph, *cpu_inputs)                  # the wrapper on CPU tensors, kernels interpreted

``kernel_source`` keeps Inductor's kernel body byte for byte and drops only its autotuning
decorator (``@triton_heuristics.*``): the same text compiles for gfx1250 (``runtime.triton_compile``)
and runs in Triton's interpreter. Launch sizes (XBLOCK, R0_BLOCK, num_warps) are the ones
:func:`launch_config` picks, within what Inductor's descriptors require (``tma_min_block_sizes``).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import math
import re
import types
from typing import Any, Callable, Iterator, Sequence
from unittest import mock

import torch

from inductor_ext.runtime.kernel_source import KernelSource
from inductor_ext.targets import amd

__all__ = ["GFX1250_PROPERTIES", "KINDS", "TDM_OFF", "Example", "GeneratedGraph", "InductorKernel", "example",
           "generate", "gfx1250_device", "kernel_source", "launch_config", "main_kernel", "run"]

# What torch.cuda.get_device_properties reports on an MI450 (the fields Inductor's codegen reads).
GFX1250_PROPERTIES = types.SimpleNamespace(
    name="AMD Instinct MI450 (codegen only)", gcnArchName="gfx1250", major=12, minor=5, multi_processor_count=256,
    max_threads_per_multi_processor=2048, regs_per_multiprocessor=65536, max_threads_per_block=1024, warp_size=32,
    total_memory=432 * 2**30, shared_memory_per_block_optin=320 * 1024, shared_memory_per_multiprocessor=320 * 1024,
    shared_memory_per_block=64 * 1024, L2_cache_size=4 * 2**20,
)
_LDS_BYTES = 320 * 1024
# The same compile with Inductor's descriptor paths off: what gfx1250 gets without the preset's patches.
TDM_OFF: dict[str, Any] = {"triton.use_tensor_descriptor": False, "triton.enable_flex_tdm": False}


@contextlib.contextmanager
def gfx1250_device(**properties: Any) -> Iterator[None]:
    """Answer Inductor's device probes as a ROCm 7.14 gfx1250 (MI450) would, for codegen only;
    ``properties`` override fields of :data:`GFX1250_PROPERTIES` (e.g. fewer CUs, so that flex
    decoding splits the keys into fewer programs for the interpreter).

    Patched: ``torch.version.hip``/``rocm``, the ``torch.cuda`` and Dynamo device-interface queries,
    Triton's backend options and hash (which would load libamdhip64), and the caches Inductor keeps
    of them (cleared on entry and exit, so nothing outside sees a gfx1250)."""
    from torch._dynamo.device_interface import CudaInterface
    from torch._inductor import utils as inductor_utils
    from torch._inductor.runtime import triton_helpers
    from triton.backends.compiler import GPUTarget

    import torch.utils._triton as torch_triton

    caches = [inductor_utils._rocm_version_tuple, inductor_utils.rocm_gfx_arch,
              inductor_utils._rocm_native_device_arch_name, inductor_utils.get_backend_num_stages]
    # torch.utils._triton memoizes its device answers (has_triton, the TMA/TDM checks): a test that
    # asked before on this CPU-only machine would leave "no GPU Triton" cached for the whole process.
    caches += [f for f in vars(torch_triton).values() if callable(f) and hasattr(f, "cache_clear")]
    target = GPUTarget(*amd.GFX1250.triton)

    unknown = sorted(set(properties) - set(vars(GFX1250_PROPERTIES)))
    if unknown:
        raise ValueError(f"unknown device properties {unknown}; known: {sorted(vars(GFX1250_PROPERTIES))}")
    answer = types.SimpleNamespace(**{**vars(GFX1250_PROPERTIES), **properties})

    def props(*_: Any, **__: Any) -> types.SimpleNamespace:
        return answer

    def clear() -> None:
        for cache in caches:
            cache.cache_clear()

    clear()
    with contextlib.ExitStack() as stack:
        stack.callback(clear)
        patch = stack.enter_context
        patch(mock.patch.object(torch.version, "hip", "7.14.0"))
        patch(mock.patch.object(torch.version, "rocm", "7.14.0", create=True))
        patch(mock.patch.object(torch.cuda, "is_available", lambda: True))
        patch(mock.patch.object(torch.cuda, "device_count", lambda: 1))
        patch(mock.patch.object(torch.cuda, "current_device", lambda: 0))
        patch(mock.patch.object(torch.cuda, "get_device_properties", props))
        patch(mock.patch.object(torch.cuda, "get_device_capability", lambda *a, **k: (12, 5)))
        patch(mock.patch.object(CudaInterface, "get_device_properties", staticmethod(props)))
        patch(mock.patch.object(CudaInterface, "current_device", staticmethod(lambda: 0)))
        patch(mock.patch.object(CudaInterface, "device_count", staticmethod(lambda: 1)))
        patch(mock.patch.object(torch_triton, "triton_hash_with_backend", lambda: "gfx1250-codegen-only"))
        patch(mock.patch.object(triton_helpers, "get_backend_options",
                                lambda: triton_helpers.get_backend_options_for_target(target)))
        patch(mock.patch.object(inductor_utils, "get_gpu_shared_memory", lambda: _LDS_BYTES))
        yield


def uses_tdm(code: str) -> bool:
    """Whether Triton code Inductor wrote loads or stores through tensor descriptors (TDM on gfx1250)."""
    return "tl.make_tensor_descriptor" in code or "USE_TMA : tl.constexpr = True" in code


@dataclasses.dataclass(frozen=True)
class InductorKernel:
    """One Triton kernel of Inductor's wrapper, split into its body and its autotuning decorator."""

    name: str
    heuristic: str  # pointwise, reduction, persistent_reduction, template, ...
    module: str  # the module text Inductor wrote (decorator included)
    body: str  # the same without the @triton_heuristics decorator and the driver switch
    decorator: dict[str, Any]  # the decorator's keyword arguments, evaluated

    @property
    def signature(self) -> dict[str, str]:
        return dict(self.decorator["triton_meta"]["signature"])

    @property
    def inductor_meta(self) -> dict[str, Any]:
        return dict(self.decorator.get("inductor_meta", {}))

    @property
    def uses_tdm(self) -> bool:
        return uses_tdm(self.body)


@dataclasses.dataclass(frozen=True)
class GeneratedGraph:
    wrapper: str  # Inductor's Python wrapper module
    kernels: dict[str, InductorKernel]


_KERNEL = re.compile(r"^(\w+) = async_compile\.triton\('(\w+)', '''\n(.*?)''', device_str='cuda'\)$", re.S | re.M)


def generate(fn: Callable[..., Any], *inputs: torch.Tensor, tdm: bool = True,
             patches: dict[str, Any] | None = None, properties: dict[str, Any] | None = None) -> GeneratedGraph:
    """Inductor's wrapper and Triton kernels for ``fn`` on an MI450, from fake ``cuda`` tensors shaped
    like ``inputs``: with the gfx1250 preset's Inductor patches (``tdm=True``) or with its descriptor
    paths off (plus ``patches``). Traced with Inductor's decompositions; lowered and generated under
    :func:`gfx1250_device` (with ``properties``)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.async_compile import AsyncCompile
    from torch._inductor.debug import DebugContext
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    import torch.nn.attention.flex_attention as flex

    mode = FakeTensorMode()
    # flex_attention outside torch.compile wraps its op in a compile of its own; make_fx traces the op itself
    with mode, mock.patch.object(flex, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True):
        fake = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda") for t in inputs]
        gm = make_fx(fn, decomposition_table=select_decomp_table())(*fake)
    # as a compile's graph reaches Inductor: unused outputs gone (flex decoding lowers to 2 of the op's 3)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    config = {**amd.INDUCTOR_TDM, **({} if tdm else TDM_OFF), **(patches or {})}
    # a warm compile pool would load each kernel here, which needs the (absent) HIP driver
    no_pool = mock.patch.object(AsyncCompile, "use_process_pool", classmethod(lambda cls: False))
    with gfx1250_device(**(properties or {})), no_pool, inductor_config.patch(config), V.set_fake_mode(mode), \
            V.set_debug_handler(DebugContext()):
        graph = GraphLowering(gm, example_inputs=fake)
        with V.set_graph_handler(graph):
            graph.run(*fake)
            code = graph.codegen()
    wrapper = code[0].value if isinstance(code, tuple) else getattr(code, "value", code)
    kernels = {}
    for var, name, text in _KERNEL.findall(wrapper):
        if var != name:
            raise ValueError(f"Inductor bound kernel {name} to {var}; expected the same name")
        kernels[name] = _split(name, text)
    if not kernels:
        raise ValueError("Inductor generated no Triton kernel for this function (all ATen?)")
    return GeneratedGraph(wrapper, kernels)


def _split(name: str, module: str) -> InductorKernel:
    tree = ast.parse(module)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    heuristic = next(d for d in fn.decorator_list
                     if isinstance(d, ast.Call) and ast.unparse(d.func).startswith("triton_heuristics."))
    from torch._inductor.runtime.hints import AutotuneHint, DeviceProperties, ReductionHint, TileHint

    scope = {"DeviceProperties": DeviceProperties, "ReductionHint": ReductionHint, "TileHint": TileHint,
             "AutotuneHint": AutotuneHint, "__file__": name, "inf": math.inf, "nan": math.nan}
    decorator = {kw.arg: eval(compile(ast.Expression(kw.value), name, "eval"), scope)  # noqa: S307 - Inductor's text
                 for kw in heuristic.keywords if kw.arg}
    lines = module.splitlines(keepends=True)
    drop = set(range(heuristic.lineno - 1, heuristic.end_lineno))
    body = "".join(line for i, line in enumerate(lines)
                   if i not in drop and line.strip() != "triton_helpers.set_driver_to_gpu()")
    return InductorKernel(name, ast.unparse(heuristic.func).split(".", 1)[1], module, body, decorator)


def launch_config(kernel: InductorKernel, numels: dict[str, int] | None = None) -> dict[str, Any]:
    """The constexprs and launch options this module compiles and runs ``kernel`` with: XBLOCK (and
    R0_BLOCK for a looped reduction) at least what Inductor's descriptors need, as Inductor's own
    configs would pick them for small problems; templates carry their config in the decorator."""
    meta, hints = kernel.inductor_meta, kernel.decorator.get("size_hints", {})
    if kernel.heuristic == "template":
        return {"constexprs": {}, "options": {"num_warps": kernel.decorator.get("num_warps", 4),
                                              "num_stages": kernel.decorator.get("num_stages", 1)}}
    need = meta.get("tma_min_block_sizes", {})
    params = [n for n, t in kernel.signature.items() if t == "constexpr"]
    # a specialised argument (xnumel == 1) is a constexpr parameter with its value in triton_meta
    consts = {n: v for n, v in kernel.decorator["triton_meta"].get("constants", {}).items() if n in params}
    if "XBLOCK" in params:
        cap = 1024 if kernel.heuristic == "pointwise" else 8
        consts["XBLOCK"] = max(need.get("XBLOCK", 1), min(cap, _pow2((numels or hints).get("x", 1))))
    if "R0_BLOCK" in params:
        consts["R0_BLOCK"] = max(need.get("R0_BLOCK", 1), min(256, _pow2((numels or hints).get("r0_", 1))))
    unknown = [p for p in params if p not in consts]
    if unknown:
        raise ValueError(f"{kernel.name} has constexpr parameters {unknown} this helper does not size")
    return {"constexprs": consts, "options": {"num_warps": 4, "num_stages": 2 if "R0_BLOCK" in consts else 1}}


# The launch sizes Inductor's autotuner picks (never passed by the wrapper): chosen by launch_config.
_SIZED = ("XBLOCK", "YBLOCK", "ZBLOCK", "R0_BLOCK", "R1_BLOCK")


def _pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def kernel_source(kernel: InductorKernel, numels: dict[str, int] | None = None) -> KernelSource:
    """``kernel`` as a standalone Triton module for ``runtime`` (compile for gfx1250, or interpret)."""
    config = launch_config(kernel, numels)
    signature = {n: t for n, t in kernel.signature.items()}
    return KernelSource(name=kernel.name, source=kernel.body, template=f"inductor.{kernel.heuristic}",
                        config=dict(config["constexprs"]), constexprs=dict(config["constexprs"]),
                        signature=signature, launch=dict(config["options"]))


class _InterpretedLauncher:
    """What ``async_compile.triton(...)`` returns in :func:`run`: ``.run(*args, stream=...)`` launches
    the kernel in Triton's interpreter with :func:`launch_config`'s sizes and Inductor's grid."""

    def __init__(self, kernel: InductorKernel) -> None:
        self.kernel = kernel

    def run(self, *args: Any, stream: Any = None) -> None:
        from inductor_ext.runtime.triton_loader import load_kernel

        kernel, meta = self.kernel, self.kernel.inductor_meta
        grid_type = meta.get("grid_type")
        params = [n for n in kernel.signature if n not in _SIZED]  # what the wrapper passes
        if grid_type == "FixedGrid":
            extra = len(meta.get("extra_launcher_args", ()))
            args, grid = args[:len(args) - extra], tuple(args[len(args) - extra:])
            config = launch_config(kernel)
        elif grid_type == "Grid1D":
            values, hints = dict(zip(params, args)), kernel.decorator.get("size_hints", {})
            # a numel Inductor specialised (e.g. xnumel == 1) is no parameter: its size hint is exact then
            numels = {tree: values.get(f"{tree}numel", hints.get(tree, 1)) for tree in ("x", "r0_") if tree in hints}
            config = launch_config(kernel, numels)
            grid = (math.ceil(numels["x"] / config["constexprs"]["XBLOCK"]),)
        else:
            raise NotImplementedError(f"{kernel.name}: grid type {grid_type!r} is not launched by this helper")
        if len(args) != len(params):
            raise ValueError(f"{kernel.name} takes {params}; the wrapper passed {len(args)} arguments")
        sizes = {n: v for n, v in config["constexprs"].items() if n in _SIZED}
        load_kernel(kernel_source(kernel))[grid](*args, **sizes)


class _InterpretedCompile:
    """Stands in for Inductor's ``AsyncCompile`` while :func:`run` loads a wrapper."""

    def __init__(self, kernels: dict[str, InductorKernel]) -> None:
        self.kernels = kernels

    def triton(self, name: str, source: str, device_str: str = "cuda", **_: Any) -> _InterpretedLauncher:
        return _InterpretedLauncher(self.kernels[name])

    def wait(self, scope: dict[str, Any]) -> None:
        pass


def run(graph: GeneratedGraph, *inputs: torch.Tensor) -> Sequence[torch.Tensor]:
    """Run Inductor's wrapper for ``graph`` on CPU tensors: its allocations on the CPU, every kernel
    (the TDM variant included) in Triton's interpreter. Needs ``TRITON_INTERPRET=1`` from the start."""
    from torch._inductor import async_compile
    from torch._inductor.codecache import PyCodeCache

    from inductor_ext.runtime.triton_compile import triton_interpreter_active

    if not triton_interpreter_active():
        raise RuntimeError("running Inductor's gfx1250 kernels on CPU tensors needs Triton's interpreter: "
                           "start Python with TRITON_INTERPRET=1")
    code = graph.wrapper.replace("device='cuda:0'", "device='cpu'")
    with mock.patch.object(async_compile, "AsyncCompile", lambda: _InterpretedCompile(graph.kernels)):
        module = PyCodeCache.load(code)
    module.empty_strided_cuda = module.empty_strided_cpu
    module.get_raw_stream = lambda index: None
    with mock.patch.object(torch.cuda, "_DeviceGuard", lambda index: contextlib.nullcontext()), \
            mock.patch.object(torch.cuda, "set_device", lambda index: None):
        return module.call(list(inputs))


# ------------------------------------------------------------------ the kernel kinds shown and tested

@dataclasses.dataclass(frozen=True)
class Example:
    """One kind of Inductor kernel the gfx1250 preset sends through TDM: a function, inputs, its
    plain-torch reference (``inductor_ext.kernels``), and the gfx1250 instructions the TDM kernel
    must have (keys of ``targets.amd.INSTRUCTIONS``)."""

    kind: str
    fn: Callable[..., Any]
    inputs: tuple[torch.Tensor, ...]
    reference: Callable[..., torch.Tensor]
    facts: tuple[str, ...]
    properties: dict[str, Any] = dataclasses.field(default_factory=dict)

    def key_instructions(self) -> list[str]:
        return [amd.INSTRUCTIONS["gfx1250"][f] for f in self.facts]


def _bias(score: torch.Tensor, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> torch.Tensor:
    return score + (q_idx - kv_idx) * 0.01  # an ALiBi-style relative bias


def _causal(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    return q_idx >= kv_idx


def _flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[Callable[..., Any], tuple[torch.Tensor, ...]]:
    """flex_attention with :func:`_bias` and a causal block mask, as a function of tensors only (the
    block mask's tensors are inputs, as in a compiled graph)."""
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

    mask = create_block_mask(_causal, q.shape[0], 1, q.shape[2], k.shape[2], device="cpu")
    names = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices", "q_num_blocks", "q_indices",
             "full_q_num_blocks", "full_q_indices")

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *blocks: torch.Tensor) -> torch.Tensor:
        block_mask = BlockMask(mask.seq_lengths, *blocks, BLOCK_SIZE=mask.BLOCK_SIZE, mask_mod=_causal)
        return flex_attention(q, k, v, score_mod=_bias, block_mask=block_mask, enable_gqa=q.shape[1] != k.shape[1])

    return attend, (q, k, v, *(getattr(mask, n) for n in names))


def example(kind: str, dtype: torch.dtype = torch.bfloat16, seed: int = 0, **sizes: int) -> Example:
    """The example of ``kind`` (:data:`KINDS`) at ``sizes`` (each kind's defaults otherwise)."""
    from inductor_ext.kernels.attention import attention_reference
    from inductor_ext.kernels.norms import rms_norm_reference
    from inductor_ext.kernels.softmax import softmax_reference

    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype)

    if kind == "pointwise":  # y = x * 2 + b: two loads and a store
        m, n = sizes.get("m", 37), sizes.get("n", 200)
        return Example(kind, lambda x, b: x * 2 + b, (randn(m, n), randn(m, n)),
                       lambda x, b: (x.float() * 2 + b.float()).to(x.dtype), ("tdm_load", "tdm_store", "tdm_wait"))
    if kind == "rms_norm":  # a persistent row reduction (whole row in one block)
        m, n = sizes.get("m", 37), sizes.get("n", 200)
        return Example(kind, lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6),
                       (randn(m, n), randn(n)), lambda x, w: rms_norm_reference(x, w, 1e-6),
                       ("tdm_load", "tdm_store", "tdm_wait"))
    if kind == "softmax":  # a looped row reduction (rows longer than one block)
        m, n = sizes.get("m", 5), sizes.get("n", 3000)
        return Example(kind, lambda x: torch.softmax(x.float(), -1).to(x.dtype), (randn(m, n),),
                       lambda x: softmax_reference(x), ("tdm_load", "tdm_store", "tdm_wait"))
    if kind in ("flex_forward", "flex_decode"):
        decode = kind == "flex_decode"
        b, hq, hkv = sizes.get("b", 1 if not decode else 2), sizes.get("hq", 2 if not decode else 4), sizes.get("hkv", 2)
        lq, lkv, d = sizes.get("lq", 4 if decode else 256), sizes.get("lkv", 256), sizes.get("d", 64)
        fn, inputs = _flex(randn(b, hq, lq, d), randn(b, hkv, lkv, d), randn(b, hkv, lkv, d))
        wmma = {torch.bfloat16: "wmma_bf16", torch.float16: "wmma_f16"}[dtype]
        return Example(kind, fn, inputs,
                       lambda q, k, v, *_: attention_reference(q, k, v, _bias, _causal), ("tdm_load", "tdm_wait", wmma))
    raise ValueError(f"unknown kernel kind {kind!r}; kinds: {', '.join(KINDS)}")


KINDS = ("pointwise", "rms_norm", "softmax", "flex_forward", "flex_decode")


def main_kernel(graph: GeneratedGraph, kind: str) -> InductorKernel:
    """The kernel of ``graph`` that ``kind`` is about: flex's template, else the only kernel."""
    kernels = list(graph.kernels.values())
    if kind.startswith("flex"):
        return next(k for k in kernels if k.heuristic == "template")
    if len(kernels) != 1:
        raise ValueError(f"{kind}: Inductor generated {len(kernels)} kernels ({', '.join(graph.kernels)}), expected one")
    return kernels[0]
