"""``inductor-ext asm``: every family and target claimed today compiles with the real toolchain
and shows its key instruction; bad input is a one-line error naming what is allowed."""

from __future__ import annotations

import json
import re

import pytest

from inductor_ext.cli import asm, main

from inductor_ext import targets
from inductor_ext.templates import registry


def claimed_pairs() -> list[tuple[str, str]]:
    """Every (family, target) a family record claims where the target has an assembly to
    inspect (tier I; Metal and SYCL prove theirs in tier C): read from the registry, so a new
    family's claims are tested without an edit here."""
    return [(name, target) for name, family in sorted(registry.families().items())
            for target in asm.family_targets(family) if targets.get(target).asm_key is not None]


def claimed_instructions(family: registry.Family, target: str, problem: object, config: object) -> list[tuple[str, str]]:
    """What the record says the kernel must contain: the family's ``key_instructions`` for this
    problem and config, else the target's MMA instruction, as (assembly stage, regex)."""
    own = list(family.key_instructions(problem, config, target))
    t = targets.get(target)
    return own or [(t.asm_key, t.mma_instruction)]


CLAIMED = claimed_pairs()
# Shapes other than the default, chosen to be the kernels the families' own tier I tests compile
# (one compile for both: the ISA cache); Helion specializes on every size.
SHAPES = {"helion.rmsnorm": (64, 1000, 1), "helion.softmax": (64, 1000, 1), "triton.topk": (1, 32000, 50)}


@pytest.fixture(autouse=True)
def _asm_cache(monkeypatch, isa_cache):
    if isa_cache:
        monkeypatch.setenv("INDUCTOR_EXT_ISA_CACHE", isa_cache)


@pytest.mark.isa
@pytest.mark.parametrize("family, target", CLAIMED)
def test_claimed_pair_shows_its_key_instruction(family, target):
    result = asm.build(family, target, SHAPES.get(family, asm.DEFAULT_SHAPE))
    assert result["family"] == family and result["target"] == target
    record = registry.get(family)
    problem = registry.problem_from_dict(record, result["problem"])
    config = registry.config_from_dict(record, result["config"])
    claimed = claimed_instructions(record, target, problem, config)
    assert claimed and all(pattern for _, pattern in claimed), (family, target)  # a record names one
    for stage, instruction in claimed:
        assert result["key_instructions"][stage][instruction] > 0, result["key_instructions"]
    assert all(n > 0 for counts in result["key_instructions"].values() for n in counts.values())
    assert result["kernel"] in result["source"] or result["language"] != "triton"


def test_list_has_one_line_per_family_with_its_targets(capsys):
    assert main(["asm", "--list"]) == 0
    header, *lines = capsys.readouterr().out.strip().splitlines()
    assert header.split() == ["family", "targets", "kind"]
    by_family = {line.split()[0]: line for line in lines}
    assert len(by_family) == len(lines)
    for family, target in CLAIMED:
        assert target in by_family[family], by_family[family]
    assert "cpu" not in by_family["triton.gemm"]  # the interpreter is not a target with an ISA
    # every family, whatever it claims, and the Inductor kernel kinds (tests/test_gfx1250_inductor_tdm.py)
    assert set(by_family) == set(registry.families()) | set(asm.inductor_kinds())
    claimed = set(CLAIMED)
    for family, module in registry.families().items():  # every target with an ISA has a test above
        for target in asm.family_targets(module):
            assert (family, target) in claimed or targets.get(target).asm_key is None, (family, target)
    assert {("triton.gemm", "sm_90a"), ("triton.nvfp4_gemm", "sm_100a"), ("flydsl.gemm", "gfx950"),
            ("helion.rmsnorm", "gfx950")} <= claimed  # the registry is read, not empty


@pytest.mark.parametrize("argv, expected", [
    (["asm", "triton.gemmm", "--target", "sm_90a"], "unknown template family 'triton.gemmm'; families: "),
    (["asm", "triton.nvfp4_gemm", "--target", "sm_90a"], "does not claim target 'sm_90a'; it claims: sm_100a"),
    (["asm", "triton.gemm", "--target", "sm_90a", "--shape", "12x3"], "is not MxNxK"),
    (["asm", "triton.gemm", "--target", "sm_90a", "--config", "block_q=3"], "with a key among block_m"),
    (["asm", "triton.gemm", "--target", "sm_90a", "--config", "block_m=big"], "block_m='big': expected an integer"),
    (["asm", "flydsl.tdm_gemm", "--target", "gfx950"], "does not claim target 'gfx950'; it claims: gfx1250"),
    (["asm", "helion.rmsnorm", "--target", "gfx950", "--dtype", "float64"], "dtype float64 not in ('bfloat16'"),
    (["asm", "triton.topk", "--target", "gfx950"], "k=256 is outside 1..64"),  # MxNxK: M rows of N, top K
    (["asm", "flydsl.mx_scaled_mm", "--target", "gfx950", "--dtype", "int8"], "--dtype 'int8': use one of fp8_e4m3"),
    (["asm", "flydsl.mx_scaled_mm", "--target", "gfx950", "--shape", "64x64x40"], "K=40 is not a multiple of the MX"),
])
def test_bad_input_is_one_line_naming_what_is_allowed(capsys, argv, expected):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1, err


@pytest.mark.isa
def test_out_writes_source_assembly_and_summary(tmp_path, capsys):
    rc = main(["asm", "triton.gemm", "--target", "gfx950", "--shape", "64x64x128", "--config", "block_m=64,block_n=64",
               "--out", str(tmp_path)])
    assert rc == 0
    summary = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert summary["config"]["block_m"] == 64 and summary["problem"]["m"] == 64
    assert summary["key_instructions"]["amdgcn"]["v_mfma"] > 0
    assert next(tmp_path.glob("*.amdgcn")).read_text().count("v_mfma") > 0
    assert "key instructions" in capsys.readouterr().out


@pytest.mark.isa
def test_cutedsl_shows_its_launch_config():
    """The CuTeDSL kernel's host launch config is printed (PDL off for the example problem:
    programmatic stream serialization 0)."""
    result = asm.build("cutedsl.nvfp4_gemm", "sm_100a", SHAPES.get("cutedsl.nvfp4_gemm", asm.DEFAULT_SHAPE))
    shown = asm.format_result(result)
    assert "==== host_launch ====" in shown
    assert re.search(r"programmatic_stream_serialization_allowed\[%\w+\] %c0_i32", shown), shown[-2000:]


def test_a_missing_toolchain_is_a_failure_not_a_usage_mistake(capsys, monkeypatch):
    """Exit 1 (the CLI's convention, cli/errors.py) with the install hint, in one line."""
    from inductor_ext.cli import asm
    from inductor_ext.runtime.toolchain import ToolchainMissing

    def build(*args: object) -> None:
        raise ToolchainMissing("ptxas was not found: pip install inductor-ext[nvidia]")

    monkeypatch.setattr(asm, "build", build)
    assert main(["asm", "triton.gemm", "--target", "sm_90a"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "inductor-ext asm: ptxas was not found: pip install inductor-ext[nvidia]"


def test_tritons_fp_fusion_notice_stays_out_of_the_output(tmp_path):
    """Triton 3.9 warns once per process that TRITON_DEFAULT_FP_FUSION is unset: a fresh process
    with that variable unset and a cold ISA cache compiles, and its output is the kernel alone."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_DEFAULT_FP_FUSION", "TRITON_INTERPRET")}
    env["INDUCTOR_EXT_ISA_CACHE"] = str(tmp_path / "isa")  # cold: Triton compiles here
    done = subprocess.run([sys.executable, "-m", "inductor_ext.cli", "asm", "triton.gemm", "--target", "sm_90a",
                           "--shape", "64x64x64"], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    assert "wgmma" in done.stdout and (tmp_path / "isa").exists()
    assert "FP_FUSION" not in done.stdout + done.stderr, done.stderr
