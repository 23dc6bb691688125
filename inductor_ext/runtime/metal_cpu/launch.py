"""Binding arguments and dispatching kernels of a compiled MSL library on the CPU.

Arguments bind as ``torch.mps.compile_shader`` binds them: argument i to ``[[buffer(i)]]``; a
tensor as its data pointer (storage offset included); a Python int as an int64, a float as a
float32, a list of ints/floats as an array of them, a list of tensors as an array of their
addresses; ``arg_casts`` converts scalars as compile_shader does ("fp16", "bf16", "int32", ...).

A checked launch (the default) copies every buffer into its own mapping whose end touches an
inaccessible page (and whose start follows one), so a read or write past a buffer stops the
launch with an error naming the buffer; slack bytes around each buffer (alignment) are filled
with a pattern and checked afterwards. An unchecked launch passes the tensors' own memory.
"""

from __future__ import annotations

import ctypes
import mmap
import struct
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from inductor_ext.runtime.metal_cpu.msl import Kernel, Param
from inductor_ext.targets.apple import MAX_THREADS_PER_THREADGROUP, SIMD_WIDTH
_PAGE = mmap.PAGESIZE
_ALIGN = 16  # buffers start 16-byte aligned, as MTLBuffer contents with offsets kernels rely on
_SLACK_BYTE = 0xA5
_PROT_NONE = 0

_SCALAR_CASTS = {"fp16": "e", "bf16": "bf16", "int32": "i", "int16": "h", "int8": "b", "uint8": "B"}
# c10::metal::ErrorMessages: uint count, then 30 x {char file[128], func[128], message[250]; uint line}
_ERROR_SLOTS, _ERROR_SLOT_BYTES = 30, 512
_ERROR_MESSAGES_BYTES = 4 + _ERROR_SLOTS * _ERROR_SLOT_BYTES

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

_dispatch_lock = threading.Lock()  # signal handlers and the scheduler are per process


class MetalLaunchError(RuntimeError):
    """A kernel failed while running on the CPU executor: divergent barrier, memory fault,
    read of an inactive SIMD lane, an error it reported, or a bad launch configuration."""


class _Launch(ctypes.Structure):
    _fields_ = [("stacks", ctypes.c_void_p), ("stack_stride", ctypes.c_uint64), ("stack_bytes", ctypes.c_uint64),
                ("buffers", ctypes.POINTER(ctypes.c_void_p)), ("nbuffers", ctypes.c_int32),
                ("threads", ctypes.c_uint32 * 3), ("group", ctypes.c_uint32 * 3), ("checked", ctypes.c_int32),
                ("error", ctypes.c_char_p), ("error_bytes", ctypes.c_int32), ("fault_address", ctypes.c_uint64)]


def as_dims(value: Any, what: str) -> tuple[int, int, int]:
    """An int or a 1-3 tuple of positive ints, padded with 1s."""
    dims = (value,) if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else None
    if dims is None or not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise ValueError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    if any(d <= 0 for d in dims):
        raise ValueError(f"{what} must be positive, got {value!r}")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


# ------------------------------------------------------------------------ host memory
@dataclass
class _Region:
    """Bytes a kernel may touch through one storage: [start, start + nbytes) of host memory."""

    host: int  # address of the original bytes
    nbytes: int
    writable: bool
    owner: str  # what bound it, for messages ("buffer(2) `out` (float)")
    mirror_base: int = 0  # checked mode: the mapping and where the bytes start in it
    mirror_len: int = 0
    data: int = 0
    keep: Any = None  # Python object that owns `host` (scalars)

    @property
    def slack(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(address, length) of the pattern-filled bytes before and after the data."""
        first = self.mirror_base + _PAGE
        last = self.mirror_base + self.mirror_len - _PAGE
        return (first, self.data - first), (self.data + self.nbytes, last - self.data - self.nbytes)


def _map(nbytes: int) -> int:
    addr = _libc.mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise MemoryError(f"mmap of {nbytes} bytes failed (errno {ctypes.get_errno()})")
    return addr


_STACK_BYTES = 128 * 1024  # per kernel thread
_stacks: int | None = None


def _stack_pool() -> int:
    """Fiber stacks for the threads of one threadgroup, each after an inaccessible page; mapped
    once per process and shared by every library (each guard page is a mapping of its own)."""
    global _stacks
    if _stacks is None:
        stride = _STACK_BYTES + _PAGE
        base = _map(MAX_THREADS_PER_THREADGROUP * stride)
        for i in range(MAX_THREADS_PER_THREADGROUP):
            _libc.mprotect(base + i * stride, _PAGE, _PROT_NONE)
        _stacks = base
    return _stacks


def _in_stack_guard(address: int) -> bool:
    if _stacks is None:
        return False
    offset = address - _stacks
    stride = _STACK_BYTES + _PAGE
    return 0 <= offset < MAX_THREADS_PER_THREADGROUP * stride and offset % stride < _PAGE


def _mirror(region: _Region) -> None:
    """Copy the region into a mapping with an inaccessible page right after its last byte
    (rounded to 16) and one before its page."""
    span = (region.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
    pages = max(1, (span + _PAGE - 1) // _PAGE)
    region.mirror_len = (pages + 2) * _PAGE
    region.mirror_base = _map(region.mirror_len)
    _libc.mprotect(region.mirror_base, _PAGE, _PROT_NONE)
    _libc.mprotect(region.mirror_base + (pages + 1) * _PAGE, _PAGE, _PROT_NONE)
    region.data = region.mirror_base + (pages + 1) * _PAGE - span
    for addr, length in region.slack:
        ctypes.memset(addr, _SLACK_BYTE, length)
    if region.nbytes:
        ctypes.memmove(region.data, region.host, region.nbytes)


def _slack_damage(region: _Region) -> str | None:
    for (addr, length), where in zip(region.slack, ("before the start", "after the end")):
        if length and ctypes.string_at(addr, length) != bytes([_SLACK_BYTE]) * length:
            return f"the kernel wrote {where} of {region.owner}"
    return None


def _fault_owner(regions: Sequence[_Region], address: int) -> str:
    if _in_stack_guard(address):
        return (f"a kernel thread overflowed its {_STACK_BYTES // 1024} KiB stack (large thread-local arrays or deep "
                "recursion)")
    for r in regions:
        if r.mirror_base <= address < r.mirror_base + r.mirror_len:
            offset = address - r.data
            where = f"{offset - r.nbytes} bytes past its end" if offset >= r.nbytes else f"{-offset} bytes before its start"
            return f"out-of-bounds access to {r.owner} of {r.nbytes} bytes: {where} (byte offset {offset})"
    return "the address is outside every buffer of the launch (a wild pointer, or a thread stack overflow)"


# ------------------------------------------------------------------------ argument binding
def _scalar_bytes(value: Any, cast: str | None, where: str) -> bytes:
    """The bytes compile_shader binds for a Python scalar or list: int64 / float32 unless cast."""
    def pack(v: Any) -> bytes:
        if not isinstance(v, (int, float)):
            raise TypeError(f"{where}: unsupported argument {v!r} of type {type(v).__name__}; pass CPU tensors, "
                            "Python ints/floats or lists of them")
        if cast is None:
            return struct.pack("<f", v) if isinstance(v, float) else struct.pack("<q", int(v))
        if cast not in _SCALAR_CASTS:
            raise ValueError(f"{where}: unsupported arg_casts entry {cast!r}; allowed: {sorted(_SCALAR_CASTS)}")
        if cast == "bf16":
            import torch

            return torch.tensor([float(v)], dtype=torch.bfloat16).view(torch.int16).numpy().tobytes()
        fmt = _SCALAR_CASTS[cast]
        return struct.pack("<" + fmt, float(v) if fmt == "e" else int(v))

    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"{where}: an empty list cannot be a kernel argument")
        return b"".join(pack(v) for v in value)
    return pack(value)


def _describe(p: Param | None, index: int) -> str:
    return f"buffer({index}) `{p.name}` ({p.type})" if p else f"buffer({index})"


def _check_scalar_type(p: Param | None, value: Any, cast: str | None, kernel: str) -> None:
    """Refuse a Python scalar whose bytes the declared reference would misread (a float read as
    an int or the other way round): Metal would compute with garbage."""
    if p is None or cast is not None or isinstance(value, (list, tuple)):
        return
    vt = p.value_type
    is_float_param = vt in ("float", "half", "bfloat")
    is_int_param = vt in ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "bool", "int32_t",
                          "uint32_t", "int64_t", "uint64_t", "size_t")
    if isinstance(value, float) and is_int_param:
        raise TypeError(f"kernel {kernel}: {_describe(p, p.index)} is an integer but got the Python float {value!r}, "
                        "which compile_shader binds as a float32")
    if isinstance(value, int) and (is_float_param or vt in ("char", "uchar", "short", "ushort")):
        raise TypeError(f"kernel {kernel}: {_describe(p, p.index)} is {vt} but got the Python int {value!r}, which "
                        "compile_shader binds as an int64; pass a float, or use arg_casts")


def _region_for_tensor(t: Any, owner: str, writable: bool) -> tuple[_Region, int, int]:
    """(region, storage key, offset of the tensor's data in the region)."""
    storage = t.untyped_storage()
    base, total = storage.data_ptr(), storage.nbytes()
    return _Region(base, total, writable, owner), base, t.data_ptr() - base


class BoundLaunch:
    """Arguments of one launch in host memory, mirrored when checked."""

    def __init__(self, kernel: Kernel, args: Sequence[Any], arg_casts: Any, checked: bool, error_buf_idx: int | None):
        import torch

        self.kernel, self.checked = kernel, checked
        params = {p.index: p for p in kernel.buffers}
        total = max(kernel.nbuffers, len(args) + (1 if error_buf_idx is not None else 0))
        if len(args) + (error_buf_idx is not None) != kernel.nbuffers:
            raise TypeError(f"kernel {kernel.name} binds {kernel.nbuffers} buffers "
                            f"({', '.join(p.name for p in kernel.buffers)}) but got {len(args)} arguments"
                            + (" and an error buffer" if error_buf_idx is not None else ""))
        self.regions: list[_Region] = []
        by_storage: dict[int, _Region] = {}
        # (region, offset) per buffer index; None for a list of tensors (resolved after mirroring)
        self.slots: list[tuple[_Region, int] | list[tuple[_Region, int]]] = [None] * total  # type: ignore[list-item]
        self.error_buf: ctypes.Array | None = None
        arg_iter = iter(args)
        for index in range(total):
            p = params.get(index)
            owner = _describe(p, index)
            if index == error_buf_idx:
                self.error_buf = ctypes.create_string_buffer(_ERROR_MESSAGES_BYTES)
                region = _Region(ctypes.addressof(self.error_buf), _ERROR_MESSAGES_BYTES, True, owner, keep=self.error_buf)
                self.regions.append(region)
                self.slots[index] = (region, 0)
                continue
            value = next(arg_iter)
            cast = arg_casts.get(index) if isinstance(arg_casts, dict) else arg_casts
            if isinstance(value, torch.Tensor) or (isinstance(value, (list, tuple)) and value
                                                   and isinstance(value[0], torch.Tensor)):
                tensors = [value] if isinstance(value, torch.Tensor) else list(value)
                entries = []
                for t in tensors:
                    if t.device.type != "cpu":
                        raise ValueError(f"kernel {kernel.name}: {owner} got a tensor on {t.device}; the Metal-on-CPU "
                                         "executor runs CPU tensors")
                    region, key, offset = _region_for_tensor(t, owner, writable=True)
                    if key in by_storage:
                        region = by_storage[key]
                    else:
                        by_storage[key] = region
                        self.regions.append(region)
                    entries.append((region, offset))
                self.slots[index] = entries[0] if isinstance(value, torch.Tensor) else entries
                continue
            _check_scalar_type(p, value, cast, kernel.name)
            data = _scalar_bytes(value, cast, f"kernel {kernel.name}: {owner}")
            keep = ctypes.create_string_buffer(data, len(data))
            region = _Region(ctypes.addressof(keep), len(data), False, owner, keep=keep)
            self.regions.append(region)
            self.slots[index] = (region, 0)
        self._pointer_arrays: list[Any] = []

    def pointers(self) -> ctypes.Array:
        """The buffer table the kernel reads: mirrors when checked, host memory otherwise."""
        if self.checked:
            for r in self.regions:
                _mirror(r)
        else:
            for r in self.regions:
                r.data = r.host
        pointers = (ctypes.c_void_p * max(1, len(self.slots)))()
        for i, slot in enumerate(self.slots):
            if isinstance(slot, list):  # list of tensors: an array of their addresses
                arr = (ctypes.c_uint64 * len(slot))(*(r.data + off for r, off in slot))
                self._pointer_arrays.append(arr)
                pointers[i] = ctypes.addressof(arr)
            else:
                region, offset = slot
                pointers[i] = region.data + offset
        return pointers

    def finish(self, ok: bool) -> str | None:
        """Copy results back (checked mode) and release mirrors; the slack-damage message if any."""
        damage = None
        if self.checked:
            for r in self.regions:
                if ok and damage is None:
                    damage = _slack_damage(r)
                if ok and r.writable and r.nbytes:
                    ctypes.memmove(r.host, r.data, r.nbytes)
                _libc.munmap(r.mirror_base, r.mirror_len)
        return damage

    def fault_owner(self, address: int) -> str:
        if self.checked or _in_stack_guard(address):
            return _fault_owner(self.regions, address)
        return "the launch was unchecked, so the buffer is unknown; run it with checked=True"

    def reported_errors(self) -> list[str]:
        """Messages the kernel wrote with TORCH_REPORT_ERROR into the error buffer."""
        if self.error_buf is None:
            return []
        raw = self.error_buf.raw
        count = struct.unpack_from("<I", raw, 0)[0]
        messages: dict[str, int] = {}
        for i in range(min(count, _ERROR_SLOTS)):
            base = 4 + i * _ERROR_SLOT_BYTES
            file, func, message = (raw[base + o:base + o + n].split(b"\0")[0].decode(errors="replace")
                                   for o, n in ((0, 128), (128, 128), (256, 250)))
            line = struct.unpack_from("<I", raw, base + 508)[0]
            text = f"{message} (line {line} of {func} in {file.rsplit('/', 1)[-1]})"
            messages[text] = messages.get(text, 0) + 1
        return [f"{text}{f' x{n}' if n > 1 else ''}" for text, n in messages.items()] + (
            [f"and {count - _ERROR_SLOTS} more"] if count > _ERROR_SLOTS else [])



def dispatch(library: Any, kernel: Kernel, args: Sequence[Any], threads: tuple[int, int, int],
             group: tuple[int, int, int], *, checked: bool = True, arg_casts: Any = None,
             error_buf_idx: int | None = None) -> None:
    """Run ``kernel`` of the loaded ``library`` over ``threads`` in threadgroups of ``group``."""
    n = group[0] * group[1] * group[2]
    limit = min(MAX_THREADS_PER_THREADGROUP, kernel.max_total_threads or MAX_THREADS_PER_THREADGROUP)
    if n > limit:
        why = (f"its [[max_total_threads_per_threadgroup({kernel.max_total_threads})]]" if kernel.max_total_threads
               else f"the {MAX_THREADS_PER_THREADGROUP} threads Apple GPUs allow")
        raise MetalLaunchError(f"kernel {kernel.name}: threadgroups of {group[0]}x{group[1]}x{group[2]} = {n} threads "
                               f"exceed {why}")
    if kernel.required_threads and tuple(group) != kernel.required_threads:
        rx, ry, rz = kernel.required_threads
        raise MetalLaunchError(f"kernel {kernel.name} requires threadgroups of {rx}x{ry}x{rz} threads "
                               f"([[required_threads_per_threadgroup]]) but was dispatched with "
                               f"{group[0]}x{group[1]}x{group[2]}")
    bound = BoundLaunch(kernel, args, arg_casts, checked, error_buf_idx)
    err = ctypes.create_string_buffer(2048)
    with _dispatch_lock:
        pointers = bound.pointers()
        launch = _Launch(_stack_pool(), _STACK_BYTES + _PAGE, _STACK_BYTES,
                         ctypes.cast(pointers, ctypes.POINTER(ctypes.c_void_p)), len(bound.slots),
                         (ctypes.c_uint32 * 3)(*threads), (ctypes.c_uint32 * 3)(*group), int(checked),
                         ctypes.cast(err, ctypes.c_char_p), len(err), 0)
        rc = library.mcpu_dispatch(getattr(library, f"mcpu_thread_{kernel.name}"), ctypes.byref(launch))
        damage = bound.finish(rc == 0)
    if rc != 0:
        message = err.value.decode(errors="replace")
        if rc == 2:
            message += f": {bound.fault_owner(launch.fault_address)}"
        raise MetalLaunchError(f"kernel {kernel.name} failed on the Metal-on-CPU executor: {message}")
    if damage:
        raise MetalLaunchError(f"kernel {kernel.name}: {damage} (an out-of-bounds write)")
    reported = bound.reported_errors()
    if reported:
        raise MetalLaunchError(f"kernel {kernel.name} reported: " + "; ".join(reported))
