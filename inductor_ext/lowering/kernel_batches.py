"""A graph's C++ kernels built a few to a compiler run, not one each.

Inductor builds each CPU kernel of a graph as its own library, one g++ run each, and every run
pays ~0.6 s before the kernel's own code: the template instantiations ``cpp_prefix.h``'s vector
headers leave pending, which GCC redoes at the end of every translation unit even with Inductor's
precompiled header (an empty kernel takes 0.65 s on the AVX2 host, a GEMM kernel ~1.0 s). A
llama row's 15 kernels spent ~10 of their ~15 CPU-seconds there. Inside ext's compiles, the
kernels a graph's module defines are gathered in order, ``BATCH_SIZE`` to a batch, and each batch
is one translation unit: each kernel in its own namespace (its ``extern "C" kernel`` made a plain
function there, its includes hoisted above all of them), then Python bindings ``kernel_0`` ..
``kernel_{n-1}`` in one module. Inductor's ``CppPythonBindingsCodeCache.load_async`` builds and
caches it (its keys, compiler flags, precompiled header, locks and on-disk cache), so a later
process that loads the same graph module gathers the same batches and finds them built.

A kernel is left to Inductor's own build where its source could change meaning in a shared unit:
a macro (``#define``/``#undef``), a pragma other than OpenMP's or a loop's, its own ``namespace``
or explicit specialization, or anything but exactly one ``extern "C"`` entry named ``kernel``. A
batch that fails to build never fails the compile: each of its kernels is then built alone, as
Inductor would have, with one log line.
``early_kernel_builds`` starts a batch's build while the graph is still being generated, as soon
as its kernels are; where Inductor compiles inline (``compile_threads`` 1) nothing is batched.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from torch._inductor.async_compile import AsyncCompile, get_compile_threads, kernel_code_log
from torch._inductor.codecache import CppPythonBindingsCodeCache, LambdaFuture

log = logging.getLogger("inductor_ext")

# Kernels per translation unit: each unit saves the ~0.6 s fixed cost of a compiler run for each
# kernel past the first (the llama row's 15 kernels: 14.8 s of g++ one each, 5.5 s four to a unit,
# 4.1 s eight to a unit), while a graph of more than 8 kernels still keeps both of the pool's two
# workers busy and the first unit starts building during codegen (note 59).
BATCH_SIZE = 8

_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b.*$", re.M)
# What would reach past a kernel's own namespace: macros, pragmas other than a loop's or OpenMP's
# (``GCC optimize``/``target``/``push_options`` hold to the end of the unit), its own namespaces
# and explicit specializations (they belong to an enclosing namespace).
_UNSHAREABLE = re.compile(
    r"^[ \t]*#[ \t]*(define|undef)\b|^[ \t]*#[ \t]*pragma[ \t]+(?!omp\b|GCC[ \t]+(ivdep|unroll)\b)"
    r"|\bnamespace\b|\btemplate\s*<\s*>", re.M)
_C_LINKAGE = re.compile(r'\bextern\s+"C"')
_ENTRY = re.compile(r'extern\s+"C"\s+void\s+kernel\s*\(')
_ARG_TYPE = re.compile(r"(const )?[A-Za-z_][A-Za-z0-9_:]*( ?\*)?")


@dataclass(frozen=True)
class Member:
    """One kernel as a batch holds it: the arguments the module passes to ``cpp_pybinding``, its
    includes, and its body with the entry made a plain (namespaced) ``kernel``."""

    argtypes: tuple[str, ...]
    source: str
    includes: tuple[str, ...]
    body: str


def shareable(source: str) -> bool:
    """Whether ``source`` can share a translation unit, in a namespace of its own, with others:
    nothing in it reaches past that namespace, and it has exactly one C entry."""
    return not _UNSHAREABLE.search(source) and len(_C_LINKAGE.findall(source)) == 1


def includes_apart(source: str) -> tuple[tuple[str, ...], str]:
    """``source``'s ``#include`` lines (to hoist above every namespace) and the rest of it."""
    return tuple(line.strip() for line in _INCLUDE.findall(source)), _INCLUDE.sub("", source)


def member(argtypes: list[str] | tuple[str, ...], source: str) -> Member | None:
    """``source`` as a batch member, or None where it must be built alone (see the module doc)."""
    if not all(_ARG_TYPE.fullmatch(t) for t in argtypes) or not shareable(source):
        return None
    includes, rest = includes_apart(source)
    body, entries = _ENTRY.subn("void kernel(", rest)
    if entries != 1:
        return None
    return Member(tuple(argtypes), source, includes, body)


def _binding(index: int, argtypes: tuple[str, ...]) -> str:
    args = ", ".join(f"ext_arg<{t.replace('const ', '')}>(args, {n})" for n, t in enumerate(argtypes))
    return f"""
static PyObject* kernel_{index}_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {{
    try {{
        if (nargs != {len(argtypes)}) [[unlikely]]
            throw std::runtime_error("requires {len(argtypes)} args");
        ext_batch_{index}::kernel({args});
        Py_RETURN_NONE;
    }} catch (std::exception const& e) {{
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return nullptr;
    }} catch (...) {{
        PyErr_SetString(PyExc_RuntimeError, "unhandled error");
        return nullptr;
    }}
}}
"""


# Tensors' data pointers come from the function Inductor's loader names in this environment
# variable (``CppPythonBindingsCodeCache._load_library_inner`` sets it before loading), as in
# Inductor's own bindings; scalars are parsed as Inductor's are.
_BINDINGS_HEAD = """
// inductor_ext: Python bindings of the kernels above, kernel_0, kernel_1, ... in their order
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <type_traits>

static void* (*ext_tensor_data_ptr)(PyObject* obj);

template <typename T> static inline T ext_arg(PyObject* const* args, size_t n) {
    static_assert(std::is_pointer_v<T>, "a kernel argument is a pointer, int64_t, uintptr_t or float");
    return static_cast<T>(ext_tensor_data_ptr(args[n]));
}
template <> inline int64_t ext_arg<int64_t>(PyObject* const* args, size_t n) {
    auto value = PyLong_AsSsize_t(args[n]);
    if (value == -1 && PyErr_Occurred()) [[unlikely]]
        throw std::runtime_error("expected int arg");
    return value;
}
template <> inline uintptr_t ext_arg<uintptr_t>(PyObject* const* args, size_t n) {
    auto value = PyLong_AsVoidPtr(args[n]);
    if (value == reinterpret_cast<void*>(-1) && PyErr_Occurred()) [[unlikely]]
        throw std::runtime_error("expected int arg");
    return reinterpret_cast<uintptr_t>(value);
}
template <> inline float ext_arg<float>(PyObject* const* args, size_t n) {
    auto value = PyFloat_AsDouble(args[n]);
    if (value == -1.0 && PyErr_Occurred()) [[unlikely]]
        throw std::runtime_error("expected float arg");
    return static_cast<float>(value);
}
"""

_BINDINGS_TAIL = """
static PyMethodDef ext_methods[] = {{
{methods}
    {{NULL, NULL, 0, NULL}}}};

static struct PyModuleDef ext_module = {{PyModuleDef_HEAD_INIT, "kernel", NULL, -1, ext_methods}};

PyMODINIT_FUNC PyInit_kernel(void) {{
    const char* address = std::getenv("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR");
    if (!address) {{
        PyErr_SetString(PyExc_RuntimeError, "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR must be set");
        return nullptr;
    }}
    char* end = nullptr;
    errno = 0;
    uintptr_t value = std::strtoull(address, &end, 10);
    if (errno != 0 || end == address || value == 0) {{
        PyErr_SetString(PyExc_RuntimeError, "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR is not an address");
        return nullptr;
    }}
    ext_tensor_data_ptr = reinterpret_cast<decltype(ext_tensor_data_ptr)>(value);
    PyObject* module = PyModule_Create(&ext_module);
#ifdef Py_GIL_DISABLED
    if (module) PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED);
#endif
    return module;
}}
"""


def batch_source(members: list[Member]) -> str:
    """One translation unit defining every member's kernel and a module binding them in order."""
    includes = list(dict.fromkeys(line for m in members for line in m.includes))
    parts = ["// inductor_ext: a batch of Inductor's C++ kernels, one namespace each", *includes]
    parts += [f"namespace ext_batch_{i} {{\n{m.body}\n}}  // namespace ext_batch_{i}"
              for i, m in enumerate(members)]
    parts.append(_BINDINGS_HEAD)
    parts += [_binding(i, m.argtypes) for i, m in enumerate(members)]
    methods = "\n".join(
        f'    {{"kernel_{i}", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(kernel_{i}_py)), '
        f'METH_FASTCALL, ""}},' for i in range(len(members)))
    parts.append(_BINDINGS_TAIL.format(methods=methods))
    return "\n".join(parts)


def error_line(e: BaseException) -> str:
    """``e`` in one line for a log: its type and its message's first line (a compiler's error
    carries the whole command and output)."""
    return f"{type(e).__name__}: {next(iter(str(e).splitlines()), '')}"  # '' for an empty message


def start(members: list[Member], submit_fn: Callable[..., Any]) -> Callable[[], Any]:
    """Submit the batch's build (or find it built, in memory or on disk); returns its module's
    getter, as ``CppPythonBindingsCodeCache.load_async`` does."""
    return CppPythonBindingsCodeCache.load_async(batch_source(members), submit_fn=submit_fn)  # for the CPU


@dataclass
class Batch:
    """Up to ``BATCH_SIZE`` kernels built together once started; each served from its module."""

    submit_fn: Callable[..., Any]
    members: list[Member] = field(default_factory=list)
    _get_module: Callable[[], Any] | None = None
    _failed: bool = False

    @property
    def started(self) -> bool:
        return self._get_module is not None

    def start(self) -> None:
        if self._get_module is None:
            self._get_module = start(self.members, self.submit_fn)

    def kernel(self, index: int) -> Any:
        """The callable of member ``index`` (starting a batch not yet full: the module's kernels
        are all defined before any is asked for)."""
        self.start()
        if not self._failed:
            try:
                return getattr(self._get_module(), f"kernel_{index}")
            except Exception as e:  # noqa: BLE001  (a batch never fails the compile)
                self._failed = True
                log.warning("ext: %d C++ kernels did not build as one unit (%s); each is built alone",
                            len(self.members), error_line(e))
        m = self.members[index]
        return CppPythonBindingsCodeCache.load_pybinding(list(m.argtypes), m.source)


@dataclass
class Gatherer:
    """The batchable kernels of one module (or one wrapper's codegen), in order, in batches."""

    submit_fn: Callable[..., Any]
    size: int = field(default_factory=lambda: BATCH_SIZE)  # read when a module's gathering starts
    _open: Batch | None = None

    def add(self, m: Member) -> Callable[[], Any]:
        """Add ``m`` to the open batch (a full one starts building); returns its callable's getter."""
        if self._open is None or self._open.started:
            self._open = Batch(self.submit_fn)
        batch, index = self._open, len(self._open.members)
        batch.members.append(m)
        if len(batch.members) == self.size:
            batch.start()
        return functools.partial(batch.kernel, index)

    def start_open(self) -> None:
        """Start the last, partial batch: every kernel has been added."""
        if self._open is not None:
            self._open.start()


def prefetch(owner: Any, argtypes: list[str], source: str) -> bool:
    """At codegen: gather the kernel into ``owner``'s (the wrapper's) batches, starting each full
    batch's build in Inductor's pool; the module's load gathers the same batches and finds them
    under way. False where the kernel is built alone or Inductor compiles inline."""
    m = member(argtypes, source)
    if m is None or get_compile_threads() <= 1:
        return False
    gatherer = owner.__dict__.setdefault("_ext_kernel_batches", Gatherer(AsyncCompile.submit))
    gatherer.add(m)
    return True


@contextlib.contextmanager
def served_in_batches() -> Iterator[None]:
    """Inside: each graph module's ``async_compile.cpp_pybinding`` calls gathered into batches,
    its last, partial batch started when the module waits for its kernels."""
    original, original_wait = AsyncCompile.__dict__["cpp_pybinding"], AsyncCompile.__dict__["wait"]

    def cpp_pybinding(self: AsyncCompile, argtypes: list[str], source_code: str) -> Any:
        m = member(argtypes, source_code) if get_compile_threads() > 1 else None
        if m is None:
            return original(self, argtypes, source_code)
        kernel_code_log.info("CPP+Bindings Kernel:\n%s", source_code)
        gatherer = self.__dict__.setdefault("_ext_kernel_batches", Gatherer(self.submit))
        return LambdaFuture(gatherer.add(m))

    def wait(self: AsyncCompile, scope: dict[str, Any]) -> None:
        # The module has defined all its kernels: the last, partial batch builds beside the full
        # ones, not after them (its kernels are asked for only once the earlier batches' are).
        gatherer = self.__dict__.get("_ext_kernel_batches")
        if gatherer is not None:
            gatherer.start_open()
        original_wait(self, scope)

    AsyncCompile.cpp_pybinding = cpp_pybinding  # type: ignore[method-assign]
    AsyncCompile.wait = wait  # type: ignore[method-assign]
    try:
        yield
    finally:
        AsyncCompile.cpp_pybinding = original  # type: ignore[method-assign]
        AsyncCompile.wait = original_wait  # type: ignore[method-assign]
