"""Tier I for every config a candidate policy can offer, on every target a family claims (issue 27).

``tests/test_gemm_template.py`` and the family tests prove each family's first config at one large
shape. A compile autotunes whatever the policies (``autotune/policy.py``: the family's defaults,
the decode policy, nvMatmulHeuristics) propose, so each of those configs must keep the family's
claim: it compiles for the target and shows the key instructions the family names for it
(``family.key_instructions(problem, config, target)`` where its configs build on different
instructions, e.g. triton.gemm's decode tiles on mma.sync, else ``KEY_INSTRUCTIONS[target]``, else
the target's MMA; what ``inductor-ext asm`` shows), and touches no local memory (issue 30: no
``STL``/``LDL`` in the SASS, no spill counts or scratch instructions in the amdgcn; a family
refuses a config measured spilling in its ``refuse_config``). Triton kernels are compiled as a
launch on contiguous tensors specialises them (``family.launch_values``: unit strides are
constants, as in Inductor's frame); without that every element needs its own address and the
NVFP4 kernels spilled thousands of registers. The cases are generated from the registry and
the policies over a grid of decode (M = 1..16) and prefill shapes, for every family that claims a
device target: Triton templates compiled by Triton (sm_90a, sm_100a, gfx950, gfx1250), configs that
render the same kernel once, in parallel; the families compiled by their own DSL (CuTeDSL, FlyDSL,
Helion's FlyDSL backend, Metal's MSL with the Metal-on-CPU build, SYCL's SPIR-V, triton.topk) by
their ``isa_many``/``compile_asm``, once per config. All through the ISA cache
(``INDUCTOR_EXT_ISA_CACHE``): cold, the whole set compiles ~200 kernels (Triton ~135, the DSL
families ~70; nearly half an hour on this 2-core machine under load); warm it takes ~20 s.
"""

from __future__ import annotations

import os
import sys

if "triton" not in sys.modules:  # compiles run in subprocesses without the interpreter (see isa)
    os.environ["TRITON_INTERPRET"] = "1"

import dataclasses  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from inductor_ext.autotune import policy  # noqa: E402
from inductor_ext.cli import asm  # noqa: E402
from inductor_ext.runtime import asm_text  # noqa: E402
from inductor_ext.runtime.register_use import register_use  # noqa: E402
from inductor_ext.templates import registry  # noqa: E402
from inductor_ext.templates.family import Family  # noqa: E402
from inductor_ext.testing import isa  # noqa: E402

DECODE_M = (1, 2, 4, 8, 16)
PREFILL_M = (64, 512)
N = K = 4096
# The third size where it is no GEMM's K: the k of top-k (at most 64).
THIRD = {"triton.topk": 50}
# Operand dtypes per family beyond its example's default (None); fp32 both as PyTorch's default
# (full fp32) and with TF32 allowed (set_float32_matmul_precision("high")).
DTYPES: dict[str, tuple[tuple[str | None, bool], ...]] = {
    "triton.gemm": ((None, False), ("float32", False), ("float32", True)),
}


def _claims() -> list[tuple[str, str]]:
    return [(name, target) for name, family in sorted(registry.families().items())
            for target in asm.family_targets(family)]


def _problems(family: Family, target: str) -> list[Any]:
    out = []
    for m in DECODE_M + PREFILL_M:
        for dtype, tf32 in DTYPES.get(family.name, ((None, False),)):
            try:
                problem = asm.example_problem(family, (m, N, THIRD.get(family.name, K)), dtype, target)
            except asm.AsmError:
                continue  # a shape the family does not serve (e.g. top-k's k): nothing is offered
            out.append(dataclasses.replace(problem, allow_tf32=True) if tf32 else problem)
    return out


def _cases(name: str, target: str) -> list[tuple[Any, Any, Any]]:
    """(problem, config, kernel) for every config the policies can offer, one per distinct kernel."""
    family = registry.families()[name]
    check = family.refuse_config
    seen, cases = set(), []
    for problem in _problems(family, target):
        for cand in policy.candidates(family, problem, target, "full"):
            if check is not None and check(problem, cand.config, target):
                continue  # refused for this problem: never offered (lowering asks the same)
            ks = family.render(problem, cand.config, target)
            # A DSL family's kernel is compiled once per config (with the first problem offering
            # it): its compiles are costly and its instructions follow the tile, not the sizes.
            # A Triton kernel is one compile per distinct launch specialisation too (M = 1 is a
            # constant, M = 16 aligned, M = 2..8 neither): each can allocate registers differently.
            key = (repr(cand.config),) if family.compile_asm is not None else (ks.source, repr(sorted(ks.constexprs.items())), repr(sorted(ks.launch.items())),
                   repr(asm.key_patterns(family, target, {"ptx": "", "amdgcn": ""}, problem, cand.config)),
                   repr(asm.launch_hints(family, problem, ks)))
            if key not in seen:
                seen.add(key)
                cases.append((problem, cand.config, ks))
    return cases


CLAIMS = _claims()


def _compile_dsl(family: Family, target: str, cases: list[tuple[Any, Any, Any]], cache: str | None) -> list[Any]:
    """A family compiled by its own DSL: one batch through ``isa_many`` where it has one (FlyDSL,
    Helion: one subprocess), else ``compile_asm`` per kernel; a failure is kept as its error."""
    if family.isa_many is not None:
        try:
            return family.isa_many([(p, c, target) for p, c, _ in cases], cache=cache)
        except Exception:  # find which kernel failed: one at a time below
            pass
    results: list[Any] = []
    for problem, config, _ in cases:
        try:
            results.append(family.compile_asm(problem, config, target))
        except Exception as e:  # reported by the test of its claim
            results.append(e)
    return results


@pytest.fixture(scope="module")
def compiled(isa_cache: str | None) -> dict[tuple[str, str], list[tuple[Any, Any, Any, Any]]]:
    """Every case of every claim compiled once: Triton kernels in parallel (each in a subprocess),
    the DSL families' in batches; a failed compile is kept as its error."""
    cases = {claim: _cases(*claim) for claim in CLAIMS}
    families = registry.families()
    triton_jobs = [(claim, *case) for claim, cs in cases.items() for case in cs
                   if families[claim[0]].compile_asm is None]

    def compile_one(job: tuple[Any, ...]) -> Any:
        (name, target), problem, _, ks = job
        try:  # specialised as a launch on contiguous tensors is (unit strides are constants)
            hints = asm.launch_hints(families[name], problem, ks)
            return isa.compile_for_target(ks, target, hints=hints, cache=isa_cache)
        except Exception as e:  # reported by the test of its claim
            return e

    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        results = list(pool.map(compile_one, triton_jobs))
    out: dict[tuple[str, str], list[tuple[Any, Any, Any, Any]]] = {}
    for (claim, problem, config, ks), result in zip(triton_jobs, results):
        out.setdefault(claim, []).append((problem, config, ks, result))
    for claim, cs in cases.items():
        family = families[claim[0]]
        if family.compile_asm is not None:
            done = _compile_dsl(family, claim[1], cs, isa_cache)
            out[claim] = [(p, c, ks, r) for (p, c, ks), r in zip(cs, done)]
    return out


@pytest.mark.isa
@pytest.mark.parametrize("name,target", CLAIMS)
def test_every_offered_config_shows_its_key_instructions(compiled, name: str, target: str) -> None:
    family = registry.families()[name]
    cases = compiled[name, target]
    assert cases, f"{name} on {target}: the policies offer no config for any problem of the grid"
    failures = []
    for problem, config, ks, result in cases:
        if isinstance(result, Exception):
            failures.append(f"{ks.name}: does not compile: {type(result).__name__}: {result}")
            continue
        patterns = asm.key_patterns(family, target, result, problem, config)
        if not patterns:
            failures.append(f"{ks.name}: the family names no key instruction for {target}")
        for stage, pats in patterns.items():
            counts = asm_text.instruction_counts(result, target, pats, key=stage)
            missing = [p for p, n in counts.items() if n == 0]
            if missing:
                top = sorted(asm_text.instruction_counts(result, target, key=stage).items(), key=lambda kv: -kv[1])
                failures.append(f"{ks.name} ({problem}): no {missing} in {stage}; most frequent: {top[:6]}")
    assert not failures, f"{name} on {target}, {len(failures)} of {len(cases)} kernels:\n" + "\n".join(failures)


@pytest.mark.isa
@pytest.mark.parametrize("name,target", CLAIMS)
def test_no_offered_config_spills(compiled, name: str, target: str) -> None:
    """No offered config touches local memory (issue 30): NVIDIA SASS without STL/LDL, amdgcn
    without spill counts or scratch instructions (``runtime.register_use``). A config that spills
    is refused by the family's ``refuse_config``, with the reason, rather than offered."""
    failures, unreadable = [], 0
    for problem, config, ks, result in compiled[name, target]:
        if isinstance(result, Exception):
            continue  # reported by test_every_offered_config_shows_its_key_instructions
        use = register_use(result)
        if use is None:
            unreadable += 1
        elif use.spills:
            failures.append(f"{ks.name} ({problem}): {use.describe()}")
    assert not failures, f"{name} on {target}, {len(failures)} kernels spill:\n" + "\n".join(failures)
