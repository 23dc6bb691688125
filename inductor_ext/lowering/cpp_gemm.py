"""Inductor's C++ GEMM templates as ext choices: the Inductor side of ``templates/cpp/gemm.py``.

Inductor 2.15's ``CppGemmTemplate`` (``CppBmmTemplate`` for bmm) picks its micro-kernel with a
fixed ranking (``cpp_micro_gemm.create_micro_gemm``). Each ``cpp.gemm`` config names one
micro-kernel (ISA and register block); the template subclass made for it here narrows
Inductor's micro-kernel table to that one entry whenever Inductor picks, both when the choice is
made and when the winner is rendered again at final codegen, so the kernel benchmarked is the
kernel compiled; where M is static its micro-kernel instantiates only the row tail M leaves
(``cpp_micro_tails``). A config's cache blocking, when it fixes one, replaces Inductor's heuristic
the same way, in the template's own blocking method. Weight packing (blocking, VNNI) is
Inductor's: at compile time for a constant (frozen) weight. The rendered C++ starts with ext's
marker lines, which dumps read.

Inductor picks micro-kernels in the compiling thread; the narrowing lasts one call.
"""

from __future__ import annotations

import contextlib
import functools
import json
from dataclasses import asdict
from typing import Any, Iterator

import torch
import torch._inductor.lowering  # noqa: F401  (first: cpp_micro_gemm imported alone is a circular import in 2.15)
from torch._inductor import config as inductor_config
from torch._inductor import ir
from torch._inductor.codegen import cpp_micro_gemm
from torch._inductor.codegen.cpp_bmm_template import CppBmmTemplate
from torch._inductor.codegen.cpp_gemm_template import CppGemmTemplate
from torch._inductor.codegen.cpp_utils import get_gemm_template_output_and_compute_dtype
from torch._inductor.cpu_vec_isa import VecAMX, VecAVX2, VecAVX512
from torch._inductor.utils import parallel_num_threads

from inductor_ext.lowering import cpp_micro_tails
from inductor_ext.lowering.prepared import Prepared
from inductor_ext.templates.family import Family

# A cpp.gemm config's ISA -> the vector ISA class of Inductor's micro-kernel configs.
_ISA_CLASSES = {"amx": VecAMX, "avx512": VecAVX512, "avx2": VecAVX2}
MARKER = "// inductor_ext template: "  # then the family; the next line holds its config as JSON


@contextlib.contextmanager
def pinned(config: Any) -> Iterator[None]:
    """Inductor's micro-kernel table narrowed to ``config``'s kernel (ISA class and register
    block exactly), restored on exit."""
    table = cpp_micro_gemm.micro_gemm_configs
    saved = dict(table)
    isa = _ISA_CLASSES[config.isa]
    block = (config.block_m, config.block_n, config.block_k)
    narrowed = {cls: [c for c in entries if c.vec_isa_cls is isa and tuple(c.register_blocking) == block]
                for cls, entries in saved.items()}
    table.clear()
    table.update({cls: entries for cls, entries in narrowed.items() if entries})
    try:
        yield
    finally:
        table.clear()
        table.update(saved)


def cache_blocking_setting(config: Any) -> str | None:
    """``config``'s cache blocking as Inductor's ``cpp.gemm_cache_blocking`` setting takes it
    (``"Mc,Nc,Kc"`` in register blocks), or None where it leaves the blocking to Inductor."""
    if not config.cache_blocked():
        return None
    return f"{config.cache_m // config.block_m},{config.cache_n // config.block_n},{config.cache_k // config.block_k}"


class _Pinned:
    """Mixed into Inductor's template: its micro-kernel is ``ext_config``'s whenever it picks, and
    so is its cache blocking where the config fixes one."""

    ext_family: str
    ext_config: Any

    def get_options(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        with pinned(self.ext_config):
            options = super().get_options(*args, **kwargs)  # type: ignore[misc]
        cpp_micro_tails.narrow(options["micro_gemm"], self.m)  # type: ignore[attr-defined]
        return options

    def _cache_blocking(self, num_threads: int) -> Any:
        """Inductor's cache blocking, or the config's (in register blocks, as Inductor's setting
        takes it; Inductor still caps each at the thread's share)."""
        blocks = cache_blocking_setting(self.ext_config)
        if blocks is None:
            return super()._cache_blocking(num_threads)  # type: ignore[misc]
        with inductor_config.patch({"cpp.gemm_cache_blocking": blocks}):
            return super()._cache_blocking(num_threads)  # type: ignore[misc]

    def render(self, *args: Any, **kwargs: Any) -> str:
        source = super().render(*args, **kwargs)  # type: ignore[misc]
        return f"{MARKER}{self.ext_family}\n// {json.dumps(asdict(self.ext_config), sort_keys=True)}\n{source}"


@functools.lru_cache(maxsize=None)
def template_class(base: type, family: str, config: Any) -> type:
    """Inductor's template ``base`` with its micro-kernel pinned to ``config`` (one class per
    config: Inductor's ``add_choices`` is a classmethod that instantiates ``cls``)."""
    return type(f"Ext{base.__name__}_{config.name()}", (_Pinned, base), {"ext_family": family, "ext_config": config})


def _storage(node: Any) -> Any:
    data = node.data if isinstance(node, ir.TensorBox) else node
    return data.unwrap_view() if isinstance(data, ir.BaseView) else data


def unusable(prepared: Prepared) -> str | None:
    """What Inductor's template needs of the operands (as ``use_cpp_gemm_template`` checks), or
    None: A with unit last stride (its layout is fixed here), B stored in a buffer of its own."""
    problem = prepared.problem
    mat1, mat2 = prepared.inputs[-2:]
    mat1.freeze_layout()
    if mat1.get_stride()[-1] != 1:
        return "A is not row-major"
    if not isinstance(_storage(mat2), ir.StorageBox):
        return "B is not stored in a buffer of its own"
    if problem.op == "bmm" and not mat1.get_layout().is_contiguous():
        each_batch = mat1.get_stride()[-2] == mat1.get_size()[-1]  # rows contiguous within a batch
        if problem.dtype != "float32" or not each_batch:
            return "bmm needs a contiguous A (fp32: contiguous within each batch)"
    return None


def _micro_kernel(problem: Any, config: Any | None) -> Any | None:
    """The micro-kernel Inductor creates for this problem on this machine: ``config``'s, or with
    no config the one its own ranking picks; None when there is none."""
    dtype = getattr(torch, problem.dtype)
    output_dtype, compute_dtype = get_gemm_template_output_and_compute_dtype(dtype)
    with pinned(config) if config is not None else contextlib.nullcontext():
        return cpp_micro_gemm.create_micro_gemm(
            "micro_gemm", problem.m, problem.n, problem.k, input_dtype=dtype, input2_dtype=dtype,
            output_dtype=output_dtype, compute_dtype=compute_dtype, alpha=problem.alpha,
            num_threads=parallel_num_threads(), use_ref=False)


def _micro_kernel_exists(problem: Any, config: Any) -> bool:
    """Whether Inductor has ``config``'s micro-kernel for this problem on this machine."""
    return _micro_kernel(problem, config) is not None


def default_config(family: Family, prepared: Prepared, target: str) -> Any | None:
    """The family's config for the micro-kernel Inductor's own ranking picks (what max-autotune
    renders), or None when that is none of the family's."""
    problem = prepared.problem
    picked = _micro_kernel(problem, None)
    if picked is None:
        return None
    for config in family.configs(problem, target):
        mine = _micro_kernel(problem, config)
        if type(mine) is type(picked) and tuple(mine.register_blocking) == tuple(picked.register_blocking):
            return config
    return None


def append(family: Family, choices: list[Any], prepared: Prepared, config: Any) -> Any | None:
    """Append Inductor's template choice with ``config``'s micro-kernel; None when Inductor has
    no such micro-kernel here."""
    problem = prepared.problem
    if not _micro_kernel_exists(problem, config):
        return None
    base = CppBmmTemplate if problem.op == "bmm" else CppGemmTemplate
    cls = template_class(base, family.name, config)
    kwargs = {"alpha": problem.alpha, "beta": problem.beta, "has_bias": True} if problem.op == "addmm" else {}
    before = len(choices)
    with pinned(config):
        cls.add_choices(choices, prepared.layout, list(prepared.inputs), **kwargs)
    if len(choices) == before:
        return None
    choices[-1].description = f"{family.name} {config.name()}"  # what dumps show as its config
    return choices[-1]
