"""Source-hash cache keys: the hash of the code that generates kernels and makes decisions, the
``template_hash`` of every autotune cache key (``ProblemKey``) and part of the choices handler's
uuid, so an edit to that code misses the cache instead of serving decisions made by other code.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import sys
from types import ModuleType
from typing import Callable

from inductor_ext.config import ExtConfig
from inductor_ext.kernels import decode_attention as decode_attention_kernel
from inductor_ext.kernels import mkl_packed_ops, mkldnn_packed_ops, packed_weights
from inductor_ext.lowering import cpp_gemm, cutedsl_nvfp4, ops, subgraph
from inductor_ext.runtime import cpu_library
from inductor_ext.templates import registry
from inductor_ext.templates.base import module_source_hash

# The lowering seam, whose text shapes the generated code of every family or how its choices are
# timed, is part of the cache key (``templates_hash``): the choices handler (``ext_choices``, with
# the decision record and this module) and every lowering, kernels and runtime module it reaches
# through module-level imports (``seam_modules``), so a module the seam starts to use is hashed
# without a list to edit. The op modules (lowering/ops/) enter as their folder, the families with
# the template modules they import. Imported here for the seam, as ext_choices imported them before
# these keys had a module of their own: the packed GEMMs ATen's side times, the C++ and CuTeDSL GEMM
# lowerings and the subgraph kernels (importing the packed GEMMs and the CuTeDSL lowering also
# defines ops that ext_choices' extern choices name), and two modules imported only to be hashed:
# the kernels Inductor compiles from plain torch for the cpp decode-attention family (its
# decomposition imports them lazily) and the CPU kernels' shared library helpers.
_SEAM_IMPORTS = (mkl_packed_ops, mkldnn_packed_ops, packed_weights, cpp_gemm, cutedsl_nvfp4, subgraph)
_HASHED_ONLY = (decode_attention_kernel, cpu_library)
_SEAM_PACKAGES = ("inductor_ext.lowering", "inductor_ext.kernels", "inductor_ext.runtime")
_HANDLER = "inductor_ext.lowering.ext_choices"  # by name: it imports this module


@functools.cache
def seam_modules() -> tuple[ModuleType, ...]:
    """The choices handler and the lowering, kernels and runtime modules it imports, transitively
    (by the module-level names each holds: modules, or objects whose ``__module__`` is one), less
    the op modules (hashed as their folder). Sorted by name, after the handler."""
    handler = importlib.import_module(_HANDLER)
    found: dict[str, ModuleType] = {}
    todo = [handler]
    while todo:
        for value in vars(todo.pop()).values():
            name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
            if (isinstance(name, str) and name.startswith(_SEAM_PACKAGES) and name != _HANDLER
                    and not name.startswith("inductor_ext.lowering.ops") and name not in found and name in sys.modules):
                found[name] = sys.modules[name]
                todo.append(found[name])
    return (handler, *(found[name] for name in sorted(found)))


def templates_hash(config: ExtConfig) -> str:
    """Source hash of the choices handler and the lowering seam that shapes generated code
    (``seam_modules``), every op module (``lowering/ops/``, the folder's sources), and every enabled family with every
    ``inductor_ext.templates`` module it imports (``_template_modules``), as this process first
    read them (``_loaded``)."""
    modules = list(seam_modules())
    for family in config.templates:
        modules += _template_modules(registry.get(family).module)
    parts = [_loaded(ops.sources_hash, "lowering/ops"), *(_loaded(module_source_hash, m) for m in modules)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


# Source hashes as first read in this process, by hashing function and module: the key names the
# code this process runs. Both functions read the files on disk, so a checkout edited while a
# process compiled (another worker's edit, a branch switched) moved the keys of that process's
# later decisions: it timed a problem it had just decided again, under a hash of code it does not
# run. (A later process that loads the edited code misses rightly.) By function too, so a test
# that swaps the hashing function, as an edit would change the hash, sees its function used.
_source_hashes: dict[tuple[Callable[..., str], ModuleType | str], str] = {}


def _loaded(hasher: Callable[..., str], what: ModuleType | str) -> str:
    key = (hasher, what)  # a module by identity: two test modules may share a name
    if key not in _source_hashes:
        _source_hashes[key] = hasher() if isinstance(what, str) else hasher(what)
    return _source_hashes[key]


def _is_template_module(name: object) -> bool:
    return isinstance(name, str) and (name == "inductor_ext.templates" or name.startswith("inductor_ext.templates."))


def _template_modules(module: ModuleType) -> list[ModuleType]:
    """``module``, then the ``inductor_ext.templates`` modules it imports, transitively and by
    name: those its globals are, or whose objects (``__module__``) it holds. Their text renders
    into its kernels (e.g. ``nvfp4_common``'s shared body and epilogue), so it is part of the key."""
    found: dict[str, ModuleType] = {}
    todo = [module]
    while todo:
        for value in vars(todo.pop()).values():
            name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
            if _is_template_module(name) and name != module.__name__ and name not in found and name in sys.modules:
                found[name] = sys.modules[name]
                todo.append(found[name])
    return [module] + [found[name] for name in sorted(found)]
