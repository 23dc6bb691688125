"""The CuTeDSL NVFP4 GEMM (inductor_ext/templates/cutedsl/nvfp4_gemm.py): problem/config rules,
and tier I (``-m isa``): compiled for sm_100a without a GPU, asserting on its PTX and SASS.

What the ISA tests take as evidence, and why:

- Block-scaled NVFP4 MMA: every ``tcgen05.mma`` is
  ``tcgen05.mma.cta_group::{1,2}.kind::mxf4nvf4.block_scale.block16`` -- fp4 (e2m1) A and B with
  one scale per 16 K elements (``block16`` is PTX's newer spelling of ``scale_vec::4X``; with
  e8m0 scales over 32 it would be ``block32``/``scale_vec::2X``, i.e. MXFP4), scale factors
  copied into tensor memory with ``tcgen05.cp``. ptxas turned it into ``UTCOMMA.4X``
  (``UTCOMMA.2CTA.4X`` for the 2-CTA MMA) in the cubin's SASS.
- alpha in the epilogue, traced through the PTX's def-use chains (registers, through ``mov``
  packs/unpacks): the kernel has exactly one fp32 alpha parameter (a ``.u64 .ptr .global
  .align 4`` pointer for a device alpha, a ``.f32`` value for a host one); every operand of every
  ``cvt.rn.bf16x2.f32`` (the fp32 -> bf16 convert of the output) comes from a ``mul.f32x2`` /
  ``fma.rn.f32`` whose two factors are (a) the fp32 loaded from that parameter and (b) a
  ``tcgen05.ld`` (the accumulator read from tensor memory); with a bias, the fma's addend is the
  bias widened from bf16 (``cvt.f32.bf16``). So alpha multiplies the fp32 accumulator, before
  the bias add and before rounding to bf16. A control compiled with alpha="none" has no such
  parameter, converts ``tcgen05.ld`` values directly and fails the same check -- the check can
  fail. SASS agrees: at least one ``FMUL2`` (two packed fp32 multiplies) per ``F2FP.BF16`` (one
  packed convert of two values), or two ``FFMA`` with a bias; none in the control.

M, N and K are symbolic in the compiled kernel (quack's fake tensors), so M=8 runs the same
kind of binary as M=128; what differs is the config ``configs()`` picks for it.
Compiles run in a subprocess (CuTeDSL is configured through the environment, and this suite
runs with ``TRITON_INTERPRET=1``) and are cached on disk (see the module's docstring).
"""

from __future__ import annotations

import inspect
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass

import pytest

from inductor_ext.templates.base import Tile
from inductor_ext.templates.cutedsl import nvfp4_gemm as nv

P, C = nv.NvFp4GemmProblem, nv.NvFp4GemmConfig

PREFILL = P(128, 256, 512)
DECODE = P(8, 4096, 512)
LARGE = P(4096, 4096, 4096)

# ------------------------------------------------------------------------- problem / config


def test_refuse_problem_and_reasons():
    assert nv.refuse_problem(PREFILL) is None and nv.refuse_problem(DECODE) is None
    assert "K=48" in nv.refuse_problem(P(128, 256, 48))
    assert "N=12" in nv.refuse_problem(P(128, 12, 512))
    assert "out_dtype" in nv.refuse_problem(P(128, 256, 512, out_dtype="float16"))
    assert "alpha" in nv.refuse_problem(P(128, 256, 512, alpha="host"))
    assert "empty" in nv.refuse_problem(P(0, 256, 512))
    with pytest.raises(ValueError, match="K=48"):
        nv.compile_for_sm100(P(128, 256, 48))


def test_configs_follow_quack_rules():
    for config in nv.ALL_CONFIGS:
        assert nv.refuse_config(PREFILL, config) is None, config
    assert nv.configs(DECODE, "sm_100a")[0] == C(128, 64, 1, 1)
    assert nv.configs(PREFILL, "sm_100a")[0] == C(128, 256, 1, 1)
    assert nv.configs(LARGE, "sm_100a")[0] == C(256, 256, 2, 1)
    assert all(c.tile_n <= 128 for c in nv.configs(P(8, 64, 512), "sm_100a"))
    assert "multiple of 64" in nv.refuse_config(PREFILL, C(128, 96))
    assert "even cluster_m" in nv.refuse_config(PREFILL, C(256, 256, 1, 1))
    with pytest.raises(ValueError):
        nv.configs(PREFILL, "sm_90a")


def test_config_from_tile():
    assert nv.config_from_tile(Tile(256, 128, 256)) == C(256, 128, 2, 1)
    assert nv.config_from_tile(Tile(128, 64, 256)) == C(128, 64, 1, 1)
    assert nv.config_from_tile(Tile(64, 64, 64)) is None
    assert nv.config_from_tile(Tile(128, 192, 256)) is None  # valid for quack, not checked here
    assert nv.config_from_tile(Tile(128, 128, 256, split_k=2)) is None


def test_render_is_a_launcher_module():
    ks = nv.render(DECODE, C(128, 64))
    assert ks.template == nv.NAME and ks.config["tile_n"] == 64
    compile(ks.source, ks.name, "exec")
    assert f"def {ks.name}(" in ks.source and "NvFp4GemmConfig(tile_m=128, tile_n=64" in ks.source


def test_compile_environment():
    env = nv._worker_env("/tmp/x")
    assert "TRITON_INTERPRET" not in env
    assert env["CUTE_DSL_ARCH"] == "sm_100a" and env["CUTE_DSL_KEEP"] == "ptx,cubin,ir"


# ----------------------------------------------------------------------------- PTX analysis


@dataclass
class Instr:
    op: str
    operands: list[str]
    text: str


def _split_operands(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + ([cur.strip()] if cur.strip() else [])


_REG = re.compile(r"%\w+")


class Ptx:
    """One kernel's parameters and instructions, with register definitions."""

    def __init__(self, text: str):
        text = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
        entries = re.findall(r"\.entry\s+(\w+)\s*\((.*?)\)", text, re.S)
        assert len(entries) == 1, f"expected one kernel entry, found {len(entries)}"
        self.name, params = entries[0]
        self.params = [(d.split()[-1], " ".join(d.split()[:-1]))
                       for d in (p.strip() for p in params.split(",")) if d]
        self.instrs: list[Instr] = []
        self.defs: dict[str, list[Instr]] = {}
        for raw in text.splitlines():
            line = raw.strip()
            if not line.endswith(";") or line.startswith((".", "{", "}")):
                continue
            line = re.sub(r"^@!?%\w+\s+", "", line[:-1]).strip()
            op, _, rest = line.partition(" ")
            instr = Instr(op, _split_operands(rest), line)
            self.instrs.append(instr)
            if instr.operands and re.fullmatch(r"%\w+|\{[%\w,\s]+\}", instr.operands[0]):
                for reg in _REG.findall(instr.operands[0]):
                    self.defs.setdefault(reg, []).append(instr)

    def producers(self, reg: str) -> list[Instr]:
        """The non-``mov``/``cvta`` instructions whose results reach ``reg`` (through moves)."""
        out, seen, stack = [], set(), [reg]
        while stack:
            r = stack.pop()
            if r in seen:
                continue
            seen.add(r)
            for instr in self.defs.get(r, []):
                if instr.op.startswith(("mov.", "cvta.")):
                    stack += [x for operand in instr.operands[1:] for x in _REG.findall(operand)]
                elif instr not in out:
                    out.append(instr)
        return out

    def count(self, prefix: str) -> int:
        return sum(1 for i in self.instrs if i.op.startswith(prefix))


_MULTIPLY = ("mul.f32x2", "mul.rn.f32x2", "mul.f32", "mul.rn.f32", "fma.rn.f32", "fma.rn.f32x2")


def assert_alpha_epilogue(ptx_text: str, alpha: str, bias: bool) -> dict[str, int]:
    """Assert alpha (``alpha``="tensor" or "scalar") scales the fp32 accumulator before the
    bf16 convert (see the module docstring); returns counts for the report."""
    ptx = Ptx(ptx_text)
    if alpha == "tensor":
        alpha_params = [n for n, decl in ptx.params if ".ptr" in decl and ".global" in decl]
    else:
        alpha_params = [n for n, decl in ptx.params if decl.split()[:2] == [".param", ".f32"]]
    assert len(alpha_params) == 1, f"expected one fp32 alpha parameter, got {alpha_params}: {ptx.params}"
    param = alpha_params[0]
    if alpha == "tensor":
        assert ".align 4" in dict(ptx.params)[param], "the alpha pointer is not fp32-aligned"

    def is_alpha(instr: Instr) -> bool:
        if alpha == "scalar":
            return instr.op.startswith("ld.param") and instr.operands[1] == f"[{param}]"
        if not instr.op.startswith("ld.global") or instr.op.endswith(("b64", "f64", "v2", "v4")):
            return False
        address = _REG.findall(instr.operands[1])
        return bool(address) and all(
            p.op.startswith("ld.param") and p.operands[1] == f"[{param}]"
            for reg in address for p in ptx.producers(reg))

    def kind(reg: str) -> str:
        prods = ptx.producers(reg)
        if prods and all(is_alpha(p) for p in prods):
            return "alpha"
        if prods and all(p.op.startswith("tcgen05.ld") for p in prods):
            return "acc"
        if prods and all(p.op == "cvt.f32.bf16" for p in prods):
            return "bias"
        return "other: " + ", ".join(sorted({p.op for p in prods}))

    converts = [i for i in ptx.instrs if i.op == "cvt.rn.bf16x2.f32"]
    assert converts, "no fp32 -> bf16 convert in the kernel"
    multiplies = set()
    for cvt in converts:
        for src in cvt.operands[1:]:
            prods = ptx.producers(src)
            assert prods, f"{src} of `{cvt.text}` has no producer"
            for prod in prods:
                assert prod.op in _MULTIPLY, (
                    f"`{cvt.text}` converts the result of `{prod.text}`, not of an alpha multiply")
                factors = sorted(kind(r) for r in prod.operands[1:3])
                assert factors == ["acc", "alpha"], (
                    f"`{prod.text}` (feeding `{cvt.text}`) multiplies {factors}, not alpha x accumulator")
                if bias:
                    assert prod.op.startswith("fma") and kind(prod.operands[3]) == "bias", (
                        f"`{prod.text}` does not add the bf16 bias")
                multiplies.add(id(prod))
    return {"converts": len(converts), "alpha_multiplies": len(multiplies)}


def sass_counts(sass: str) -> Counter:
    ops = re.findall(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass, re.M)
    return Counter(op.split(".")[0] if not op.startswith("F2FP") else op.rsplit(".", 2)[0] for op in ops)


# --------------------------------------------------------------------------------- tier I

KERNELS = {
    # name: (problem, config)
    "prefill": (PREFILL, nv.configs(PREFILL, "sm_100a")[0]),
    "decode_m8": (DECODE, nv.configs(DECODE, "sm_100a")[0]),
    "large_2cta": (LARGE, nv.configs(LARGE, "sm_100a")[0]),
    "alpha_scalar": (P(128, 256, 512, alpha="scalar"), nv.configs(PREFILL, "sm_100a")[0]),
    "alpha_bias": (P(128, 256, 512, bias=True), nv.configs(PREFILL, "sm_100a")[0]),
    "control_no_alpha": (P(128, 256, 512, alpha="none"), nv.configs(PREFILL, "sm_100a")[0]),
}
# Every other candidate configs() can return: a template claims only what passes tier I.
KERNELS.update({f"config_{c.name()}": (PREFILL, c) for c in nv.ALL_CONFIGS
                if c not in {config for _, config in KERNELS.values()}})
ALPHA_KERNELS = [name for name, (problem, _) in KERNELS.items() if problem.alpha != "none"]


@pytest.fixture(scope="module")
def compiled(isa_cache) -> dict[str, dict[str, str]]:
    jobs = list(KERNELS.values())
    try:
        results = nv.compile_many_for_sm100(jobs, cache=isa_cache)
    except nv.CuteDslCompileError as e:
        pytest.fail(f"CuTeDSL could not compile the NVFP4 GEMM for sm_100a: {e}")
    return dict(zip(KERNELS, results))


@pytest.mark.isa
@pytest.mark.parametrize("name", list(KERNELS))
def test_block_scaled_nvfp4_mma(compiled, name):
    asm = compiled[name]
    problem, config = KERNELS[name]
    ptx = Ptx(asm["ptx"])
    assert re.search(r"^\.target sm_100a\b", asm["ptx"], re.M)
    cta_group = 2 if config.tile_m == 256 and config.cluster_m % 2 == 0 else 1
    expected = f"tcgen05.mma.cta_group::{cta_group}.kind::mxf4nvf4.block_scale.block16"
    mmas = [i.op for i in ptx.instrs if i.op.startswith("tcgen05.mma")]
    assert mmas and all(op.startswith(expected) for op in mmas), Counter(mmas)
    assert ptx.count("tcgen05.cp.") > 0, "scale factors are not copied to tensor memory"
    meta = json.loads(asm["metadata"])
    assert meta["config"] == asdict(config) and meta["cubin_bytes"] > 0
    assert "sass" in asm, meta.get("sass_missing")
    sass = sass_counts(asm["sass"])
    utc = "UTCOMMA.2CTA.4X" if cta_group == 2 else "UTCOMMA.4X"
    assert re.search(rf"\b{re.escape(utc)}\b", asm["sass"]), [k for k in sass if k.startswith("UTC")]
    assert sass["UTCOMMA"] == len(mmas)


@pytest.mark.isa
@pytest.mark.parametrize("name", ALPHA_KERNELS)
def test_alpha_scales_the_fp32_accumulator_in_the_epilogue(compiled, name):
    asm = compiled[name]
    problem, _ = KERNELS[name]
    counts = assert_alpha_epilogue(asm["ptx"], problem.alpha, problem.bias)
    assert counts["alpha_multiplies"] > 0
    sass = sass_counts(asm["sass"])
    if problem.bias:
        assert sass["FFMA"] >= 2 * sass["F2FP.BF16"] > 0, sass
    else:
        assert sass["FMUL2"] >= sass["F2FP.BF16"] > 0, sass


@pytest.mark.isa
def test_control_without_alpha_fails_the_check(compiled):
    asm = compiled["control_no_alpha"]
    ptx = Ptx(asm["ptx"])
    assert not [n for n, decl in ptx.params if ".ptr" in decl or ".f32" in decl.split()[:2]]
    for cvt in (i for i in ptx.instrs if i.op == "cvt.rn.bf16x2.f32"):
        for src in cvt.operands[1:]:
            assert all(p.op.startswith("tcgen05.ld") for p in ptx.producers(src)), cvt.text
    with pytest.raises(AssertionError, match="alpha parameter"):
        assert_alpha_epilogue(asm["ptx"], "tensor", False)
    sass = sass_counts(asm["sass"])
    assert sass["FMUL2"] == 0 and sass["FFMA"] == 0 and sass["F2FP.BF16"] > 0, sass
    # Same config, alpha on: the only new kernel parameter is alpha.
    assert len(Ptx(compiled["prefill"]["ptx"]).params) == len(ptx.params) + 1


@pytest.mark.isa
def test_alpha_check_catches_an_unscaled_convert(compiled):
    # One alpha multiply turned into a plain copy of the accumulator: the check must see it.
    ptx, n = re.subn(r"mul\.f32x2\s+(%\w+),\s*%\w+,\s*(%\w+);", r"mov.b64 \1, \2;",
                     compiled["prefill"]["ptx"], count=1)
    assert n == 1
    with pytest.raises(AssertionError, match="not of an alpha multiply"):
        assert_alpha_epilogue(ptx, "tensor", False)


@pytest.mark.isa
def test_cache_returns_the_same_texts(compiled, isa_cache):
    nv._memo.clear()  # force the on-disk cache
    again = nv.compile_for_sm100(*KERNELS["decode_m8"], cache=isa_cache)
    # The entry may be another compile's of the same kernel (another pytest worker's, or one for
    # another M or K: the key holds only what shapes the code): the same texts, its own record
    # of how it was compiled.
    assert _kernel_texts(again) == _kernel_texts(compiled["decode_m8"])


_COMPILE_RECORD = ("compile_s", "worker_import_s", "sass_tool", "problem")


def _kernel_texts(asm):
    meta = {k: v for k, v in json.loads(asm["metadata"]).items() if k not in _COMPILE_RECORD}
    return {**asm, "metadata": meta}


@pytest.mark.isa
@pytest.mark.parametrize("use_pdl", [False, True])
def test_run_launches_the_verified_kernel(monkeypatch, use_pdl):
    """``run()`` goes through quack's generic host path; on CPU tensors, with quack told the GPU
    is an sm_100, it reaches quack's compile with exactly the arguments the ISA tests compiled
    with, ``use_pdl`` included (set on the GEMM object, part of quack's jit-cache key)."""
    torch = pytest.importorskip("torch")
    host = pytest.importorskip("quack.gemm_runtime.host")
    from quack.cute_dsl_utils import _get_device_capacity_cached

    class Reached(Exception):
        pass

    compile_gemm = host._compile_gemm_epi
    seen = {}

    def record(*args, **kwargs):
        seen.update(inspect.signature(compile_gemm.__wrapped__).bind(*args, **kwargs).arguments)
        raise Reached

    monkeypatch.setenv("QUACK_ARCH", "100")
    monkeypatch.setattr(host, "_compile_gemm_epi", record)
    monkeypatch.setattr(nv, "_plans", {})
    _get_device_capacity_cached.cache_clear()
    try:
        m, n, k = 8, 256, 512
        config = C(128, 64)
        a = torch.empty((m, k // 2), dtype=torch.float4_e2m1fn_x2)
        b = torch.empty((n, k // 2), dtype=torch.float4_e2m1fn_x2)
        sa = torch.empty(128 * (k // 16), dtype=torch.float8_e4m3fn)  # M padded to 128 rows
        sb = torch.empty(256 * (k // 16), dtype=torch.float8_e4m3fn)
        with pytest.raises(Reached):
            nv.run(a, b, sa, sb, config, alpha=torch.ones(1), bias=torch.zeros(n, dtype=torch.bfloat16),
                   use_pdl=use_pdl)
    finally:
        _get_device_capacity_cached.cache_clear()
    defaults = {p.name: p.default for p in inspect.signature(compile_gemm.__wrapped__).parameters.values()}
    expected = nv._quack_compile_kwargs(P(m, n, k, alpha="tensor", bias=True, use_pdl=use_pdl), config)
    assert {**defaults, **seen} == expected
    assert seen["post_init_attrs"] == (("use_pdl", use_pdl),)
