"""Programmatic dependent launch (PDL) in the Triton GEMM templates, and the rule that turns it on.

The three templates (templates/triton/gemm.py, nvfp4_gemm.py, nvfp4_dequant_gemm.py) take
``use_pdl`` on their Problem; it becomes the ``USE_PDL`` constexpr of the shared body, which then
calls ``tl.extra.cuda.gdc_wait()`` right before the first global load (after the index and pointer
setup) and ``tl.extra.cuda.gdc_launch_dependents()`` right after the main K loop.

- unit: ``inductor_ext.autotune.pdl_policy.use_pdl`` (off / auto / force).
- G: what render(), constexprs() and inductor_source() carry, and where the calls sit in the text.
- I ISA (``-m isa``): compiled for sm_90a / sm_100a with ``launch_pdl=True`` (a Triton compile
  option, carried in ``KernelSource.launch``), the order of ``griddepcontrol`` in the PTX and in
  the TTIR; and a standalone pointwise consumer (inductor_ext/kernels/pdl_consumer.py).
- C interpreter (``-m interp``): the same numbers with PDL on and off, a GEMM -> consumer chain.
"""

from __future__ import annotations

import os
import sys

if "triton" not in sys.modules:  # must precede every import of triton (see test_gemm_template.py)
    os.environ["TRITON_INTERPRET"] = "1"

import json  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from inductor_ext.autotune import pdl_policy  # noqa: E402
from inductor_ext.kernels.nvfp4 import quantize_nvfp4  # noqa: E402
from inductor_ext.templates.base import KernelSource  # noqa: E402
from inductor_ext.templates.triton import gemm  # noqa: E402
from inductor_ext.templates.triton import nvfp4_dequant_gemm as dq  # noqa: E402
from inductor_ext.templates.triton import nvfp4_gemm as fp4  # noqa: E402
from inductor_ext.testing import isa  # noqa: E402
from _script_runner import interpret_env, run_json_script  # noqa: E402

MODULES = {"gemm": gemm, "fp4": fp4, "dq": dq}


def _problem(family: str, m: int, n: int, k: int, **kwargs: object) -> object:
    cls = {"gemm": gemm.GemmProblem, "fp4": fp4.Nvfp4GemmProblem, "dq": dq.Nvfp4DequantGemmProblem}[family]
    if family == "gemm":
        kwargs.setdefault("dtype", "bfloat16")
    return cls(m, n, k, **kwargs)


# ------------------------------------------------------------------------ the auto rule


@pytest.mark.parametrize("m", range(1, 33))
def test_auto_on_for_decode_m_up_to_32(m: int) -> None:
    assert pdl_policy.use_pdl("auto", m, 4096, 4096, True) is True


@pytest.mark.parametrize("m", range(33, 129))
def test_auto_off_for_m_33_to_128(m: int) -> None:
    # PyTorch measured forced PDL regressing in a batch 33..64 band; ours stays off up to 128 and beyond.
    assert pdl_policy.use_pdl("auto", m, 4096, 4096, True) is False


@pytest.mark.parametrize("m", [129, 256, 4096])
def test_auto_off_for_large_m(m: int) -> None:
    assert pdl_policy.use_pdl("auto", m, 4096, 4096, True) is False


@pytest.mark.parametrize("m", [1, 16, 32, 64, 128])
def test_auto_off_when_consumer_does_not_read_output_directly(m: int) -> None:
    assert pdl_policy.use_pdl("auto", m, 4096, 4096, False) is False


@pytest.mark.parametrize("m,n,k", [(1, 16, 16), (32, 4096, 4096), (33, 4096, 4096), (128, 512, 7168),
                                   (8192, 8192, 8192)])
@pytest.mark.parametrize("direct", [True, False])
def test_force_always_on_off_always_off(m: int, n: int, k: int, direct: bool) -> None:
    assert pdl_policy.use_pdl("force", m, n, k, direct) is True
    assert pdl_policy.use_pdl("off", m, n, k, direct) is False


def test_bad_mode_and_sizes_raise() -> None:
    with pytest.raises(ValueError, match="'on' is not one of"):
        pdl_policy.use_pdl("on", 1, 16, 16, True)
    with pytest.raises(ValueError, match="M=0"):
        pdl_policy.use_pdl("auto", 0, 16, 16, True)
    assert pdl_policy.AUTO_MAX_M == 32 and pdl_policy.MODES == ("off", "auto", "force")


# ------------------------------------------------------------------ tier G: the source text

# (family, problem args, a target the family claims) for the render-level checks
RENDER_CASES = {
    "gemm": ((16, 4096, 4096), "sm_90a"),
    "fp4": ((16, 4096, 4096), "sm_100a"),
    "dq": ((16, 4096, 4096), "sm_90a"),
}


@pytest.mark.parametrize("family", list(MODULES))
def test_use_pdl_is_a_problem_field_carried_by_render_and_constexprs(family: str) -> None:
    module = MODULES[family]
    shape, target = RENDER_CASES[family]
    off, on = _problem(family, *shape), _problem(family, *shape, use_pdl=True)
    assert off.use_pdl is False  # the default
    config = module.configs(off, target)[0]
    assert module.configs(on, target)[0] == config  # PDL does not change the candidates
    ks_off, ks_on = module.render(off, config, target), module.render(on, config, target)
    assert ks_off.constexprs["USE_PDL"] is False and ks_on.constexprs["USE_PDL"] is True
    assert ks_on.signature["USE_PDL"] == "constexpr"
    assert "launch_pdl" not in ks_off.launch and ks_on.launch["launch_pdl"] is True
    assert ks_on.name.replace("_pdl", "") == ks_off.name and "_pdl" in ks_on.name
    # one module text for both (but the kernel's name): only the constexpr differs
    assert ks_on.source.replace(ks_on.name, ks_off.name) == ks_off.source and "USE_PDL: tl.constexpr" in ks_on.source
    constexprs = module.constexprs(on, config, target) if module is gemm else module.constexprs(on, config)
    assert constexprs["USE_PDL"] is True
    # the shared body carries the calls into both frames
    assert module.BODY in ks_on.source and module.BODY in module.inductor_source()


def _guarded_call(body: str, call: str) -> int:
    """Where ``call`` sits in ``body``, asserting it is there once, under ``if USE_PDL:`` (comments
    between them allowed)."""
    assert body.count(call) == 1, f"{call} {body.count(call)} times"
    at = body.index(call)
    before = [line for line in body[:at].splitlines() if line.strip() and not line.strip().startswith("#")]
    assert before[-1] == "    if USE_PDL:", before[-1]
    return at


# each kernel body a family renders: triton.gemm's swap-AB decode configs have their own
BODIES = {**{family: (module, "BODY") for family, module in MODULES.items()}, "gemm_swap_ab": (gemm, "BODY_SWAP")}


@pytest.mark.parametrize("family", list(BODIES))
def test_gdc_calls_sit_between_setup_loads_and_epilogue(family: str) -> None:
    module, body_name = BODIES[family]
    body = getattr(module, body_name)
    wait = _guarded_call(body, "tl.extra.cuda.gdc_wait()")
    launch = _guarded_call(body, "tl.extra.cuda.gdc_launch_dependents()")
    loop = body.index("    for k_tile in range(")
    # every pointer is set up before the wait, the wait is the last thing before the K loop ...
    pointer_setup = [m.start() for m in re.finditer(r"^    \w*ptrs = ", body, re.M)]
    assert pointer_setup and max(pointer_setup) < wait < loop
    assert not body[wait:loop].replace("tl.extra.cuda.gdc_wait()", "").strip()
    # ... whose loads are the first global loads
    assert "tl.load" not in body[:wait] and body.index("tl.load(") > loop
    # the launch comes right after the loop: after the last dot and the loop's pointer bumps,
    # before the epilogue (its indices, and in the frames alpha, bias, activation and the store)
    last_dot = max(m.start() for m in re.finditer(r"tl\.dot(_scaled)?\(", body))
    assert loop < last_dot < launch < body.index("idx_m = rm[:, None]")
    between = [line for line in body[last_dot:launch].splitlines()[1:]
               if line.strip() and not line.strip().startswith("#")]
    assert between[-1] == "    if USE_PDL:" and all(line.startswith("        ") for line in between[:-1]), between
    # neither frame loads anything before the body (the Inductor frames load ALPHA after it)
    inductor = module.inductor_source()
    frame_end = min(i for i in (inductor.find(body), inductor.find("{% if SWAP_AB %}")) if i >= 0)
    assert "tl.load" not in inductor[:frame_end]
    assert "tl.load" not in module._STANDALONE[:module._STANDALONE.index("{body}")]


def test_gemm_render_refuses_pdl_without_griddepcontrol() -> None:
    problem = gemm.GemmProblem(16, 256, 256, "float16", use_pdl=True)
    for target in ("gfx950", "gfx1250"):
        with pytest.raises(ValueError, match=f"use_pdl needs griddepcontrol .*{target}"):
            gemm.render(problem, gemm.configs(problem, target)[0], target)
    gemm.render(problem, gemm.configs(problem, "cpu")[0], "cpu")  # the interpreter: gdc calls are no-ops


# --------------------------------------------------------------------------- tier I ISA

_CONSUMER_FILE = Path(__file__).parent.parent / "inductor_ext" / "kernels" / "pdl_consumer.py"


def _consumer(use_pdl: bool) -> KernelSource:
    launch = {"num_warps": 4, **({"launch_pdl": True} if use_pdl else {})}
    return KernelSource(name="pdl_consumer_kernel", source=_CONSUMER_FILE.read_text(), template="test.pdl_consumer",
                        config={}, constexprs={"BLOCK": 1024, "USE_PDL": use_pdl},
                        signature={"X": "*bf16", "OUT": "*bf16", "n": "i32", "BLOCK": "constexpr",
                                   "USE_PDL": "constexpr"},
                        launch=launch)


# (family, target): decode shapes (what pdl_policy's "auto" turns PDL on for), first config.
ISA_CASES = [("gemm", "sm_90a"), ("gemm", "sm_100a"), ("fp4", "sm_100a"), ("dq", "sm_90a")]
ISA_SHAPE = (16, 4096, 4096)


def _template_job(family: str, target: str, use_pdl: bool) -> tuple[KernelSource, str, dict[str, object]]:
    module = MODULES[family]
    p = _problem(family, *ISA_SHAPE, use_pdl=use_pdl)
    ks = module.render(p, module.configs(p, target)[0], target)
    if family == "gemm":
        values = {"M": p.m, "N": p.n, "K": p.k, "stride_am": p.k, "stride_ak": 1, "stride_bk": p.n,
                  "stride_bn": 1, "stride_cm": p.n, "stride_cn": 1, "stride_bias": 0}
    else:
        a_cols = p.k if family == "dq" else p.k // 2
        values = {"M": p.m, "N": p.n, "K": p.k, "stride_am": a_cols, "stride_ak": 1, "stride_bn": p.k // 2,
                  "stride_bk": 1, "stride_asm": p.k // 16, "stride_ask": 1, "stride_bsn": p.k // 16,
                  "stride_bsk": 1, "stride_cm": p.n, "stride_cn": 1, "stride_bias": 0}
    # no options: launch_pdl comes from ks.launch when use_pdl; without USE_PDL it is set here, to
    # show that the compile option alone emits no griddepcontrol (it only marks the launch)
    options = {} if use_pdl else {"launch_pdl": True}
    return ks, target, {"hints": isa.launch_hints(ks, values), "options": options}


def _jobs() -> dict[tuple[str, str, bool], tuple[KernelSource, str, dict[str, object]]]:
    jobs = {}
    for family, target in ISA_CASES:
        for use_pdl in (True, False):
            jobs[family, target, use_pdl] = _template_job(family, target, use_pdl)
    for target in ("sm_90a", "sm_100a"):
        for use_pdl in (True, False):
            ks = _consumer(use_pdl)
            options = {} if use_pdl else {"launch_pdl": True}
            jobs["consumer", target, use_pdl] = (ks, target, {"hints": isa.launch_hints(ks, {"n": 4096 * 16}),
                                                              "options": options})
    return jobs


@pytest.fixture(scope="module")
def pdl_asm(isa_cache: str | None):
    """Compile every case once, in parallel where possible; a test gets its own error."""
    jobs = _jobs()
    try:
        isa.compile_many(list(jobs.values()), cache=isa_cache)
    except isa.IsaCompileError:
        pass  # get() raises it again in the test that needs the failed kernel

    def get(family: str, target: str, use_pdl: bool) -> dict[str, str]:
        ks, target, kwargs = jobs[family, target, use_pdl]
        return isa.compile_for_target(ks, target, cache=isa_cache, **kwargs)

    return get


_WAIT, _LAUNCH = "griddepcontrol.wait", "griddepcontrol.launch_dependents"
_NOT_GLOBAL = {"param", "shared", "local", "const"}
# integer index / address arithmetic (what the program id and pointer setup compile to)
_INDEX_MATH = re.compile(r"^(add|sub|mul|mad|shl|shr|div|rem|min|max|and|or|bfe)\.(lo\.|hi\.|wide\.)?[subr](32|64)$")
_MMA = re.compile(r"^(wgmma\.mma_async|tcgen05\.mma)\b")


def _touches_global(mnemonic: str) -> bool:
    """Whether a PTX instruction may read or write global memory: any ld / st / atom / red /
    prefetch that does not name the param, shared, local or const space (generic addresses count),
    and every cp.async* / cp.reduce.async* copy (cp.async.cg..., cp.async.bulk.tensor = TMA)."""
    parts = mnemonic.split(".")
    if mnemonic.startswith(("cp.async.", "cp.reduce.async.")):
        return not re.search(r"(commit_group|wait_group|wait_all|mbarrier)", mnemonic)
    if parts[0] in ("ld", "st", "atom", "red", "prefetch", "prefetchu", "ldu"):
        return not any(p.split("::")[0] in _NOT_GLOBAL for p in parts[1:])
    return False


def _ptx_program(asm: dict[str, str], target: str) -> tuple[list[str], list[str]]:
    """The PTX instruction lines in program order (comments, labels, directives dropped) and
    their mnemonics without predicate guards."""
    text = "\n".join(line.split("//", 1)[0] for line in asm["ptx"].splitlines())
    lines = isa._instruction_lines(text, "ptx")
    return lines, [isa._mnemonic(line) for line in lines]


def _assert_pdl_order(asm: dict[str, str], target: str, *, has_mma: bool, min_index_math: int) -> dict[str, int]:
    """The claims, on the PTX (the order ptxas gets) and on the TTIR (the order the source says)."""
    lines, mnemonics = _ptx_program(asm, target)
    counts = isa.assert_has_instructions(asm, target, [re.escape(_WAIT), re.escape(_LAUNCH)])
    assert counts == {re.escape(_WAIT): 1, re.escape(_LAUNCH): 1}, counts
    wait, launch = mnemonics.index(_WAIT), mnemonics.index(_LAUNCH)
    # 1. the wait is not hoisted to the kernel entry: index math comes first. (Only part of it:
    # the wait is an `asm sideeffect` without operands, which orders it against memory accesses
    # but not against register arithmetic, so LLVM schedules the rest of the index math, even
    # the %ctaid.x read, on either side. The source order is checked on the TTIR below.)
    index_math = [m for m in mnemonics[:wait] if _INDEX_MATH.match(m)]
    assert len(index_math) >= min_index_math, f"only {index_math} before {_WAIT}"
    # 2. no global memory access before the wait; the first one (a load) comes after it
    early = [line for line, m in zip(lines[:wait], mnemonics[:wait]) if _touches_global(m)]
    assert not early, f"global accesses before {_WAIT}: {early[:4]}"
    first_global = next(i for i, m in enumerate(mnemonics) if _touches_global(m))
    assert first_global > wait and not mnemonics[first_global].startswith(("st.", "red.", "atom.")), \
        lines[first_global]
    # 3. the launch comes after the main loop (its last MMA) and before the epilogue's stores
    stores = [i for i, m in enumerate(mnemonics) if _touches_global(m) and m.startswith("st.")]
    assert stores and wait < launch < stores[0]
    if has_mma:
        mmas = [i for i, m in enumerate(mnemonics) if _MMA.match(m)]
        assert mmas and wait < mmas[0] and mmas[-1] < launch, (wait, mmas[:1], mmas[-1:], launch)
    # 4. TTIR keeps source order: all pointer setup before the wait, every load after it
    ttir = asm["ttir"].splitlines()
    t_wait = next(i for i, line in enumerate(ttir) if "tt.grid_dependency_wait" in line)
    t_launch = next(i for i, line in enumerate(ttir) if "tt.grid_dependency_launch_dependents" in line)
    loads = [i for i, line in enumerate(ttir) if re.search(r"= tt\.(descriptor_)?load\b", line)]
    assert loads and t_wait < min(loads)
    assert any("tt.get_program_id" in line for line in ttir[:t_wait])
    if has_mma:  # templates: the K loop's pointers, then the wait, then the loop
        t_loop = next(i for i, line in enumerate(ttir) if "scf.for" in line)
        setup = [i for i, line in enumerate(ttir[:t_loop]) if "tt.addptr" in line]
        assert setup and max(setup) < t_wait < t_loop
        dots = [i for i, line in enumerate(ttir) if re.search(r"tt\.dot(_scaled)?\b", line)]
        stores_ir = [i for i, line in enumerate(ttir) if "tt.store" in line]
        assert max(dots) < t_launch < min(stores_ir)
    return {"wait": wait, "first_global": first_global, "launch": launch, "first_store": stores[0],
            "instructions": len(mnemonics)}


@pytest.mark.isa
@pytest.mark.parametrize("family,target", ISA_CASES)
def test_isa_template_pdl_order(pdl_asm, family: str, target: str) -> None:
    asm = pdl_asm(family, target, True)
    assert json.loads(asm["metadata"])["launch_pdl"] is True  # the launch carries the PDL attribute
    isa.assert_uses_mma(asm, target)  # still the tensor-core kernel the template claims
    # seen with Triton 3.9: 12 (gemm sm_90a) to 20 (dq) integer instructions before the wait
    _assert_pdl_order(asm, target, has_mma=True, min_index_math=8)


@pytest.mark.isa
@pytest.mark.parametrize("family,target", ISA_CASES + [("consumer", "sm_90a"), ("consumer", "sm_100a")])
def test_isa_no_griddepcontrol_without_use_pdl(pdl_asm, family: str, target: str) -> None:
    asm = pdl_asm(family, target, False)
    # compiled with launch_pdl=True all the same: the option marks the launch and emits nothing
    assert json.loads(asm["metadata"])["launch_pdl"] is True
    assert "griddepcontrol" not in asm["ptx"]
    assert "grid_dependency" not in asm["ttir"]


@pytest.mark.isa
@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
def test_isa_consumer_waits_before_loading_producer_output(pdl_asm, target: str) -> None:
    asm = pdl_asm("consumer", target, True)
    assert json.loads(asm["metadata"])["launch_pdl"] is True
    order = _assert_pdl_order(asm, target, has_mma=False, min_index_math=2)  # seen: 4
    _, mnemonics = _ptx_program(asm, target)
    assert mnemonics[order["first_global"]].startswith("ld.global")  # X, the producer's output


# ---------------------------------------------------------------------- tier C interpreter


@pytest.fixture
def gdc_calls():
    """The interpreter fixes, with the gdc no-ops counted (so a test sees the USE_PDL branch run)."""
    import triton.runtime.interpreter as interp

    from inductor_ext.runtime.triton_interp import interpreter_fixes

    builder = interp.InterpreterBuilder
    methods = {"wait": "create_grid_dependency_wait", "launch": "create_grid_dependency_launch_dependents"}
    calls = {"wait": 0, "launch": 0}
    with interpreter_fixes() as fixes:
        assert {"gdc_noop", "bf16_dot", "nvfp4_dot_scaled", "bf16_rounding"} <= set(fixes), fixes
        originals = {key: builder.__dict__[method] for key, method in methods.items()}

        def counter(key: str):
            def counted(self, *args, **kwargs):
                calls[key] += 1
                return originals[key](self, *args, **kwargs)

            return counted

        try:
            for key, method in methods.items():
                setattr(builder, method, counter(key))
            yield calls
        finally:  # put the fix's own no-ops back, for interpreter_fixes() to remove on exit
            for key, method in methods.items():
                setattr(builder, method, originals[key])


def _run_both(run, programs: int, calls: dict[str, int]) -> tuple[torch.Tensor, torch.Tensor]:
    calls.update(wait=0, launch=0)
    off = run(False)
    assert calls == {"wait": 0, "launch": 0}
    on = run(True)
    assert calls == {"wait": programs, "launch": programs}, calls  # once per program, each
    return off, on


def _programs(m: int, n: int, config: object) -> int:
    return -(-m // config.block_m) * -(-n // config.block_n)


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("dtype,m,n,k,bias", [(torch.float32, 37, 45, 70, False), (torch.bfloat16, 17, 40, 96, True),
                                              (torch.float16, 1, 33, 64, False)], ids=["fp32", "bf16_bias", "fp16_m1"])
def test_interp_gemm_same_numbers_with_pdl(gdc_calls, dtype: torch.dtype, m: int, n: int, k: int, bias: bool) -> None:
    g = torch.Generator().manual_seed(m * 31 + n)
    a, b = torch.randn(m, k, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype)
    bias_t = torch.randn(n, generator=g).to(dtype) if bias else None
    config = gemm.configs(gemm.GemmProblem(m, n, k, str(dtype)[6:]), "cpu")[0]
    off, on = _run_both(lambda pdl: gemm.run(a, b, config, bias=bias_t, alpha=0.5, beta=2.0, use_pdl=pdl),
                        _programs(m, n, config), gdc_calls)
    assert torch.equal(on, off)
    ref = a.float() @ b.float() * (0.5 if bias else 1.0) + (2.0 * bias_t.float() if bias else 0.0)
    torch.testing.assert_close(on.float(), ref, rtol=2.0**-7, atol=1e-3 * ref.abs().max().item())


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("case", ["plain", "swap_blocked_bias_silu"])
def test_interp_nvfp4_gemm_same_numbers_with_pdl(gdc_calls, case: str) -> None:
    m, n, k = 17, 40, 160
    g = torch.Generator().manual_seed(7)
    a, b = quantize_nvfp4(torch.randn(m, k, generator=g)), quantize_nvfp4(torch.randn(n, k, generator=g))
    kwargs: dict[str, object] = {}
    config = fp4.configs(fp4.Nvfp4GemmProblem(m, n, k), "cpu")[0]
    if case != "plain":
        config = fp4.Nvfp4GemmConfig(16, 32, 64, 1, 4, 1, swap_ab=True)
        kwargs = dict(scale_layout="blocked", bias=torch.randn(n, generator=g).to(torch.bfloat16), activation="silu")
    off, on = _run_both(lambda pdl: fp4.run(a, b, config, use_pdl=pdl, **kwargs), _programs(m, n, config), gdc_calls)
    assert torch.equal(on, off) and on.dtype == torch.bfloat16


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("a_dtype", ["bfloat16", "nvfp4"])
def test_interp_nvfp4_dequant_gemm_same_numbers_with_pdl(gdc_calls, a_dtype: str) -> None:
    m, n, k = 17, 40, 160
    g = torch.Generator().manual_seed(11)
    b = quantize_nvfp4(torch.randn(n, k, generator=g))
    a = quantize_nvfp4(torch.randn(m, k, generator=g)) if a_dtype == "nvfp4" else \
        torch.randn(m, k, generator=g).to(torch.bfloat16)
    config = dq.configs(dq.Nvfp4DequantGemmProblem(m, n, k, a_dtype), "cpu")[0]
    off, on = _run_both(lambda pdl: dq.run(a, b, config, activation="gelu", use_pdl=pdl), _programs(m, n, config),
                        gdc_calls)
    assert torch.equal(on, off)


def _run_consumer(x: torch.Tensor, use_pdl: bool) -> torch.Tensor:
    from inductor_ext.runtime.triton_loader import load_kernel

    ks = _consumer(use_pdl)
    out = torch.empty_like(x)
    n = x.numel()
    load_kernel(ks)[(-(-n // ks.constexprs["BLOCK"]),)](x, out, n, **ks.constexprs, **ks.launch)
    return out


@pytest.mark.interp
@pytest.mark.usefixtures("interpreter")
@pytest.mark.parametrize("family", ["gemm", "fp4", "dq"])
def test_interp_producer_consumer_chain(gdc_calls, family: str) -> None:
    # GEMM (bf16 out) -> pointwise consumer reading the GEMM's output, both with PDL or both without.
    m, n, k = 5, 48, 64
    g = torch.Generator().manual_seed(3)
    if family == "gemm":
        a, b = torch.randn(m, k, generator=g).to(torch.bfloat16), torch.randn(k, n, generator=g).to(torch.bfloat16)
        config = gemm.configs(gemm.GemmProblem(m, n, k, "bfloat16"), "cpu")[0]
        producer = lambda pdl: gemm.run(a, b, config, use_pdl=pdl)  # noqa: E731
        ref = a.float() @ b.float()
    else:
        a, b = quantize_nvfp4(torch.randn(m, k, generator=g)), quantize_nvfp4(torch.randn(n, k, generator=g))
        module = fp4 if family == "fp4" else dq
        problem = fp4.Nvfp4GemmProblem(m, n, k) if family == "fp4" else dq.Nvfp4DequantGemmProblem(m, n, k, "nvfp4")
        config = module.configs(problem, "cpu")[0]
        producer = lambda pdl: module.run(a, b, config, use_pdl=pdl)  # noqa: E731
        from inductor_ext.kernels.scaled_gemm import scaled_mm_reference

        ref = scaled_mm_reference(a, b, alpha=float(a.global_scale) * float(b.global_scale), out_dtype=torch.float32)

    def chain(pdl: bool) -> torch.Tensor:
        return _run_consumer(producer(pdl), pdl)

    off, on = _run_both(chain, _programs(m, n, config) + 1, gdc_calls)  # the consumer: one program
    assert torch.equal(on, off) and on.dtype == torch.bfloat16
    # and the chain computes silu(GEMM) + 1 (bf16 GEMM output, then bf16 again)
    want = (lambda y: y * torch.sigmoid(y) + 1)(ref.to(torch.bfloat16).float())
    torch.testing.assert_close(on.float(), want, rtol=2.0**-7, atol=2.0**-7 * want.abs().max().item())


def test_consumer_file_is_self_contained() -> None:
    # compiled and loaded from its text alone: one kernel, no imports of this package
    source = _CONSUMER_FILE.read_text()
    assert source.count("@triton.jit") == 1 and "import inductor_ext" not in source


# ------------------------------------------------------------------ consumer side, real compile


@pytest.fixture(scope="module")
def consumer_compile(tmp_path_factory) -> dict:
    return run_json_script("_pdl_consumer_script.py", env=interpret_env(tmp_path_factory.mktemp("pdl_consumer")))


def _template_and_consumer(kernels: dict) -> tuple[str, str]:
    (template,) = [src for name, src in kernels.items() if name.startswith("triton_tem_")]
    (consumer,) = [src for name, src in kernels.items() if "softmax" in name]
    return template, consumer


def test_auto_makes_the_kernel_reading_the_template_output_wait(consumer_compile) -> None:
    """pdl="auto" at M=16: the template releases its dependents (USE_PDL=True) and the softmax
    kernel that reads its output is launched with PDL and waits before that load."""
    run = consumer_compile["auto"]
    assert run["winner"].startswith("triton_ext_gemm")
    template, consumer = _template_and_consumer(run["kernels"])
    assert "USE_PDL : tl.constexpr = True" in template
    # the template waits on the kernel before it too, so it is launched with PDL
    assert "'launch_pdl': True" in template
    assert "'launch_pdl': True" in consumer
    body = consumer.split("@triton.jit", 1)[1]
    wait, first_load = body.index("gdc_wait()"), body.index("tl.load(")
    assert wait < first_load, "the consumer must wait before it reads the GEMM's output"
    assert "tl.load(" not in body[:wait]
    assert run["max_err"] < 1e-5


def test_off_leaves_every_kernel_without_pdl(consumer_compile) -> None:
    run = consumer_compile["off"]
    template, consumer = _template_and_consumer(run["kernels"])
    assert "USE_PDL : tl.constexpr = False" in template and "'launch_pdl': True" not in template
    assert "'launch_pdl': False" in consumer and "gdc_wait" not in consumer.split("@triton.jit", 1)[1]
    assert run["max_err"] < 1e-5
