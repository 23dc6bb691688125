"""SYCL kernels from source: build them at run time, look them up, launch them over an nd_range.

One :class:`Program` is one call of the run-time compiler for one or more free-function kernels
(a compiled graph's kernels build together: one compiler start for all of them). Builds are
cached in this process (by device, source and options) and across processes by SYCL's persistent
cache (``SYCL_CACHE_DIR``, set up by ``wheels.configure_environment``), which holds two things:
the IR the front end made from the source, and the device binary keyed by that IR. A second
process loads the IR from the cache; for some programs its bytes differ from a fresh front end's,
so that process compiles the device binary once more, and from the third process on both hit
(measured: ``bench/sycl_compile_time.py``).

Devices: ``queue_for(torch.device("cpu"))`` is Intel's OpenCL CPU device, which runs kernels on
CPU tensors (their memory is plain host memory, usable as SYCL system USM); for ``xpu`` tensors the
kernels are enqueued on torch's current XPU queue (Level Zero), so they order with torch's work.
"""

from __future__ import annotations

import ctypes
import json
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from inductor_ext.runtime.sycl import shim

if TYPE_CHECKING:
    import torch


class SyclError(RuntimeError):
    """The SYCL runtime refused something (a launch, a device lookup); the message is its own."""


class SyclCompileError(SyclError):
    """The run-time compiler rejected a kernel: ``log`` is the compiler's text, ``source`` the
    kernel source with line numbers (the log's line numbers refer to it)."""

    def __init__(self, what: str, log: str, source: str) -> None:
        self.log, self.source = log, source
        numbered = "\n".join(f"{i:4d}  {line}" for i, line in enumerate(source.splitlines(), 1))
        super().__init__(f"{what}\n--- compiler output ---\n{log.strip()}\n--- kernel source ---\n{numbered}")


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    backend: str  # "opencl", "level_zero"
    kind: str  # "cpu", "gpu"
    max_work_group_size: int
    local_mem_size: int  # bytes of work-group local memory
    fp16: bool
    fp64: bool
    sub_group_sizes: tuple[int, ...]


def _check(lib: ctypes.CDLL, status: int, err: ctypes.c_void_p, what: str) -> None:
    if status != 0:
        raise SyclError(f"{what}: {shim.take_string(lib, err)}")


class Queue:
    """An in-order SYCL queue (ours, or a second handle to torch's)."""

    def __init__(self, handle: ctypes.c_void_p, lib: ctypes.CDLL, wait: bool) -> None:
        self.handle, self._lib = handle, lib
        self.wait_each_launch = wait  # CPU tensors: torch reads the result right after the call
        out, err = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib, lib.ext_sycl_device_info(handle, ctypes.byref(out), ctypes.byref(err)), err, "reading the device")
        info = json.loads(shim.take_string(lib, out))
        info["sub_group_sizes"] = tuple(info["sub_group_sizes"])
        self.info = DeviceInfo(**info)

    @classmethod
    def open(cls, backend: str, kind: str) -> "Queue":
        lib = shim.load()
        q, err = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib, lib.ext_sycl_open_device(backend.encode(), kind.encode(), ctypes.byref(q), ctypes.byref(err)),
               err, f"opening the SYCL {backend} {kind} device")
        return cls(q, lib, wait=kind == "cpu")

    @classmethod
    def borrow(cls, sycl_queue_pointer: int) -> "Queue":
        lib = shim.load()
        q, err = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib, lib.ext_sycl_borrow_queue(ctypes.c_void_p(sycl_queue_pointer), ctypes.byref(q), ctypes.byref(err)),
               err, "sharing torch's XPU queue")
        return cls(q, lib, wait=False)

    def synchronize(self) -> None:
        err = ctypes.c_void_p()
        _check(self._lib, self._lib.ext_sycl_wait(self.handle, ctypes.byref(err)), err, "waiting for SYCL kernels")


_queues: dict[Any, Queue] = {}
_queues_lock = threading.Lock()


def cpu_queue() -> Queue:
    """Intel's OpenCL CPU device (runs kernels on CPU tensors)."""
    with _queues_lock:
        if "cpu" not in _queues:
            _queues["cpu"] = Queue.open("opencl", "cpu")
        return _queues["cpu"]


def queue_for(device: "torch.device | str") -> Queue:
    """The queue kernels for tensors on ``device`` run on: the OpenCL CPU device for "cpu",
    torch's current queue for "xpu"."""
    if device == "cpu":
        return cpu_queue()  # (without importing torch: a build-only process does not need it)
    import torch

    device = torch.device(device)
    if device.type == "cpu":
        return cpu_queue()
    if device.type == "xpu":
        pointer = torch.xpu.current_stream(device).sycl_queue
        with _queues_lock:
            if pointer not in _queues:
                _queues[pointer] = Queue.borrow(pointer)
            return _queues[pointer]
    raise ValueError(f"SYCL kernels run on 'cpu' (Intel's OpenCL CPU device) or 'xpu' tensors, not {device.type!r}")


# ----------------------------------------------------------------------------- kernel arguments

@dataclass(frozen=True)
class LocalMemory:
    """A work-group local memory argument of ``nbytes`` bytes (a ``work_group_memory<T[]>``
    parameter of the kernel)."""

    nbytes: int


# Parameter kinds a kernel declares, in order: what each launch argument is converted to.
SCALAR_FORMATS = {"i32": "<i", "i64": "<q", "u32": "<I", "u64": "<Q", "f32": "<f", "f64": "<d"}
PARAM_KINDS = ("ptr", "local", *SCALAR_FORMATS)
_ARG_POINTER, _ARG_BYTES, _ARG_LOCAL = 0, 1, 2


@dataclass
class BuildRecord:
    """One run of the compiler (or an in-process cache hit), for compile-time reports."""

    kernels: tuple[str, ...]
    seconds: float
    in_process_hit: bool


BUILDS: list[BuildRecord] = []
_bundles: dict[tuple[int, str, tuple[str, ...]], ctypes.c_void_p] = {}
_bundles_lock = threading.Lock()


# The wheels ship SYCL's device libraries (libsycl-crt, -cmath, -imf-bf16, ...) as SPIR-V only,
# and the run-time compiler links only bitcode copies of them. ext's kernels need none of them:
# math goes through sycl:: builtins and bf16 through bit operations (templates/lang/sycl.py), so
# builds skip them. (Converting them with llvm-spirv -r works, but kernels that then use SYCL's
# bf16 conversions crash libsycl 2025.3's persistent cache when it loads them back.)
BUILD_OPTIONS = ("-fno-sycl-device-lib=all",)  # (deprecated, but --no-offloadlib is not honoured here)


class Kernel:
    """One free-function kernel of a :class:`Program`; call it to launch."""

    def __init__(self, program: "Program", name: str, source: str, params: Sequence[str],
                 properties: dict[str, Any] | None = None) -> None:
        bad = [p for p in params if p not in PARAM_KINDS]
        if bad:
            raise ValueError(f"kernel {name}: unknown parameter kinds {bad}; allowed: {PARAM_KINDS}")
        self.program, self.name, self.source = program, name, source
        self.params = tuple(params)
        self.properties = dict(properties or {})
        self._handle: ctypes.c_void_p | None = None
        n = len(self.params)
        self._kinds = (ctypes.c_int * n)(*[
            _ARG_POINTER if p == "ptr" else _ARG_LOCAL if p == "local" else _ARG_BYTES for p in self.params])

    def _bind(self, handle: ctypes.c_void_p) -> None:
        self._handle = handle

    def __call__(self, *args: Any, global_size: Sequence[int], local_size: Sequence[int]) -> None:
        if self._handle is None:
            self.program.build()
        self.launch(args, global_size, local_size)

    def launch(self, args: Sequence[Any], global_size: Sequence[int], local_size: Sequence[int]) -> None:
        if len(args) != len(self.params):
            raise TypeError(f"kernel {self.name} takes {len(self.params)} arguments ({', '.join(self.params)}), "
                            f"got {len(args)}")
        ndim = len(global_size)
        if ndim not in (1, 2, 3) or len(local_size) != ndim:
            raise ValueError(f"kernel {self.name}: nd_range needs 1-3 dimensions with as many local sizes; "
                             f"got global {tuple(global_size)}, local {tuple(local_size)}")
        for g, loc in zip(global_size, local_size):
            if loc <= 0 or g % loc:
                raise ValueError(f"kernel {self.name}: global size {tuple(global_size)} is not a multiple of the "
                                 f"work-group size {tuple(local_size)}")
        if any(g == 0 for g in global_size):
            return  # nothing to run (an empty tensor)
        n = len(self.params)
        values = (ctypes.c_void_p * n)()
        sizes = (ctypes.c_size_t * n)()
        keep = []  # scalar bytes must live until the launch call returns
        queue = self.program.queue
        for i, (kind, arg) in enumerate(zip(self.params, args)):
            if kind == "ptr":
                values[i] = _pointer_of(arg, queue, self.name, i)
            elif kind == "local":
                if not isinstance(arg, LocalMemory):
                    raise TypeError(f"kernel {self.name}: argument {i} is local memory; pass LocalMemory(nbytes)")
                sizes[i] = arg.nbytes
            else:
                data = ctypes.create_string_buffer(struct.pack(SCALAR_FORMATS[kind], arg), 8)
                keep.append(data)
                values[i] = ctypes.cast(data, ctypes.c_void_p)
                sizes[i] = struct.calcsize(SCALAR_FORMATS[kind])
        lib, err = self.program.lib, ctypes.c_void_p()
        status = lib.ext_sycl_launch(queue.handle, self._handle, ndim, (ctypes.c_size_t * ndim)(*global_size),
                                     (ctypes.c_size_t * ndim)(*local_size), n, self._kinds, values, sizes,
                                     int(queue.wait_each_launch), ctypes.byref(err))
        _check(lib, status, err, f"launching SYCL kernel {self.name} over global {tuple(global_size)}, "
                                 f"local {tuple(local_size)}")

    def max_work_group_size(self) -> int:
        if self._handle is None:
            self.program.build()
        out, err = ctypes.c_size_t(), ctypes.c_void_p()
        lib = self.program.lib
        _check(lib, lib.ext_sycl_kernel_max_work_group(self.program.queue.handle, self._handle, ctypes.byref(out),
                                                       ctypes.byref(err)), err, f"querying kernel {self.name}")
        return out.value


def _pointer_of(arg: Any, queue: Queue, kernel: str, index: int) -> int:
    if isinstance(arg, int):
        return arg
    data_ptr = getattr(arg, "data_ptr", None)
    if data_ptr is None:
        raise TypeError(f"kernel {kernel}: argument {index} must be a tensor (or an address), got {type(arg).__name__}")
    device_type = arg.device.type
    if device_type != ("cpu" if queue.info.kind == "cpu" else "xpu"):
        raise ValueError(f"kernel {kernel}: argument {index} is on {arg.device}, but the kernel runs on "
                         f"{queue.info.name} ({queue.info.backend})")
    return data_ptr()


@dataclass
class Program:
    """Free-function kernels compiled together (one compiler run) for one device type ("cpu":
    Intel's OpenCL CPU device, "xpu": torch's current XPU queue, looked up at the first build).

    ``prelude`` goes before the kernels' sources; ``includes`` are in-memory headers they may
    ``#include "name"``; ``options`` are extra compiler flags.
    """

    device: str = "cpu"
    prelude: str = "#include <sycl/sycl.hpp>\n"
    includes: dict[str, str] = field(default_factory=dict)
    options: tuple[str, ...] = ()
    kernels: dict[str, Kernel] = field(default_factory=dict)
    build_seconds: float | None = None
    _bundle: ctypes.c_void_p | None = None
    _queue: Queue | None = None

    @property
    def lib(self) -> ctypes.CDLL:
        return shim.load()

    @property
    def queue(self) -> Queue:
        if self._queue is None:
            self._queue = queue_for(self.device)
        return self._queue

    def add_kernel(self, name: str, source: str, params: Sequence[str], **properties: Any) -> Kernel:
        if name in self.kernels:
            raise ValueError(f"this program already has a kernel named {name!r}")
        if self._bundle is not None:
            raise RuntimeError(f"kernel {name!r} added after the program was built")
        kernel = Kernel(self, name, source, params, properties)
        self.kernels[name] = kernel
        return kernel

    def source(self) -> str:
        return self.prelude + "".join(f"\n{k.source.strip()}\n" for k in self.kernels.values())

    def build(self) -> "Program":
        """Compile every kernel now (once: later calls return at once)."""
        if self._bundle is not None or not self.kernels:
            return self
        source, names, queue = self.source(), tuple(self.kernels), self.queue
        options = (*BUILD_OPTIONS, *self.options)
        key = (id(queue), source + "\0".join(f"{k}={v}" for k, v in sorted(self.includes.items())), options)
        start = time.perf_counter()
        with _bundles_lock:
            bundle = _bundles.get(key)
            hit = bundle is not None
            if bundle is None:
                bundle = _build(self.lib, queue, source, self.includes, options, names)
                _bundles[key] = bundle
        self.build_seconds = time.perf_counter() - start
        BUILDS.append(BuildRecord(names, self.build_seconds, hit))
        lib = self.lib
        for name, kernel in self.kernels.items():
            handle, err = ctypes.c_void_p(), ctypes.c_void_p()
            _check(lib, lib.ext_sycl_get_kernel(bundle, name.encode(), ctypes.byref(handle), ctypes.byref(err)),
                   err, f"looking up SYCL kernel {name}")
            kernel._bind(handle)
        self._bundle = bundle
        return self


    def device_images(self) -> list[bytes]:
        """The built program as its device's backend received it: for a build from source, one
        SPIR-V module (``runtime/sycl/spirv.py`` disassembles it). Builds first if needed."""
        self.build()
        if self._bundle is None:
            return []  # no kernels, nothing built
        lib, images, index = self.lib, [], 0
        while True:
            count, data, size, err = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_void_p()
            _check(lib, lib.ext_sycl_bundle_image(self._bundle, index, ctypes.byref(count), ctypes.byref(data),
                                                  ctypes.byref(size), ctypes.byref(err)), err,
                   "reading the program's device image")
            if index >= count.value:
                return images
            images.append(ctypes.string_at(data.value, size.value))
            lib.ext_sycl_free(data)
            index += 1


def _strings(values: Sequence[str]) -> ctypes.Array:
    return (ctypes.c_char_p * max(len(values), 1))(*[v.encode() for v in values])


def _build(lib: ctypes.CDLL, queue: Queue, source: str, includes: dict[str, str], options: Sequence[str],
           names: Sequence[str]) -> ctypes.c_void_p:
    bundle, log, err = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    status = lib.ext_sycl_build(queue.handle, source.encode(), len(includes), _strings(list(includes)),
                                _strings(list(includes.values())), len(options), _strings(options), len(names),
                                _strings(names), ctypes.byref(bundle), ctypes.byref(log), ctypes.byref(err))
    log_text = shim.take_string(lib, log)
    if status != 0:
        message = shim.take_string(lib, err)
        raise SyclCompileError(f"SYCL kernel {', '.join(names)} did not compile for {queue.info.name}",
                               log_text or message, source)
    return bundle


def compile_kernel(source: str, name: str, params: Sequence[str], device: "torch.device | str" = "cpu",
                   includes: dict[str, str] | None = None, options: Sequence[str] = ()) -> Kernel:
    """One kernel from a whole source text (which includes what it needs), built now."""
    program = Program(str(device), prelude="", includes=dict(includes or {}), options=tuple(options))
    kernel = program.add_kernel(name, source, params)
    program.build()
    return kernel
