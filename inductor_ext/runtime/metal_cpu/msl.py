"""Reading MSL source for the CPU executor: its kernels and their parameters, the features it
uses that the executor cannot run, and the few rewrites g++ needs.

The rewrites keep line numbers (compile errors point at the user's lines):
- ``threadgroup T name[N];`` in a function body becomes a function ``static`` (one copy shared
  by the threads of a threadgroup, which run one after another) plus a call that fills it with
  0xFF bytes when a new threadgroup starts (Metal leaves threadgroup memory undefined);
- half literals ``1.5h`` become ``half(1.5f)``.
Each kernel gets a trampoline ``mcpu_thread_<name>(void** buffers, const ThreadInfo*)`` that
binds its ``[[buffer(i)]]`` parameters and thread-position attributes and calls it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Thread-position attributes -> the ThreadInfo field (mcpu_runtime.h) that holds them.
POSITION_ATTRIBUTES = {
    "thread_position_in_grid": "thread_position_in_grid",
    "thread_position_in_threadgroup": "thread_position_in_threadgroup",
    "threadgroup_position_in_grid": "threadgroup_position_in_grid",
    "threads_per_threadgroup": "threads_per_threadgroup",
    "threadgroups_per_grid": "threadgroups_per_grid",
    "threads_per_grid": "threads_per_grid",
    "grid_size": "threads_per_grid",
    "dispatch_threads_per_threadgroup": "dispatch_threads_per_threadgroup",
    "thread_index_in_threadgroup": "thread_index_in_threadgroup",
    "thread_index_in_simdgroup": "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup": "simdgroup_index_in_threadgroup",
    "threads_per_simdgroup": "threads_per_simdgroup",
    "thread_execution_width": "threads_per_simdgroup",
    "simdgroups_per_threadgroup": "simdgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup": "dispatch_simdgroups_per_threadgroup",
    "thread_index_in_quadgroup": "thread_index_in_quadgroup",
    "quadgroup_index_in_threadgroup": "quadgroup_index_in_threadgroup",
    "quadgroups_per_threadgroup": "quadgroups_per_threadgroup",
    "dispatch_quadgroups_per_threadgroup": "dispatch_quadgroups_per_threadgroup",
}
# grid_origin is always 0 for compute dispatches.
ZERO_ATTRIBUTES = ("grid_origin",)

# MSL the executor cannot run: (pattern in code, what it is). Checked before compiling so the
# error names the feature instead of a g++ message about a missing declaration.
UNSUPPORTED = (
    (r"\bsimdgroup_(?:float|half|bfloat)(?!8x8\b)\d+x\d+\b|\bsimdgroup_matrix\s*<\s*\w+\s*,\s*(?!8\s*,\s*8\s*>)",
     "simdgroup matrices other than 8x8"),
    (r"\b(?:texture[123]d|texture2d_ms|texturecube|texture\w*_array|depth\w*2d|texture_buffer)\s*<", "textures"),
    (r"\bsampler\b", "samplers"),
    (r"\bimageblock\b|\bthreadgroup_imageblock\b", "imageblocks"),
    (r"\[\[\s*stage_in\s*\]\]|\[\[\s*(?:color|user|position|vertex_id|instance_id)\b", "render-pipeline stages"),
    (r"\[\[\s*function_constant\b", "function constants"),
    (r"\b(?:visible|intersection)_function_table\b|\bacceleration_structure\b|\braytracing\b", "ray tracing and function tables"),
    (r"\[\[\s*threadgroup\s*\(", "threadgroup-memory kernel arguments ([[threadgroup(i)]])"),
    (r"\bos_log\b", "os_log"),
    (r"\bsimdgroup_async_copy\b|\bsimdgroup_event\b", "asynchronous copies (simdgroup_event)"),
)


class MslUnsupported(ValueError):
    """The source uses a Metal feature the CPU executor does not model."""


class MslSignatureError(ValueError):
    """A kernel signature the executor cannot bind (the message says which parameter)."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter as declared."""

    name: str
    type: str  # declared type text, qualifiers included ("device const float*", "constant long&")
    kind: str  # "buffer" or "attribute"
    index: int = -1  # buffer index
    attribute: str = ""  # thread-position attribute name

    @property
    def is_reference(self) -> bool:
        return self.type.rstrip().endswith("&")

    @property
    def is_const(self) -> bool:
        return bool(re.search(r"\bconstant\b|\bconst\b", self.type))

    @property
    def value_type(self) -> str:
        """The pointed-to type without address-space and cv qualifiers ("float", "long")."""
        t = re.sub(r"\b(device|constant|const|volatile|thread|threadgroup)\b", " ", self.type)
        return " ".join(t.replace("*", " ").replace("&", " ").split())


@dataclass(frozen=True)
class Kernel:
    """One ``kernel`` function (or host-named instantiation of a kernel template)."""

    name: str  # the name the library exposes (host_name for instantiations)
    callee: str  # what the trampoline calls ("add", "add<float>")
    params: tuple[Param, ...]
    line: int  # 1-based line of its declaration
    max_total_threads: int | None = None  # [[max_total_threads_per_threadgroup(N)]]
    required_threads: tuple[int, int, int] | None = None  # [[required_threads_per_threadgroup(x, y, z)]]

    @property
    def buffers(self) -> tuple[Param, ...]:
        return tuple(sorted((p for p in self.params if p.kind == "buffer"), key=lambda p: p.index))

    @property
    def nbuffers(self) -> int:
        return max((p.index for p in self.buffers), default=-1) + 1


@dataclass
class Analysis:
    kernels: dict[str, Kernel] = field(default_factory=dict)
    source: str = ""  # the rewritten source g++ compiles (same line count as the input)


def code_only(source: str) -> str:
    """``source`` with comments, string and character literals blanked (same length, same line
    breaks), so that scanning never matches inside them."""
    out = list(source)
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out[i:j] = [ch if ch == "\n" else " " for ch in source[i:j]]
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c:
                j += 2 if source[j] == "\\" else 1
            j = min(j + 1, n)
            # keep the quotes so that tokens around stay apart
            out[i + 1:j - 1] = " " * max(0, j - i - 2)
            i = j
        else:
            i += 1
    return "".join(out)


def line_of(source: str, pos: int) -> int:
    return source.count("\n", 0, pos) + 1


def check_supported(source: str) -> None:
    """Raise :class:`MslUnsupported` naming the first unsupported feature and its line."""
    code = code_only(source)
    for pattern, what in UNSUPPORTED:
        m = re.search(pattern, code)
        if m:
            line = source.splitlines()[line_of(code, m.start()) - 1].strip()
            raise MslUnsupported(f"the Metal-on-CPU executor does not support {what}: line "
                                 f"{line_of(code, m.start())}: {line}")


def _matching(code: str, start: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket closing the one at ``start``."""
    depth = 0
    for i in range(start, len(code)):
        if code[i] == open_ch:
            depth += 1
        elif code[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    raise MslSignatureError(f"unbalanced {open_ch!r} at line {line_of(code, start)}")


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([<":
            depth += 1
        elif c in ")]>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


_KERNEL = re.compile(
    r"(?P<pre>(?:\[\[[^\]]*\]\]\s*)*)"  # attributes before: [[max_total_threads...]] [[host_name(..)]]
    r"(?:\bkernel\b|\[\[\s*kernel\s*\]\])\s*(?P<post>(?:\[\[[^\]]*\]\]\s*)*)"
    r"void\s+(?P<name>[A-Za-z_]\w*)\s*(?P<targs><[^(){};]*>)?\s*\(")


def _attribute_args(attrs: str, name: str) -> list[str] | None:
    m = re.search(rf"\b{name}\s*\(([^)]*)\)", attrs)
    return [a.strip() for a in m.group(1).split(",")] if m else None


def _parse_params(text: str, kernel_name: str, line: int) -> tuple[Param, ...]:
    params: list[Param] = []
    implicit = 0
    explicit = set()
    raw = _split_top_level(text)
    for decl in raw:
        m = re.match(r"buffer\s*\(\s*(\d+)\s*\)", _attr_of(decl) or "")
        if m:
            explicit.add(int(m.group(1)))
    for decl in raw:
        attr = _attr_of(decl)
        body = re.sub(r"\[\[.*?\]\]", " ", decl).strip()
        m = re.match(r"(?P<type>.*?)(?P<name>[A-Za-z_]\w*)\s*$", body, re.S)
        if not m or not m.group("type").strip():
            raise MslSignatureError(f"kernel {kernel_name} (line {line}): cannot read parameter {decl!r}")
        ptype, pname = " ".join(m.group("type").split()), m.group("name")
        if attr is None or attr.startswith("buffer"):
            if "*" not in ptype and "&" not in ptype:
                raise MslSignatureError(
                    f"kernel {kernel_name} (line {line}): buffer parameter {pname!r} of type {ptype!r} is "
                    "neither a pointer nor a reference; Metal binds buffers only to device/constant pointers "
                    "and references")
            if attr is None:
                while implicit in explicit:
                    implicit += 1
                index = implicit
                implicit += 1
            else:
                index = int(re.match(r"buffer\s*\(\s*(\d+)\s*\)", attr).group(1))
            params.append(Param(pname, ptype, "buffer", index=index))
        else:
            key = attr.split("(")[0].strip()
            if key not in POSITION_ATTRIBUTES and key not in ZERO_ATTRIBUTES:
                raise MslUnsupported(f"kernel {kernel_name} (line {line}): parameter {pname!r} has attribute "
                                     f"[[{attr}]], which the Metal-on-CPU executor does not bind")
            params.append(Param(pname, ptype, "attribute", attribute=key))
    seen: dict[int, str] = {}
    for p in params:
        if p.kind == "buffer":
            if p.index in seen:
                raise MslSignatureError(f"kernel {kernel_name} (line {line}): parameters {seen[p.index]!r} and "
                                        f"{p.name!r} both bind buffer({p.index})")
            seen[p.index] = p.name
    return tuple(params)


def _attr_of(decl: str) -> str | None:
    m = re.search(r"\[\[\s*(.*?)\s*\]\]", decl)
    return m.group(1) if m else None


def find_kernels(source: str) -> dict[str, Kernel]:
    """The kernels ``source`` defines (and host-named template instantiations), by name."""
    code = code_only(source)
    kernels: dict[str, Kernel] = {}
    for m in _KERNEL.finditer(code):
        # attribute text from the source: host_name's string is blanked in `code`
        attrs = source[m.start("pre"):m.end("pre")] + source[m.start("post"):m.end("post")]
        open_paren = m.end() - 1
        close_paren = _matching(code, open_paren, "(", ")")
        after = code[close_paren + 1:].lstrip()
        name, targs = m.group("name"), m.group("targs") or ""
        line = line_of(code, m.start("name"))
        host = _attribute_args(attrs, "host_name")
        prefix = code[max(0, m.start() - 200):m.start()]
        is_template_definition = bool(re.search(r"template\s*<[^>]*>\s*$", prefix))
        if after.startswith(";"):  # a declaration: explicit instantiation of a kernel template
            if not host:
                continue
            kname, callee = host[0].strip().strip('"'), name + targs
            source_params = source[open_paren + 1:close_paren]
        else:
            if is_template_definition or targs:
                continue  # instantiated (and named) by host_name declarations
            kname, callee = name, name
            source_params = source[open_paren + 1:close_paren]
        params = _parse_params(_blank_comments(source_params), kname, line)
        mt = _attribute_args(attrs, "max_total_threads_per_threadgroup")
        rt = _attribute_args(attrs, "required_threads_per_threadgroup")
        kernels[kname] = Kernel(
            name=kname, callee=callee, params=params, line=line,
            max_total_threads=int(mt[0]) if mt else None,
            required_threads=tuple(int(v) for v in (rt + ["1", "1"])[:3]) if rt else None)  # type: ignore[arg-type]
    return kernels


def _blank_comments(text: str) -> str:
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


# ------------------------------------------------------------------------ rewrites
_TG_DECL = re.compile(r"\bthreadgroup\b(?P<decl>[^;(){}]*);")
_HALF_LITERAL = re.compile(r"(?<![\w.])((?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)[hH]\b")


def _rewrite_threadgroup(source: str, code: str) -> str:
    """Function-scope ``threadgroup`` variables -> shared statics poisoned per threadgroup."""
    out, last = [], 0
    depth_at = _brace_depths(code)
    for m in _TG_DECL.finditer(code):
        decl = m.group("decl")
        declared = re.sub(r"\[[^\]]*\]", "", re.sub(r"=.*", "", decl, flags=re.S))  # without sizes, initialisers
        if depth_at[m.start()] == 0 or "*" in declared or "&" in declared:
            continue  # namespace scope, or a pointer/reference: the keyword is only a qualifier
        declarators = _split_top_level(re.sub(r"=.*", "", decl, flags=re.S))
        names = []
        for i, d in enumerate(declarators):
            nm = re.match(r".*?([A-Za-z_]\w*)\s*(?:\[.*\])?\s*$", d if i else d, re.S)
            if nm:
                names.append(nm.group(1))
        if not names:
            continue
        poison = " ".join(f"::mcpu::threadgroup_var(&{n}, sizeof({n}));" for n in names)
        out.append(source[last:m.start()])
        out.append("static" + source[m.start() + len("threadgroup"):m.end()] + " " + poison)
        last = m.end()
    out.append(source[last:])
    return "".join(out)


def _brace_depths(code: str) -> list[int]:
    depths, depth = [], 0
    for c in code:
        depths.append(depth)
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
    return depths


def _rewrite_half_literals(source: str, code: str) -> str:
    out, last = [], 0
    for m in _HALF_LITERAL.finditer(code):
        out.append(source[last:m.start()])
        number = m.group(1)
        if not re.search(r"[.eE]", number):
            number += ".0"
        out.append(f"half({number}f)")
        last = m.end()
    out.append(source[last:])
    return "".join(out)


def trampoline(kernel: Kernel) -> str:
    """C++ that binds buffers and attributes for one thread and calls the kernel."""
    args = []
    for p in kernel.params:
        if p.kind == "buffer":
            if p.is_reference:
                base = p.type.rstrip()[:-1]
                args.append(f"*reinterpret_cast<{base}*>(b[{p.index}])")
            else:
                args.append(f"reinterpret_cast<{p.type}>(b[{p.index}])")
        elif p.attribute in ZERO_ATTRIBUTES:
            args.append(f"::mcpu::attr<{p.type}>(::mcpu::u3{{0, 0, 0}})")
        else:
            args.append(f"::mcpu::attr<{p.type}>(t->{POSITION_ATTRIBUTES[p.attribute]})")
    joined = ",\n      ".join(args)
    return (f'extern "C" __attribute__((visibility("default"))) void mcpu_thread_{kernel.name}'
            f"(void** b, const ::mcpu::ThreadInfo* t) {{\n  (void)b; (void)t;\n  {kernel.callee}(\n      {joined});\n}}\n")


def analyze(source: str) -> Analysis:
    """Kernels of ``source`` and the translation unit g++ compiles for it.

    Raises :class:`MslUnsupported` for features the executor does not model and
    :class:`MslSignatureError` for kernels it cannot bind.
    """
    check_supported(source)
    kernels = find_kernels(source)
    if not kernels:
        raise MslSignatureError("the source defines no kernel function (`kernel void name(...)`)")
    code = code_only(source)
    rewritten = _rewrite_threadgroup(source, code)
    rewritten = _rewrite_half_literals(rewritten, code_only(rewritten))
    unit = rewritten + "\n\n// ---- trampolines (inductor_ext Metal-on-CPU executor) ----\n"
    unit += "\n".join(trampoline(k) for k in kernels.values())
    return Analysis(kernels=kernels, source=unit)
