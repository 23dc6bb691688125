"""The MSL dialect (Metal Shading Language, ``using namespace metal``), as the Metal template
families (``templates/metal/``) write it.

Beyond the shared tables: the storage type a kernel reads a dtype's bytes as (bfloat16 as
``ushort`` bits and float8_e4m3fn as ``uchar``, decoded by ``templates/metal/_msl.py: HEADER``),
buffers in the ``device`` address space bound by index, scalars as ``constant T&``, and kernel
position attributes (``[[threadgroup_position_in_grid]]``...).
"""

from __future__ import annotations

from typing import Any

from inductor_ext.templates.lang.cstyle import CStyleLanguage, dtype_name


class MslLanguage(CStyleLanguage):
    name = "msl"
    type_names = {
        "bool": "bool", "int8": "char", "int16": "short", "int32": "int", "int64": "long",
        "uint8": "uchar", "uint16": "ushort", "uint32": "uint", "uint64": "ulong",
        "float16": "half", "bfloat16": "bfloat", "float32": "float",  # MSL has no double
    }
    # How kernels read a dtype's bytes where that differs from its type: bits, decoded in-kernel.
    storage_names = {"bfloat16": "ushort", "float8_e4m3fn": "uchar"}
    cast_format = "{type}({x})"
    bitcast_format = "as_type<{type}>({x})"
    math_prefix = ""  # metal:: is the namespace in use
    math_names = {"erf": None, "erfc": None, "lgamma": None, "tgamma": None}  # Metal has none
    restrict = ""

    def storage_type(self, dtype: Any) -> str:
        """The element type a kernel reads ``dtype`` as (``ushort`` for bfloat16 bits)."""
        name = dtype_name(dtype)
        return self.storage_names.get(name) or self.type_name(name)

    def pointer_param(self, dtype: Any, name: str, *, const: bool) -> str:
        """A buffer in device memory: const ones are read as their storage type, the others
        written as their type (``device bfloat* out``, ``const device ushort* x``)."""
        if const:
            return f"const device {self.storage_type(dtype)}* {name}"
        return f"device {self.type_name(dtype)}* {name}"

    def pointer(self, dtype: Any, name: str) -> str:
        """A local pointer into a read buffer (``const device ushort* xr``)."""
        return self.pointer_param(dtype, name, const=True)

    def scalar_param(self, dtype: Any, name: str) -> str:
        return f"constant {self.type_name(dtype)}& {name}"

    def bind(self, param: str, index: int) -> str:
        """``param`` bound to argument buffer ``index`` (the launcher passes arguments in order)."""
        return f"{param} [[buffer({index})]]"

    def attribute(self, type_: str, name: str, attribute: str) -> str:
        """A kernel position parameter, e.g. ``uint lane [[thread_index_in_simdgroup]]``."""
        return f"{type_} {name} [[{attribute}]]"

    def kernel_params(self, params: list[str], attributes: list[str], sep: str = ",\n    ") -> str:
        """Buffer parameters bound by index in order, then the position attributes."""
        return sep.join([self.bind(p, i) for i, p in enumerate(params)] + attributes)

    def barrier(self) -> str:
        return "threadgroup_barrier(mem_flags::mem_threadgroup);"

    def local_array(self, dtype: Any, name: str, count: int | str, *more: int | str) -> str:
        """Threadgroup memory: ``threadgroup float As[16][32];`` (one size per dimension)."""
        dims = "".join(f"[{d}]" for d in (count, *more))
        return f"threadgroup {self.type_name(dtype)} {name}{dims};"


MSL = MslLanguage()
