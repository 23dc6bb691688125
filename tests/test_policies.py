"""Candidate policies: merging and budgets in candidates(), the default policy,
nvMatmulHeuristics for an explicit GPU (never the generic answer), and the decode rules on real
LLM decode shapes. Fast (no kernels run): nvMatmulHeuristics answers on CPU in milliseconds.

Run with ``-s`` to see the table of what the decode policy adds to nvMatmulHeuristics' top-8.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from _logs import records_of

from inductor_ext.autotune import decode_policy, nvmmh_policy
from inductor_ext.autotune.decode_policy import DecodePolicy, decode_tiles
from inductor_ext.autotune.nvmmh_policy import NvMatmulHeuristicsPolicy, nvmmh_query, nvmmh_tiles
from inductor_ext.autotune.policy import (
    EFFORT_BUDGET,
    Candidate,
    DefaultPolicy,
    candidates,
    default_policies,
)
from inductor_ext.templates.base import Tile
from inductor_ext.templates.triton import gemm, nvfp4_gemm
from inductor_ext.templates.triton.gemm import GemmProblem

HAVE_NVMMH = importlib.util.find_spec("nvMatmulHeuristics") is not None
needs_nvmmh = pytest.mark.skipif(
    not HAVE_NVMMH, reason="nvidia-matmul-heuristics is not installed (pip install nvidia-matmul-heuristics)")

NVIDIA_TARGETS = ("sm_90a", "sm_100a")
DECODE_BATCHES = (1, 8, 32, 64, 128, 256)

# (model, projection) -> (N, K) of the decode GEMM x[M, K] @ W[K, N].
DECODE_SHAPES: dict[str, tuple[int, int]] = {
    "llama3-8b qkv": (6144, 4096),
    "llama3-8b o": (4096, 4096),
    "llama3-8b gate_up": (28672, 4096),
    "llama3-8b down": (4096, 14336),
    "llama3-70b qkv": (10240, 8192),
    "llama3-70b o": (8192, 8192),
    "llama3-70b gate_up": (57344, 8192),
    "llama3-70b down": (8192, 28672),
    "qwen2.5-7b qkv": (4608, 3584),  # hidden 3584, 28 q heads + 2 x 4 kv heads of 128
    "qwen2.5-7b down": (3584, 18944),
    "nemotron-4-15b up": (24576, 6144),  # hidden 6144, squared-ReLU MLP 24576
    "nemotron-4-15b down": (6144, 24576),
}


# --- candidates() with fake policies ----------------------------------------------------------

@dataclass
class FakePolicy:
    name: str
    configs: list[Any]
    apply: bool = True
    calls: list[str] = field(default_factory=list)

    def applies(self, family, problem, target) -> bool:
        self.calls.append("applies")
        return self.apply

    def propose(self, family, problem, target) -> list[Any]:
        self.calls.append("propose")
        return list(self.configs)


FAKE_FAMILY = SimpleNamespace()
PROBLEM = GemmProblem(1, 6144, 4096, "bfloat16")


def test_candidates_merge_dedup_and_credit_first_proposer():
    first = FakePolicy("first", ["a", "b", "a"])
    skipped = FakePolicy("skipped", ["z"], apply=False)
    second = FakePolicy("second", ["b", "c", "d"])
    got = candidates(FAKE_FAMILY, PROBLEM, "sm_90a", "full", [first, skipped, second])
    # round-robin: each policy's first idea, then each one's second, ...
    assert got == [Candidate("a", "first"), Candidate("b", "second"), Candidate("c", "second"),
                   Candidate("d", "second")]
    assert skipped.calls == ["applies"]  # asked, never proposed


def test_candidates_budget_per_effort():
    policies = [FakePolicy("p", [f"c{i}" for i in range(10)])]
    assert [c.config for c in candidates(FAKE_FAMILY, PROBLEM, "sm_90a", "quick", policies)] == [
        "c0", "c1", "c2", "c3"]
    assert len(candidates(FAKE_FAMILY, PROBLEM, "sm_90a", "full", policies)) == 10
    for effort in ("off", "cache-only"):
        silent = FakePolicy("silent", ["x"])
        assert candidates(FAKE_FAMILY, PROBLEM, "sm_90a", effort, [silent]) == []
        assert silent.calls == []  # a zero budget does not even ask the policies
    with pytest.raises(ValueError, match="autotune effort 'fast'"):
        candidates(FAKE_FAMILY, PROBLEM, "sm_90a", "fast", policies)
    assert EFFORT_BUDGET["quick"] == 4


def test_configs_ruled_out_leave_the_budget_to_the_others():
    policies = [FakePolicy("p", [f"c{i}" for i in range(10)])]
    ruled_out = {"c0": "measured to lose", "c2": "measured to lose"}.get
    got = candidates(FAKE_FAMILY, PROBLEM, "sm_90a", "quick", policies, ruled_out=ruled_out)
    assert [c.config for c in got] == ["c1", "c3", "c4", "c5"]


def test_default_policy_is_the_family_defaults():
    policy = DefaultPolicy()
    for target in ("sm_90a", "gfx950", "cpu"):
        for problem in (PROBLEM, GemmProblem(512, 512, 512, "float16")):
            assert policy.applies(gemm.FAMILY, problem, target)
            assert policy.propose(gemm.FAMILY, problem, target) == gemm.configs(problem, target)
    assert [p.name for p in default_policies("sm_90a")] == ["decode", "nvmatmulheuristics", "default"]
    assert [p.name for p in default_policies("gfx950")] == ["default"]


# --- candidates() with the real policies ------------------------------------------------------

def _expected_merge(problem: GemmProblem, target: str) -> list[Candidate]:
    proposals = [(p.name, p.propose(gemm.FAMILY, problem, target)) for p in default_policies(target)
                 if p.applies(gemm.FAMILY, problem, target)]
    merged: dict[Any, Candidate] = {}
    for rank in range(max(len(c) for _, c in proposals)):
        for name, configs in proposals:
            if rank < len(configs):
                merged.setdefault(configs[rank], Candidate(configs[rank], name))
    return list(merged.values())


@needs_nvmmh
@pytest.mark.parametrize("m", [1, 64, 512])
def test_candidates_real_policies_budgets_and_credit(m):
    problem = GemmProblem(m, 6144, 4096, "bfloat16")
    full = candidates(gemm.FAMILY, problem, "sm_90a", "full")
    assert full == _expected_merge(problem, "sm_90a")
    assert len(full) == len(set(c.config for c in full))
    names = {c.policy for c in full}
    assert names <= {"decode", "nvmatmulheuristics", "default"}
    assert "nvmatmulheuristics" in names
    assert ("decode" in names) == (m <= 256)
    for c in full:
        assert isinstance(c.config, gemm.GemmConfig)
    quick = candidates(gemm.FAMILY, problem, "sm_90a", "quick")
    assert 0 < len(quick) <= 4 and quick == full[:4]
    # even the quick budget benchmarks nvMatmulHeuristics' best idea beside the decode policy's
    assert "nvmatmulheuristics" in {c.policy for c in quick}
    assert candidates(gemm.FAMILY, problem, "sm_90a", "off") == []


# --- nvMatmulHeuristics -----------------------------------------------------------------------

def _generic_tiles(problem: GemmProblem, target: str) -> tuple[list[Tile], list[float]]:
    """What the library answers with no hardware descriptor: its generic GPU on this machine."""
    raw = nvmmh_policy._query_library(problem.m, problem.n, problem.k,
                                      nvmmh_policy.precision_for(problem, target),
                                      nvmmh_policy.layout_for(problem), None, 8)
    return [nvmmh_policy.tile_from_config(c) for c in raw], [c.runtime_s for c in raw]


@needs_nvmmh
@pytest.mark.parametrize("target,gpu", [("sm_90a", "H200_SXM"), ("sm_100a", "B200")])
def test_nvmmh_answers_for_the_explicit_gpu_not_the_generic_one(target, gpu):
    assert nvmmh_policy.resolve_gpu(target) == gpu
    differ_in_tiles = 0
    for name, (n, k) in DECODE_SHAPES.items():
        problem = GemmProblem(1, n, k, "bfloat16")
        raw = nvmmh_query(problem, target)
        tiles = nvmmh_tiles(problem, target)
        assert 1 <= len(tiles) <= len(raw) <= 8
        for t in tiles:
            assert min(t.block_m, t.block_n, t.block_k, t.num_stages, t.num_warps, t.split_k) >= 1
            assert not t.swap_ab
        generic_tiles, generic_runtimes = _generic_tiles(problem, target)
        # The runtime model is the GPU's: the same configs get other estimated runtimes.
        assert [c.runtime_s for c in raw] != generic_runtimes, name
        differ_in_tiles += [nvmmh_policy.tile_from_config(c) for c in raw] != generic_tiles
    # ... and the proposals themselves differ from the generic GPU's for some shapes.
    assert differ_in_tiles > 0


@needs_nvmmh
def test_nvmmh_b200_and_h200_answers_differ():
    problem = GemmProblem(1, 6144, 4096, "bfloat16")
    assert nvmmh_tiles(problem, "sm_90a") != nvmmh_tiles(problem, "sm_100a")


@needs_nvmmh
def test_nvmmh_gpu_override():
    problem = GemmProblem(1, 6144, 4096, "bfloat16")
    assert nvmmh_policy.resolve_gpu("sm_90a", "H100") == "H100_SXM"
    assert nvmmh_policy.resolve_gpu("sm_90a", "b200") == "B200"
    h100 = [c.runtime_s for c in nvmmh_query(problem, "sm_90a", gpu="H100")]
    h200 = [c.runtime_s for c in nvmmh_query(problem, "sm_90a")]
    assert h100 != h200  # the override reaches the library
    with pytest.raises(ValueError, match="not an nvMatmulHeuristics GPU"):
        NvMatmulHeuristicsPolicy(gpu="H300")


@needs_nvmmh
def test_nvmmh_policy_maps_through_the_family():
    problem = GemmProblem(1, 6144, 4096, "bfloat16")
    policy = NvMatmulHeuristicsPolicy()
    assert policy.applies(gemm.FAMILY, problem, "sm_90a")
    tiles = nvmmh_tiles(problem, "sm_90a")
    identity = dataclasses.replace(gemm.FAMILY, config_from_tile=lambda t: t)
    assert policy.propose(identity, problem, "sm_90a") == tiles
    # triton.gemm has no split-K: exactly the unsplit tiles survive, as GemmConfigs.
    expected = list(dict.fromkeys(gemm.config_from_tile(t) for t in tiles if t.split_k == 1))
    assert expected and policy.propose(gemm.FAMILY, problem, "sm_90a") == expected
    assert any(t.split_k > 1 for t in tiles)  # so the dropping above was exercised


@needs_nvmmh
def test_nvmmh_policy_off_without_a_mapping_or_the_library(monkeypatch, caplog):
    problem = GemmProblem(1, 6144, 4096, "bfloat16")
    policy = NvMatmulHeuristicsPolicy()
    assert not policy.applies(gemm.FAMILY, problem, "gfx950")
    assert not policy.applies(gemm.FAMILY, problem, "cpu")
    with pytest.raises(ValueError, match="no nvMatmulHeuristics GPU"):
        nvmmh_query(problem, "sm_120")  # no generic fallback for an unmapped NVIDIA target
    assert NvMatmulHeuristicsPolicy(gpu="RTX_5090").applies(gemm.FAMILY, problem, "sm_120")

    # The library missing: applies() is False, propose() empty, one log line in all.
    monkeypatch.setitem(sys.modules, "nvMatmulHeuristics", None)  # import now raises
    monkeypatch.setattr(nvmmh_policy, "_reported", set())
    nvmmh_policy._query_library.cache_clear()
    try:
        with records_of(caplog, nvmmh_policy.__name__, logging.WARNING):
            assert not policy.applies(gemm.FAMILY, problem, "sm_90a")
            assert not policy.applies(gemm.FAMILY, GemmProblem(8, 4096, 4096, "bfloat16"), "sm_100a")
            assert policy.propose(gemm.FAMILY, problem, "sm_90a") == []
        lines = [r for r in caplog.records if r.name == nvmmh_policy.__name__]
        assert len(lines) == 1 and "cannot import nvMatmulHeuristics" in lines[0].getMessage()
        # Without the library the real candidates still come from decode + default.
        got = candidates(gemm.FAMILY, problem, "sm_90a", "full")
        assert got and {c.policy for c in got} <= {"decode", "default"}
    finally:
        nvmmh_policy._query_library.cache_clear()


@needs_nvmmh
def test_nvmmh_precisions():
    assert nvmmh_policy.precision_for(GemmProblem(1, 8, 8, "bfloat16"), "sm_90a") == "TST"
    assert nvmmh_policy.precision_for(GemmProblem(1, 8, 8, "float16"), "sm_90a") == "HSH"
    # fp32 runs as TF32 only where the user's matmul precision allows it (as ATen's does)
    assert nvmmh_policy.precision_for(GemmProblem(1, 8, 8, "float32"), "sm_90a") == "SSS"
    assert nvmmh_policy.precision_for(GemmProblem(1, 8, 8, "float32", allow_tf32=True), "sm_90a") == "SFS"
    assert nvmmh_policy.precision_for(GemmProblem(1, 8, 8, "bfloat16", "float32"), "sm_90a") == "TSS"
    for dtype in ("float16", "float32"):
        assert nvmmh_tiles(GemmProblem(32, 4096, 4096, dtype), "sm_100a")
    # Problems of other families name their dtypes differently; only header-listed strings.
    nvfp4 = nvfp4_gemm.FAMILY
    fp4_problem = SimpleNamespace(m=8, n=4096, k=4096, out_dtype="bfloat16")
    assert nvmmh_policy.precision_for(fp4_problem, "sm_100a", nvfp4) == "OOTST"
    assert nvmmh_tiles(fp4_problem, "sm_100a", family=nvfp4)
    as_is = dataclasses.replace(nvfp4, config_from_tile=lambda t: t)  # propose names the dtypes by the family too
    assert NvMatmulHeuristicsPolicy().propose(as_is, fp4_problem, "sm_100a") == nvmmh_tiles(fp4_problem, "sm_100a",
                                                                                           family=nvfp4)
    mixed = SimpleNamespace(m=8, n=4096, k=4096, a_dtype="bfloat16", out_dtype="bfloat16")
    assert nvmmh_policy.precision_for(mixed, "sm_90a", nvfp4) is None  # bf16 x nvfp4: not listed
    assert not NvMatmulHeuristicsPolicy().applies(nvfp4, mixed, "sm_90a")
    assert nvmmh_policy.precision_for(SimpleNamespace(dtype="int4"), "sm_90a") is None
    # the decode policy sizes stages by operand bytes: NVFP4 fits more stages than bf16
    fp4_stages = {t.num_stages for t in decode_tiles(fp4_problem, "sm_100a", family=nvfp4)}
    bf16_stages = {t.num_stages for t in decode_tiles(GemmProblem(8, 4096, 4096, "bfloat16"), "sm_100a")}
    assert min(fp4_stages) > min(bf16_stages)


# --- the decode policy ------------------------------------------------------------------------

def _key(t: Tile) -> tuple:
    """What makes a tiling different (stages and warps are tuning details of the same tiling)."""
    return (t.block_m, t.block_n, t.block_k, t.split_k, t.swap_ab)


def _short(t: Tile) -> str:
    s = f"{t.block_m}x{t.block_n}x{t.block_k}"
    if t.split_k > 1:
        s += f"/sk{t.split_k}"
    if t.swap_ab:
        s += "/swap"
    return s


@pytest.mark.parametrize("target", NVIDIA_TARGETS)
def test_decode_rules_on_llm_shapes(target):
    sms = decode_policy.sm_count(target)
    assert sms == {"sm_90a": 132, "sm_100a": 148}[target]
    split_shapes = 0
    for name, (n, k) in DECODE_SHAPES.items():
        for m in DECODE_BATCHES:
            problem = GemmProblem(m, n, k, "bfloat16")
            tiles = decode_tiles(problem, target)
            assert tiles and len(tiles) == len(set(tiles)), (name, m)
            for t in tiles:
                if m <= 64:  # BLOCK_M matched to M
                    assert t.block_m == min(64, max(16, 1 << (m - 1).bit_length()))
                else:
                    assert t.block_m in (64, 128) and t.block_m <= m
                if m <= 16:
                    assert t.block_k == 256  # wide BLOCK_K for tiny M
                if t.split_k > 1:
                    out_tiles = -(-m // t.block_m) * -(-n // t.block_n)
                    # one wave: as many CTAs as fit on the SMs, unless K is too short for it
                    assert 2 * out_tiles <= sms and k >= decode_policy.SPLIT_K_MIN_K
                    assert t.split_k == min(sms // out_tiles, 16, k // t.block_k // 4)
                smem = t.num_stages * (t.block_m + t.block_n) * t.block_k * 2
                assert 2 <= t.num_stages and smem <= decode_policy.SMEM_BUDGET
            assert any(t.swap_ab for t in tiles) == (m <= 64), (name, m)
            for t in tiles:  # every unsplit tile has a split-K twin exactly when rule 6 fires
                if t.split_k == 1:
                    out_tiles = -(-m // t.block_m) * -(-n // t.block_n)
                    fires = (2 * out_tiles <= sms and k >= decode_policy.SPLIT_K_MIN_K
                             and min(sms // out_tiles, k // t.block_k // 4) >= 2)
                    twins = [x for x in tiles if x.split_k > 1 and
                             (x.block_m, x.block_n, x.block_k, x.swap_ab) == (t.block_m, t.block_n, t.block_k, t.swap_ab)]
                    assert len(twins) == int(fires), (name, m, t)
            split_shapes += any(t.split_k > 1 for t in tiles)
    assert split_shapes >= len(DECODE_SHAPES)  # rule 6 is not dead code on these shapes


def test_decode_split_targets_the_sm_count():
    problem = GemmProblem(1, 6144, 4096, "bfloat16")  # 16x128 tiles: 48 output tiles
    split = {t: {x.split_k for x in decode_tiles(problem, t) if x.block_n == 128} for t in NVIDIA_TARGETS}
    assert split == {"sm_90a": {1, 2}, "sm_100a": {1, 3}}  # 96 of 132 SMs; 144 of 148
    assert {x.split_k for x in decode_tiles(problem, "sm_90a", num_sms=200) if x.block_n == 128} == {1, 4}
    # Many output tiles or a short K: no split.
    assert all(t.split_k == 1 for t in decode_tiles(GemmProblem(256, 57344, 8192, "bfloat16"), "sm_90a"))
    assert all(t.split_k == 1 for t in decode_tiles(GemmProblem(1, 4096, 1024, "bfloat16"), "sm_90a"))


def test_decode_split_k_at_the_edges_of_rule_6_worked_by_hand():
    """Rule 6 at its edges, on 132 SMs: 66 output tiles split in two (2 * 66 = 132 is not more than
    the SMs), 67 do not (134); K = 2048 splits, 2047 does not; each split keeps >= 4 BLOCK_K steps,
    at most 16 splits; a split that would be 1 is no split."""
    split = decode_policy._split
    assert split(66, 4096, 256, 132) == 2  # min(132 // 66, 16, 16 steps // 4)
    assert split(67, 4096, 256, 132) == 1  # 2 * 67 = 134 > 132
    assert split(1, 2048, 128, 132) == 4  # min(132, 16, 16 steps // 4)
    assert split(1, 2047, 128, 132) == 1  # K below 2048
    assert split(1, 65536, 64, 132) == 16  # min(132, 16, 1024 steps // 4)
    assert split(40, 1 << 20, 64, 132) == 3  # 132 // 40
    assert split(1, 2048, 256, 132) == 2  # 8 steps: two splits of 4
    assert split(1, 2048, 512, 132) == 1  # 4 steps: one split of 4 is no split
    assert split(1, 2048, 1024, 132) == 1  # 2 steps: not even one split of 4, still 1 (not 0)
    assert all(type(split(t, 4096, 128, 132)) is int for t in (1, 8, 40))  # a kernel's SPLIT_K, never 4.0
    # in decode_tiles: M = 1, N = 8448 gives 66 tiles of 16x128 (split 2) and 132 of 16x64 (none)
    tiles = decode_tiles(GemmProblem(1, 8448, 4096, "bfloat16"), "sm_90a")
    assert {(t.block_n, t.split_k) for t in tiles} == {(128, 2), (128, 1), (64, 1)}


def test_decode_tiles_on_each_side_of_m_64_worked_by_hand():
    """Rules 2-5 and 7 (sm_90a, bf16, K = 1024: no split): 64 rows still get BLOCK_M 64 with the
    swap-AB tiles first and BLOCK_K 128; 65 rows get plain 64-row tiles, BLOCK_N 128, 64 and 256,
    BLOCK_K 64. Stages: 192 KiB // ((BM + BN) * BK * 2 bytes), within [2, 6]; 8 warps from 128x128."""
    assert decode_tiles(GemmProblem(64, 4096, 1024, "bfloat16"), "sm_90a") == [
        Tile(64, 128, 128, num_stages=4, num_warps=4, swap_ab=True),  # 196608 // 49152 = 4
        Tile(64, 64, 128, num_stages=6, num_warps=4, swap_ab=True),  # 196608 // 32768 = 6
        Tile(64, 128, 128, num_stages=4, num_warps=4),
        Tile(64, 64, 128, num_stages=6, num_warps=4)]
    assert decode_tiles(GemmProblem(65, 4096, 1024, "bfloat16"), "sm_90a") == [
        Tile(64, 128, 64, num_stages=6, num_warps=4),  # 196608 // 24576 = 8, at most 6
        Tile(64, 64, 64, num_stages=6, num_warps=4),
        Tile(64, 256, 64, num_stages=4, num_warps=8)]  # 196608 // 40960 = 4; 64 * 256 = 128 * 128
    # BLOCK_M = clamp(next_pow2(M), 16, 64); BLOCK_K 256 up to M = 16, then 128 (never over next_pow2(K))
    for m, bm, bk in ((1, 16, 256), (16, 16, 256), (17, 32, 128), (33, 64, 128)):
        assert {(t.block_m, t.block_k) for t in decode_tiles(GemmProblem(m, 4096, 1024, "bfloat16"), "sm_90a")} \
            == {(bm, bk)}, m
    assert {t.block_k for t in decode_tiles(GemmProblem(1, 4096, 100, "bfloat16"), "sm_90a")} == {128}
    assert {t.block_k for t in decode_tiles(GemmProblem(1, 4096, 8, "bfloat16"), "sm_90a")} == {16}
    # both 64 and 128 rows from M = 128 on
    assert {t.block_m for t in decode_tiles(GemmProblem(127, 4096, 1024, "bfloat16"), "sm_90a")} == {64}
    assert {t.block_m for t in decode_tiles(GemmProblem(128, 4096, 1024, "bfloat16"), "sm_90a")} == {64, 128}


def test_decode_tiles_for_m_128_with_split_k_worked_by_hand():
    """M = 128, N = 1024, K = 4096 on sm_90a (132 SMs): BLOCK_M 64 and 128, BLOCK_N 128, 64, 256,
    BLOCK_K 64 (64 K-steps, so up to 16 splits of 4). Every tiling leaves at least half the SMs
    idle, so each gets a split-K twin first, with the same stages and warps: split = min(132 //
    tiles, 16, 64 // 4)."""
    def both(bm: int, bn: int, split: int, stages: int, warps: int) -> list[Tile]:
        return [Tile(bm, bn, 64, num_stages=stages, num_warps=warps, split_k=split),
                Tile(bm, bn, 64, num_stages=stages, num_warps=warps)]

    assert decode_tiles(GemmProblem(128, 1024, 4096, "bfloat16"), "sm_90a") == [
        *both(64, 128, 8, 6, 4),  # 2 x 8 tiles; 196608 // 24576 = 8 stages, at most 6
        *both(64, 64, 4, 6, 4),  # 2 x 16 tiles
        *both(64, 256, 16, 4, 8),  # 2 x 4 tiles: 132 // 8 = 16; 196608 // 40960 = 4
        *both(128, 128, 16, 6, 8),  # 1 x 8 tiles; 196608 // 32768 = 6
        *both(128, 64, 8, 6, 4),  # 1 x 16 tiles
        *both(128, 256, 16, 4, 8)]  # 1 x 4 tiles: min(33, 16, 16); 196608 // 49152 = 4


def test_decode_applies_to_any_positive_sizes_and_counts_sms_by_target():
    """Rule 1 needs only M, N and K >= 1 (1x1x1 still applies); rule 6's SMs: 132 for an NVIDIA
    target without the figure, and ``num_sms`` overrides (also in ``DecodePolicy.propose``)."""
    assert decode_policy.applies_to(GemmProblem(1, 1, 1, "bfloat16"), "sm_90a")
    for m, n, k in ((0, 1, 1), (1, 0, 1), (1, 1, 0)):
        assert not decode_policy.applies_to(GemmProblem(m, n, k, "bfloat16"), "sm_90a")
    assert decode_policy.sm_count("sm_90a") == 132 and decode_policy.sm_count("sm_100a") == 148
    assert decode_policy.sm_count("sm_99z") == 132 and decode_policy.sm_count("sm_90a", 200) == 200
    problem = GemmProblem(1, 6144, 4096, "bfloat16")  # 48 tiles of 16x128: 132 // 48 = 2, 200 // 48 = 4
    as_is = dataclasses.replace(gemm.FAMILY, config_from_tile=lambda t: t)
    assert {t.split_k for t in DecodePolicy(num_sms=200).propose(as_is, problem, "sm_90a") if t.block_n == 128} == {1, 4}


def test_decode_stages_follow_each_operands_bytes():
    """Rule 7 per operand: the 64x64x128 tiles of M = 64, N = 4096, K = 1024 (sm_90a) fit
    196608 // (64 * 128 * A + 128 * 64 * B) stages, within [2, 6]: bf16 6, fp32 3, fp32 x fp8 4
    either way round; an operand dtype the table lacks counts as 2 bytes."""
    def stages(problem: Any) -> set[int]:
        return {t.num_stages for t in decode_tiles(problem, "sm_90a") if t.block_n == 64}

    def mixed(a: str, b: str) -> SimpleNamespace:
        return SimpleNamespace(m=64, n=4096, k=1024, a_dtype=a, b_dtype=b)

    assert stages(GemmProblem(64, 4096, 1024, "bfloat16")) == {6}  # 196608 // 32768
    assert stages(GemmProblem(64, 4096, 1024, "float32")) == {3}  # 196608 // 65536
    assert stages(mixed("float32", "float8_e4m3fn")) == stages(mixed("float8_e4m3fn", "float32")) == {4}  # // 40960
    assert stages(SimpleNamespace(m=64, n=4096, k=1024, dtype="int4")) == {6}  # as bf16
    # propose sizes them for the family's operands: 16x128x256 tiles of NVFP4 (0.5 bytes) fit
    # 196608 // 18432 = 10 -> 6 stages where bf16 fits 2
    fp4_problem = SimpleNamespace(m=8, n=4096, k=4096, out_dtype="bfloat16")
    assert {c.num_stages for c in DecodePolicy().propose(nvfp4_gemm.FAMILY, fp4_problem, "sm_100a")} == {6}


def test_decode_applies_only_to_small_m_on_nvidia():
    policy = DecodePolicy()
    for target in NVIDIA_TARGETS:
        for name, (n, k) in DECODE_SHAPES.items():
            assert policy.applies(gemm.FAMILY, GemmProblem(256, n, k, "bfloat16"), target)
            for m in (257, 512, 4096):
                big = GemmProblem(m, n, k, "bfloat16")
                assert not policy.applies(gemm.FAMILY, big, target), (name, m)
                assert decode_tiles(big, target) == []
                assert all(c.policy != "decode" for c in candidates(gemm.FAMILY, big, target, "full"))
    for target in ("gfx950", "cpu", "mps"):
        assert not policy.applies(gemm.FAMILY, PROBLEM, target)


def test_decode_propose_maps_through_the_family():
    problem = GemmProblem(8, 4096, 14336, "bfloat16")
    tiles = decode_tiles(problem, "sm_90a")
    policy = DecodePolicy()
    assert policy.propose(dataclasses.replace(gemm.FAMILY, config_from_tile=lambda t: t), problem, "sm_90a") == tiles
    # triton.gemm has no split-K: it keeps the swap-AB (decode on wgmma) and the plain tiles (issue 30)
    unsplit = [t for t in tiles if t.split_k == 1]
    assert any(t.swap_ab for t in unsplit) and len(unsplit) < len(tiles)
    assert policy.propose(gemm.FAMILY, problem, "sm_90a") == [gemm.config_from_tile(t) for t in unsplit]


@needs_nvmmh
def test_decode_adds_what_nvmmh_top8_does_not_propose():
    """For every decode shape: which decode tiles nvMatmulHeuristics' top-8 lacks (same CTA
    tile, BLOCK_K, split and swap; stages and warps ignored), printed as a table."""
    rows = []
    new_split_tilings = agreed_split_tilings = 0
    for target in NVIDIA_TARGETS:
        for name, (n, k) in DECODE_SHAPES.items():
            for m in DECODE_BATCHES:
                problem = GemmProblem(m, n, k, "bfloat16")
                nv = nvmmh_tiles(problem, target, k=8)
                decode = decode_tiles(problem, target)
                nv_keys = {_key(t) for t in nv}
                added = [t for t in decode if _key(t) not in nv_keys]
                swap = [t for t in added if t.swap_ab]
                split = [t for t in added if t.split_k > 1 and not t.swap_ab]
                plain = [t for t in added if t.split_k == 1 and not t.swap_ab]
                # Split-K tilings ignoring BLOCK_K: does nvmmh propose the same CTA and split?
                nv_tilings = {(t.block_m, t.block_n, t.split_k) for t in nv}
                dec_split = {(t.block_m, t.block_n, t.split_k) for t in decode if t.split_k > 1}
                agree = dec_split & nv_tilings
                new_split_tilings += len(dec_split - nv_tilings)
                agreed_split_tilings += len(agree)
                rows.append((name, m, target, len(nv), len(added), swap, split, plain, agree))
                if m <= 64:
                    # At least one swap-AB or split-K tile that nvmmh's top-8 does not have;
                    # nvMatmulHeuristics never reports swap-AB at all.
                    assert swap or split, (name, m, target)
                    assert not any(t.swap_ab for t in nv)
    print()
    print(f"{'shape':20} {'M':>4} {'target':7} {'nv8':>3} {'add':>3}  "
          "added swap-AB | added split-K | added plain | split tilings nvmmh also has")
    for name, m, target, n_nv, n_add, swap, split, plain, agree in rows:
        print(f"{name:20} {m:>4} {target:7} {n_nv:>3} {n_add:>3}  "
              f"{' '.join(map(_short, swap)) or '-'} | {' '.join(map(_short, split)) or '-'} | "
              f"{' '.join(map(_short, plain)) or '-'} | "
              f"{' '.join(f'{a}x{b}/sk{c}' for a, b, c in sorted(agree)) or '-'}")
    print(f"decode split-K tilings (CTA, split) new to nvmmh: {new_split_tilings}, "
          f"also proposed by nvmmh: {agreed_split_tilings}")
    assert len(rows) == len(NVIDIA_TARGETS) * len(DECODE_SHAPES) * len(DECODE_BATCHES)
    assert new_split_tilings > 0


def test_the_model_policy_proposes_the_configs_that_won_nearby_in_order() -> None:
    """``autotune="quick"`` under a cost model: the configs of near table wins, nearest first,
    credited to "model"; with none it does not apply (the default proposals serve)."""
    from inductor_ext.autotune import policy as policies

    near = [("a",), ("b",), ("c",)]
    assert policies.ModelPolicy(near).applies(None, None, "cpu")
    assert not policies.ModelPolicy([]).applies(None, None, "cpu")
    got = policies.candidates(None, None, "cpu", "quick", [policies.ModelPolicy(near)])
    assert [(c.config, c.policy) for c in got] == [(("a",), "model"), (("b",), "model"), (("c",), "model")]
