"""The Metal-on-CPU executor (tier C for Metal): barriers, 32-lane SIMD groups, every
thread-position attribute, threadgroup memory, atomics, half/bfloat/float8, the MSL Inductor's
MPS codegen and Helion's Metal backend generate, and the errors it must raise instead of
computing wrong numbers.

Kernels of one test share a library (one g++ compile each, cached on disk across runs).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from inductor_ext.runtime.metal_cpu import build
from inductor_ext.testing import metal_cpu
from inductor_ext.testing.metal_cpu import MetalCompileError, MetalLaunchError, MslSignatureError, MslUnsupported

pytestmark = pytest.mark.metal_cpu

CORE = r"""
#include <metal_stdlib>
using namespace metal;

// Each thread reads its right neighbour's value through threadgroup memory: wrong without
// the barrier (the neighbour has not written yet when threads run one after another).
kernel void rotate_left(device float* out [[buffer(0)]], constant float* a [[buffer(1)]],
                        uint tid [[thread_position_in_threadgroup]], uint gid [[thread_position_in_grid]],
                        uint n [[threads_per_threadgroup]]) {
  threadgroup float shared[256];
  shared[tid] = a[gid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid] = shared[(tid + 1) % n];
}

// Sum of a threadgroup's values: simd_sum per SIMD group, then over the group partials.
kernel void block_sum(device float* out [[buffer(0)]], constant float* a [[buffer(1)]],
                      uint gid [[thread_position_in_grid]], uint tg [[threadgroup_position_in_grid]],
                      uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                      uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[32];
  float s = simd_sum(a[gid]);
  if (lane == 0) partial[sg] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg == 0) {
    float p = simd_sum(lane < nsg ? partial[lane] : 0.0f);
    if (lane == 0) out[tg] = p;
  }
}

// SIMD-group functions, each result in its own row of `out` [10, n].
kernel void simd_ops(device float* out [[buffer(0)]], constant float* a [[buffer(1)]], constant uint& n [[buffer(2)]],
                     uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  float v = a[i];
  out[0 * n + i] = simd_sum(v);
  out[1 * n + i] = simd_max(v);
  out[2 * n + i] = simd_min(v);
  out[3 * n + i] = simd_prefix_inclusive_sum(v);
  out[4 * n + i] = simd_prefix_exclusive_sum(v);
  out[5 * n + i] = simd_shuffle(v, (lane * 7) % 32);
  out[6 * n + i] = simd_shuffle_down(v, 3);
  out[7 * n + i] = simd_shuffle_up(v, 5);
  out[8 * n + i] = simd_shuffle_xor(v, 9);
  out[9 * n + i] = simd_broadcast(v, 17);
  out[10 * n + i] = float(static_cast<ulong>(simd_ballot(v > 0.0f)) & 0xffffffffu);
  out[11 * n + i] = simd_any(v > 2.5f) ? 1.0f : 0.0f;
  out[12 * n + i] = simd_all(v > -10.0f) ? 1.0f : 0.0f;
  out[13 * n + i] = simd_shuffle_and_fill_down(v, -1.0f, 4);
  out[14 * n + i] = quad_sum(v);
}

// Every thread-position attribute, 3 words each, in `out` [threads, 19, 3].
kernel void positions(device uint* out [[buffer(0)]],
                      uint3 a [[thread_position_in_grid]], uint3 b [[thread_position_in_threadgroup]],
                      uint3 c [[threadgroup_position_in_grid]], uint3 d [[threads_per_threadgroup]],
                      uint3 e [[threadgroups_per_grid]], uint3 f [[threads_per_grid]],
                      uint3 g [[dispatch_threads_per_threadgroup]], uint h [[thread_index_in_threadgroup]],
                      ushort i [[thread_index_in_simdgroup]], uint j [[simdgroup_index_in_threadgroup]],
                      uint k [[threads_per_simdgroup]], uint l [[thread_execution_width]],
                      uint m [[simdgroups_per_threadgroup]], uint n [[dispatch_simdgroups_per_threadgroup]],
                      uint o [[thread_index_in_quadgroup]], uint p [[quadgroup_index_in_threadgroup]],
                      uint q [[quadgroups_per_threadgroup]], ushort2 r [[grid_size]], uint s [[grid_origin]]) {
  uint linear = a.x + a.y * f.x + a.z * f.x * f.y;
  device uint* w = out + linear * 19 * 3;
  uint3 vecs[8] = {a, b, c, d, e, f, g, uint3(uint(r.x), uint(r.y), s)};
  for (int t = 0; t < 8; t++) { w[3 * t] = vecs[t].x; w[3 * t + 1] = vecs[t].y; w[3 * t + 2] = vecs[t].z; }
  uint scalars[11] = {h, i, j, k, l, m, n, o, p, q, 0};
  for (int t = 0; t < 11; t++) w[24 + t * 3] = scalars[t];
}

// Reads threadgroup memory only threadgroup 0 writes: later threadgroups must see 0xFF bytes.
kernel void tg_poison(device uint* out [[buffer(0)]], uint tg [[threadgroup_position_in_grid]],
                      uint tid [[thread_position_in_threadgroup]]) {
  threadgroup uint scratch[4];
  if (tg == 0) scratch[tid] = 7;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tg * 4 + tid] = scratch[tid];
}

kernel void atomics(device atomic_int* counter [[buffer(0)]], device atomic_float* total [[buffer(1)]],
                    device atomic_uint* hi [[buffer(2)]], constant float* a [[buffer(3)]],
                    uint i [[thread_position_in_grid]]) {
  atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(total, a[i], memory_order_relaxed);
  atomic_fetch_max_explicit(hi, i * 3 % 1000, memory_order_relaxed);
}

// Vectors, swizzles and a few library functions on `a` [n, 4] -> `out` [n, 8].
kernel void vectors(device float* out [[buffer(0)]], constant float4* a [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) {
  float4 v = a[i];
  float2 lo = v.xy, hi = v.zw;
  float4 w = float4(hi, lo) * 2.0f + 1.0f;
  w.yx = lo;
  float3 c = select(v.xyz, float3(0.0f), v.xyz < 0.0f);
  out[i * 8 + 0] = dot(v, w);
  out[i * 8 + 1] = w.x + w.y;
  out[i * 8 + 2] = c.x + c.y + c.z;
  out[i * 8 + 3] = length(v.rgb);
  out[i * 8 + 4] = as_type<float>(as_type<uint>(v.w) ^ 0x80000000u);
  out[i * 8 + 5] = clamp(v.x, -0.5f, 0.5f) + fma(v.y, v.z, v.w);
  out[i * 8 + 6] = float(popcount(as_type<uint>(v.x)) + clz(uint(i + 1)));
  half2 h = half2(v.xy);
  out[i * 8 + 7] = float(h.x * h.y);
}

// Scalars bind as compile_shader binds them: int64, float32, lists of them.
kernel void scalars(device float* out [[buffer(0)]], constant long& i64 [[buffer(1)]], constant float& f32 [[buffer(2)]],
                    constant long* ints [[buffer(3)]], constant float* floats [[buffer(4)]],
                    constant half& h [[buffer(5)]], constant int& i32 [[buffer(6)]]) {
  out[0] = float(i64);
  out[1] = f32;
  out[2] = float(ints[0] + ints[1] + ints[2]);
  out[3] = floats[0] * floats[1];
  out[4] = float(h);
  out[5] = float(i32);
}
"""

C10 = r"""
#include <c10/metal/utils.h>
#include <c10/metal/atomic.h>
#include <c10/metal/special_math.h>
using namespace metal;

// fp32 -> {half, bfloat, float8_e4m3fn} -> fp32 through PyTorch's Metal types.
kernel void roundtrip(device float* out [[buffer(0)]], constant float* a [[buffer(1)]],
                      device uchar* e4m3 [[buffer(2)]], constant uint& n [[buffer(3)]],
                      uint i [[thread_position_in_grid]]) {
  float v = a[i];
  out[i] = float(static_cast<half>(v));
  out[n + i] = static_cast<float>(static_cast<bfloat>(v));
  c10::metal::float8_e4m3fn q = v;
  e4m3[i] = q.x;
  out[2 * n + i] = float(q);
  out[3 * n + i] = c10::metal::erf(v);
}

kernel void half_atomic_add(device c10::metal::AtomicType_t<half>* acc [[buffer(0)]], constant half* a [[buffer(1)]],
                            uint i [[thread_position_in_grid]]) {
  c10::metal::AtomicType<half>::atomic_add(acc, i % 3, a[i]);
}
"""


@pytest.fixture(scope="module")
def core():
    return metal_cpu.compile_shader(CORE)


def test_barrier_orders_threadgroup_memory(core):
    a = torch.randn(3 * 100)
    out = torch.empty_like(a)
    core.rotate_left(out, a, threads=300, group_size=100)
    assert torch.equal(out, a.view(3, 100).roll(-1, 1).flatten())


def test_without_barriers_the_same_kernel_is_wrong():
    """The executor models the barrier: built without it, the result is wrong."""
    broken = metal_cpu.compile_shader(CORE, defines=("MCPU_NO_BARRIERS",))
    a = torch.randn(100)
    out = torch.empty_like(a)
    broken.rotate_left(out, a, threads=100, group_size=100)
    assert not torch.equal(out, a.roll(-1))


def test_simd_groups_are_32_lanes(core):
    a = torch.randn(5 * 1000, dtype=torch.float32)
    out = torch.empty(5)
    core.block_sum(out, a, threads=5000, group_size=1000)
    torch.testing.assert_close(out, a.view(5, 1000).sum(1), rtol=1e-5, atol=1e-4)


def test_wrong_simd_width_gives_wrong_sums():
    """Built with 16-lane SIMD groups, the same reduction (32 partials at most) is wrong."""
    narrow = metal_cpu.compile_shader(CORE, defines=("MCPU_SIMD_WIDTH=16",))
    a = torch.ones(1000)
    out = torch.empty(1)
    narrow.block_sum(out, a, threads=1000, group_size=1000)
    assert out.item() != 1000.0


def _simd_reference(a: torch.Tensor) -> torch.Tensor:
    rows = []
    for g in a.view(-1, 32):
        lane = torch.arange(32)
        src_down = torch.where(lane + 3 < 32, lane + 3, lane)
        src_up = torch.where(lane - 5 >= 0, lane - 5, lane)
        ballot = float(sum(1 << i for i in range(32) if g[i] > 0))
        fill = torch.where(lane + 4 < 32, g[(lane + 4).clamp(max=31)], torch.tensor(-1.0))
        rows.append(torch.stack([
            g.sum().expand(32), g.max().expand(32), g.min().expand(32), g.cumsum(0), g.cumsum(0) - g,
            g[(lane * 7) % 32], g[src_down], g[src_up], g[lane ^ 9], g[17].expand(32),
            torch.full((32,), ballot), torch.full((32,), float((g > 2.5).any())),
            torch.full((32,), float((g > -10).all())), fill,
            g.view(8, 4).sum(1).repeat_interleave(4)]))
    return torch.cat(rows, 1)


def test_simd_functions(core):
    a = torch.randn(64)
    a[40] = 3.0  # one SIMD group has a value > 2.5, the other may not
    out = torch.empty(15, 64)
    core.simd_ops(out, a, 64, threads=64, group_size=64)
    torch.testing.assert_close(out, _simd_reference(a), rtol=1e-5, atol=1e-5)


def _expected_positions(threads, group):
    import itertools
    import math

    groups = [math.ceil(t / g) for t, g in zip(threads, group)]
    rows = {}
    for gz, gy, gx in itertools.product(*(range(n) for n in reversed(groups))):
        size = [min(g, t - p * g) for t, g, p in zip(threads, group, (gx, gy, gz))]
        n = size[0] * size[1] * size[2]
        for i in range(n):
            lx, ly, lz = i % size[0], (i // size[0]) % size[1], i // (size[0] * size[1])
            pos = (gx * group[0] + lx, gy * group[1] + ly, gz * group[2] + lz)
            vecs = [pos, (lx, ly, lz), (gx, gy, gz), tuple(size), tuple(groups), tuple(threads), tuple(group),
                    (threads[0], threads[1], 0)]
            scalars = [i, i % 32, i // 32, 32, 32, (n + 31) // 32, (math.prod(group) + 31) // 32, i % 4, i // 4,
                       (n + 3) // 4, 0]
            row = [v for vec in vecs for v in vec]
            for s in scalars:
                row += [s, 0, 0]
            linear = pos[0] + pos[1] * threads[0] + pos[2] * threads[0] * threads[1]
            rows[linear] = row
    return torch.tensor([rows[k] for k in sorted(rows)], dtype=torch.int64)


@pytest.mark.parametrize("threads, group", [((37, 5, 3), (16, 2, 2)), ((64, 1, 1), (64, 1, 1))])
def test_every_thread_position_attribute(core, threads, group):
    """Non-uniform threadgroups (dispatchThreads): the last group of a dimension is partial."""
    n = threads[0] * threads[1] * threads[2]
    out = torch.zeros(n * 19 * 3, dtype=torch.int32)
    core.positions(out, threads=list(threads), group_size=list(group))
    got = out.view(n, 19 * 3).to(torch.int64)
    want = _expected_positions(threads, group)
    got[:, 24:] = got[:, 24:] * torch.tensor([1, 0, 0] * 11)  # scalar rows: only the first word is written
    assert torch.equal(got, want)


def test_run_dispatches_threadgroups(core):
    """run(): grid counts threadgroups, threadgroup counts threads (dispatchThreadgroups)."""
    out = torch.zeros(4 * 2 * 8 * 3 * 19 * 3, dtype=torch.int32)
    metal_cpu.run(CORE, "positions", (4, 2), (8, 3), out)
    got = out.view(-1, 57)[:, :57].to(torch.int64)
    want = _expected_positions((32, 6, 1), (8, 3, 1))
    got[:, 24:] = got[:, 24:] * torch.tensor([1, 0, 0] * 11)
    assert torch.equal(got, want)


def test_threadgroup_memory_is_poisoned_per_threadgroup(core):
    out = torch.zeros(8, dtype=torch.int32)
    core.tg_poison(out, threads=8, group_size=4)
    assert out.tolist() == [7, 7, 7, 7, -1, -1, -1, -1]


def test_atomics(core):
    a = torch.rand(1000)
    counter, total, hi = torch.zeros(1, dtype=torch.int32), torch.zeros(1), torch.zeros(1, dtype=torch.int32)
    core.atomics(counter, total, hi, a, threads=1000, group_size=128)
    assert counter.item() == 1000 and hi.item() == max(i * 3 % 1000 for i in range(1000))
    torch.testing.assert_close(total, a.sum().view(1), rtol=1e-5, atol=1e-4)


def test_vectors_and_swizzles(core):
    a = torch.randn(10, 4)
    out = torch.empty(10, 8)
    core.vectors(out, a, threads=10)
    x, y, z, w = a.unbind(1)
    wv = torch.stack([y, x, 2 * x + 1, 2 * y + 1], 1)  # w.yx = v.xy after w = (2v.zw + 1, 2v.xy + 1)
    ints = torch.tensor([bin(v & 0xFFFFFFFF).count("1") for v in a[:, 0].view(torch.int32).tolist()]) + torch.tensor(
        [32 - (i + 1).bit_length() for i in range(10)])
    want = torch.stack([
        (a * wv).sum(1), x + y, a[:, :3].clamp(min=0).sum(1), a[:, :3].norm(dim=1), -w,
        x.clamp(-0.5, 0.5) + y * z + w, ints.float(), x.half() * y.half()], 1)
    torch.testing.assert_close(out, want.float(), rtol=2e-3, atol=1e-5)


def test_scalar_binding(core):
    out = torch.zeros(6)
    core.scalars(out, 2**40 + 2**20, 1.5, [1, 2, 3], [2.0, 4.0], 0.25, -7, threads=1, arg_casts={5: "fp16", 6: "int32"})
    assert out.tolist() == [float(2**40 + 2**20), 1.5, 6.0, 8.0, 0.25, -7.0]


@pytest.fixture(scope="module")
def c10_lib():
    return metal_cpu.compile_shader(C10)


def test_half_bfloat_float8_match_torch(c10_lib):
    """PyTorch's Metal headers (float8.h included) convert exactly as torch does on the CPU."""
    a = torch.cat([torch.randn(500) * 100, torch.tensor([0.0, -0.0, 448.0, 500.0, -1e-3, 2.0**-9, 1e-30])])
    n = a.numel()
    out, e4m3 = torch.empty(4 * n), torch.empty(n, dtype=torch.uint8)
    c10_lib.roundtrip(out, a, e4m3, n, threads=n)
    out = out.view(4, n)
    assert torch.equal(out[0], a.half().float())
    assert torch.equal(out[1], a.bfloat16().float())
    q = a.clamp(-448, 448).to(torch.float8_e4m3fn)  # the Metal header saturates, torch does not
    assert torch.equal(e4m3, q.view(torch.uint8))
    assert torch.equal(out[2], q.float())
    torch.testing.assert_close(out[3], torch.erf(a), rtol=1e-6, atol=1e-6)


def test_c10_half_atomic_add(c10_lib):
    a = torch.full((90,), 0.5, dtype=torch.float16)
    acc = torch.zeros(4, dtype=torch.float16)  # 3 used; packed two per 32-bit word
    c10_lib.half_atomic_add(acc, a, threads=90, group_size=32)
    assert acc.tolist() == [15.0, 15.0, 15.0, 0.0]


# ------------------------------------------------------------------------ generated MSL
INDUCTOR_CASES = {
    "pointwise": (lambda x, y: (x * y + 1).relu(), lambda: [torch.randn(8, 33), torch.randn(8, 33)]),
    "softmax_fp16": (lambda x: torch.softmax(x, -1), lambda: [torch.randn(4, 1000, dtype=torch.float16)]),
    "sum_amax": (lambda x: (x.sum(-1), x.amax(-1)), lambda: [torch.randn(6, 77)]),
    "layer_norm_welford": (lambda x: torch.nn.functional.layer_norm(x, (300,)), lambda: [torch.randn(5, 300)]),
    "bf16_column_sum": (lambda x: x.float().sum(0), lambda: [torch.randn(2000, 3, dtype=torch.bfloat16)]),
    "argmax": (lambda x: x.argmax(-1), lambda: [torch.randn(4, 500)]),
}


@pytest.mark.parametrize("case", sorted(INDUCTOR_CASES))
def test_inductor_mps_codegen_matches_eager(case):
    fn, make = INDUCTOR_CASES[case]
    torch.manual_seed(0)
    inputs = make()
    sources: list[str] = []
    got = metal_cpu.run_inductor_mps(fn, *inputs, sources=sources)
    assert sources and "kernel void" in sources[0]
    want = fn(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        tol = 2e-3 if w.dtype in (torch.float16, torch.bfloat16) else 1e-5
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)


def test_inductor_reductions_need_32_lane_simd_groups():
    """Inductor's threadgroup reductions (c10 reduction_utils) go wrong with 16-lane groups."""
    x = torch.randn(2, 1000)
    code = metal_cpu.inductor_mps_wrapper(lambda x: x.sum(-1), x)
    source = code.split("async_compile.metal('generated_kernel_0', '''")[1].split("'''")[0]
    source = "#include <c10/metal/reduction_utils.h>\n" + source
    out = torch.empty(2)
    metal_cpu.compile_shader(source).generated_kernel_0(out, x, threads=[2, 1000], group_size=[1, 1000])
    torch.testing.assert_close(out, x.sum(-1), rtol=1e-5, atol=1e-4)
    metal_cpu.compile_shader(source, defines=("MCPU_SIMD_WIDTH=16",)).generated_kernel_0(
        out, x, threads=[2, 1000], group_size=[1, 1000])
    assert not torch.allclose(out, x.sum(-1), rtol=1e-3, atol=1e-3)


@pytest.fixture(scope="module")
def helion_kernels():
    warnings.filterwarnings("ignore", message=".*'metal' backend is experimental.*")
    import _helion_metal_kernels as kernels  # tests/ is on sys.path (pytest rootdir-relative import)

    return kernels.add, kernels.softmax, kernels.matmul


def test_helion_metal_add_and_softmax(helion_kernels):
    add, softmax, _ = helion_kernels
    sources: list[str] = []
    with metal_cpu.cpu_compile_shader(sources=sources):
        x, y = torch.randn(1000), torch.randn(1000)
        torch.testing.assert_close(add(x, y), x + y, rtol=0, atol=0)
        s = torch.randn(8, 1000)
        torch.testing.assert_close(softmax(s), torch.softmax(s, 1), rtol=1e-5, atol=1e-6)
    assert any("helion_red::tg_max" in src for src in sources)


@pytest.mark.parametrize("m, k, n", [(64, 64, 64), (40, 50, 70)])
def test_helion_metal_matmul_through_mpp(helion_kernels, m, k, n):
    """Helion's Metal matmul is Metal 4 MPP matmul2d into a cooperative tensor, 8 execution
    groups of 4 SIMD groups per threadgroup; edge tiles rely on MPP's bounds checks."""
    _, _, matmul = helion_kernels
    sources: list[str] = []
    x, y = torch.randn(m, k), torch.randn(k, n)
    with metal_cpu.cpu_compile_shader(sources=sources):
        got = matmul(x, y)
    assert "matmul2d<" in sources[-1] and "get_destination_cooperative_tensor" in sources[-1]
    torch.testing.assert_close(got, x @ y, rtol=1e-5, atol=1e-4)


MPP = r"""
#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace metal;
using namespace mpp::tensor_ops;

// C = relu(relu(C + A @ B^T) + bias) with B stored [N, K] (transpose_right), 32 x 16 tiles:
// C loaded into a cooperative tensor, k accumulated in steps of 8, bias added by element index.
kernel void mpp_linear(device float* a [[buffer(0)]], device float* b [[buffer(1)]], device float* bias [[buffer(2)]],
                       device float* c [[buffer(3)]], constant int& M [[buffer(4)]], constant int& N [[buffer(5)]],
                       constant int& K [[buffer(6)]], uint2 tg [[threadgroup_position_in_grid]]) {
  auto A = tensor<device float, dextents<int32_t, 2>, tensor_inline>(a, dextents<int32_t, 2>(K, M));
  auto B = tensor<device float, dextents<int32_t, 2>, tensor_inline>(b, dextents<int32_t, 2>(K, N));
  auto C = tensor<device float, dextents<int32_t, 2>, tensor_inline>(c, dextents<int32_t, 2>(N, M));
  auto Bias = tensor<device float, dextents<int32_t, 2>, tensor_inline>(bias, dextents<int32_t, 2>(N, 1));
  constexpr auto desc = matmul2d_descriptor(32, 16, 8, false, true, false, matmul2d_descriptor::mode::multiply_accumulate);
  matmul2d<desc, execution_simdgroups<2>> op;
  auto acc = op.get_destination_cooperative_tensor<decltype(A.slice(0, 0)), decltype(B.slice(0, 0)), float>();
  acc.load(C.slice(tg.x * 16, tg.y * 32));
  for (int k = 0; k < K; k += 8) op.run(A.slice(k, tg.y * 32), B.slice(k, tg.x * 16), acc);
  auto bias_t = op.get_destination_cooperative_tensor<decltype(A.slice(0, 0)), decltype(B.slice(0, 0)), float>();
  for (uint16_t i = 0; i < bias_t.get_capacity(); ++i) {
    auto idx = bias_t.get_multidimensional_index(i);
    bias_t[i] = idx[0] + tg.x * 16 < uint(N) ? bias[idx[0] + tg.x * 16] : 0.0f;
  }
  for (auto it = acc.begin(); it != acc.end(); it++) *it = max(*it, 0.0f);
  for (uint16_t i = 0; i < acc.get_capacity(); ++i) if (acc.get_mask(i)) acc[i] = max(acc[i] + bias_t[i], 0.0f);
  acc.store(C.slice(tg.x * 16, tg.y * 32));
}
"""


def test_mpp_matmul2d_cooperative_tensor_epilogue():
    m, n, k = 45, 37, 29  # edge tiles in every dimension, K not a multiple of the k step
    a, b, bias = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    c0 = torch.randn(m, n)
    c = c0.clone()
    metal_cpu.run(MPP, "mpp_linear", (3, 2), 64, a, b, bias, c, m, n, k)
    torch.testing.assert_close(c, torch.relu(torch.relu(c0 + a @ b.T) + bias), rtol=1e-5, atol=1e-5)


def test_mpp_execution_group_must_divide_the_threadgroup():
    with pytest.raises(MetalLaunchError, match=r"execution_simdgroups<2> in a threadgroup of 3 SIMD groups"):
        metal_cpu.run(MPP, "mpp_linear", 1, 96, torch.zeros(4), torch.zeros(4), torch.zeros(2), torch.zeros(4), 2, 2, 2)


SIMDGROUP_MATRIX = r"""
#include <metal_stdlib>
using namespace metal;

// C[16, 16] = 2 * (A[16, 16] @ B^T) with B given [16, 16] row-major and loaded transposed: one SIMD
// group, 2 x 2 output tiles, k in two steps of 8; A's tiles staged through threadgroup memory.
kernel void mma(device float* c [[buffer(0)]], const device half* a [[buffer(1)]], const device half* b [[buffer(2)]],
                uint lane [[thread_index_in_simdgroup]]) {
  threadgroup half As[16 * 16];
  for (uint i = lane; i < 256; i += 32) As[i] = a[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_float8x8 acc[2][2];
  for (int i = 0; i < 2; i++) for (int j = 0; j < 2; j++) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  for (int k = 0; k < 16; k += 8) {
    simdgroup_half8x8 ta[2], tb[2];
    for (int i = 0; i < 2; i++) simdgroup_load(ta[i], As, 16, ulong2(k, 8 * i));
    for (int j = 0; j < 2; j++) simdgroup_load(tb[j], b, 16, ulong2(k, 8 * j), true);
    for (int i = 0; i < 2; i++) for (int j = 0; j < 2; j++) simdgroup_multiply_accumulate(acc[i][j], ta[i], tb[j], acc[i][j]);
  }
  for (int i = 0; i < 2; i++) for (int j = 0; j < 2; j++) {
    acc[i][j].thread_elements() *= 2.0f;
    simdgroup_store(acc[i][j], c, 16, ulong2(8 * j, 8 * i));
  }
}
"""


def test_simdgroup_matrix_multiply():
    a, b = torch.randn(16, 16).half(), torch.randn(16, 16).half()
    c = torch.zeros(16, 16)
    metal_cpu.run(SIMDGROUP_MATRIX, "mma", 1, 32, c, a, b)
    torch.testing.assert_close(c, 2 * (a.float() @ b.float().T), rtol=1e-5, atol=1e-4)


def test_simdgroup_matrix_needs_every_lane():
    with pytest.raises(MetalLaunchError, match="simdgroup_multiply_accumulate with SIMD lanes inactive"):
        metal_cpu.run(SIMDGROUP_MATRIX, "mma", 1, 16, torch.zeros(256), torch.zeros(256).half(), torch.zeros(256).half())


# ------------------------------------------------------------------------ errors
def test_divergent_barrier_thread_finished():
    src = """kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {
      if (i < 40) return;
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);
      o[i] = 1;
    }"""
    with pytest.raises(MetalLaunchError, match=r"divergent threadgroup_barrier: thread \(40, 0, 0\).*finished"):
        metal_cpu.run(src, "k", 1, 64, torch.zeros(64))


def test_divergent_barrier_different_sites():
    src = """kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {
      if (i % 2) { threadgroup_barrier(metal::mem_flags::mem_threadgroup); o[i] = 1; }
      else { threadgroup_barrier(metal::mem_flags::mem_threadgroup); o[i] = 2; }
    }"""
    with pytest.raises(MetalLaunchError, match=r"waits at kernel\.metal:3 but .* waits at kernel\.metal:2"):
        metal_cpu.run(src, "k", 1, 8, torch.zeros(8))


OOB = "kernel void k(device float* o [[buffer(0)]], constant float* a [[buffer(1)]], uint i [[thread_position_in_grid]]) { o[i] = a[i]; }"


def test_out_of_bounds_read_names_the_buffer():
    with pytest.raises(MetalLaunchError, match=r"thread \(64, 0, 0\).*buffer\(1\) `a` .* 0 bytes past its end"):
        metal_cpu.run(OOB, "k", 1, 65, torch.zeros(100), torch.zeros(64))


def test_out_of_bounds_write_of_a_view():
    base = torch.zeros(100)
    with pytest.raises(MetalLaunchError, match=r"buffer\(0\) `o`.*past its end"):
        metal_cpu.run(OOB, "k", 1, 81, base[20:], torch.zeros(100))
    assert torch.count_nonzero(base) == 0  # a failed launch leaves the tensors untouched


def test_write_into_alignment_slack_is_caught():
    with pytest.raises(MetalLaunchError, match="wrote after the end of buffer\\(0\\)"):
        metal_cpu.run(OOB, "k", 1, 63, torch.zeros(62), torch.ones(64))


def test_read_of_inactive_simd_lane_is_an_error():
    src = ("kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {"
           " o[i] = metal::simd_shuffle_down(float(i), 4); }")
    with pytest.raises(MetalLaunchError, match="simd_shuffle_down read SIMD lane 20, which is not active"):
        metal_cpu.run(src, "k", 1, 20, torch.zeros(20))


@pytest.mark.parametrize("source, feature", [
    ("kernel void k(texture2d<float> t [[texture(0)]]) {}", "textures"),
    ("kernel void k(device float* o [[buffer(0)]]) { simdgroup_float4x4 m; }", "simdgroup matrices other than 8x8"),
    ("kernel void k(threadgroup float* t [[threadgroup(0)]]) {}", "threadgroup-memory kernel arguments"),
    ("kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {}\n"
     "constant bool f [[function_constant(0)]];", "function constants"),
])
def test_unsupported_msl_is_refused(source, feature):
    with pytest.raises(MslUnsupported, match=feature):
        metal_cpu.compile_shader(source)


def test_compile_error_carries_gxx_text_and_source():
    with pytest.raises(MetalCompileError) as info:
        metal_cpu.compile_shader("kernel void k(device float* o [[buffer(0)]]) {\n  o[0] = undefined_fn(1);\n}")
    assert "undefined_fn" in str(info.value) and "2 |   o[0] = undefined_fn(1);" in str(info.value)


def test_binding_errors(core):
    with pytest.raises(TypeError, match="binds 1 buffers"):
        metal_cpu.run(OOB.replace(", constant float* a [[buffer(1)]]", "").replace("a[i]", "1"), "k", 1, 1)
    with pytest.raises(TypeError, match="is float but got the Python int 3"):
        metal_cpu.run("kernel void k(device float* o [[buffer(0)]], constant float& s [[buffer(1)]]) { o[0] = s; }",
                      "k", 1, 1, torch.zeros(1), 3)
    with pytest.raises(ValueError, match="got a tensor on meta"):
        core.rotate_left(torch.zeros(1, device="meta"), torch.zeros(1), threads=1)
    with pytest.raises(MetalLaunchError, match="exceed the 1024 threads"):
        core.rotate_left(torch.zeros(2048), torch.zeros(2048), threads=2048, group_size=2048)
    with pytest.raises(ValueError, match="grid must be an int or a tuple of 1 to 3 ints"):
        metal_cpu.run(CORE, "rotate_left", (1, 1, 1, 1), 1, torch.zeros(1), torch.zeros(1))
    with pytest.raises(AttributeError, match="no kernel 'nope'"):
        core.nope
    with pytest.raises(MslSignatureError, match="neither a pointer nor a reference"):
        metal_cpu.compile_shader("kernel void k(float x) {}")


def test_required_threads_per_threadgroup_is_enforced():
    src = "[[required_threads_per_threadgroup(64, 1, 1)]] kernel void k(device float* o [[buffer(0)]]) {}"
    with pytest.raises(MetalLaunchError, match="requires threadgroups of 64x1x1"):
        metal_cpu.run(src, "k", 1, 32, torch.zeros(1))


TG_MEMORY = """
#include <metal_stdlib>
using namespace metal;

kernel void fits(device float* o [[buffer(0)]], uint i [[thread_index_in_threadgroup]],
                 uint g [[thread_position_in_grid]]) {
  threadgroup float a[4096], b[4096];  // 32 KiB: all an Apple GPU has
  a[i] = 1.0f; b[i] = 2.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  o[g] = a[i] + b[(i + 1) % 32];  // another thread's value: shared
}
kernel void too_big(device float* o [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
  threadgroup float a[8192];
  threadgroup half b[2];  // 4 bytes over
  a[i] = 1.0f; b[0] = half(0.0f);
  o[i] = a[i];
}
"""


def test_threadgroup_memory_beyond_an_apple_gpus_is_an_error():
    """A Mac refuses a pipeline over maxThreadgroupMemoryLength: the executor too, not silently."""
    out = torch.zeros(64)
    metal_cpu.run(TG_MEMORY, "fits", 2, 32, out)
    assert out.tolist() == [3.0] * 64
    with pytest.raises(MetalLaunchError, match=r"threadgroup memory: the kernel declares 32772 bytes, more than "
                                               r"the 32768"):
        metal_cpu.run(TG_MEMORY, "too_big", 1, 32, out)


def test_threadgroup_declarations_become_shared_statics():
    from inductor_ext.runtime.metal_cpu import msl

    src = """kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {
      threadgroup float a[4 * 8], b[2];  // sizes with '*'
      threadgroup float* p = a;
      o[i] = 1.5h;
    }"""
    unit = msl.analyze(src).source
    assert "static float a[4 * 8], b[2]; ::mcpu::threadgroup_var(&a, sizeof(a)); ::mcpu::threadgroup_var(&b, sizeof(b));" in unit
    assert "threadgroup float* p = a;" in unit and "half(1.5f)" in unit
    assert unit.count("\n") >= src.count("\n")  # line numbers kept for compile errors


def test_host_named_template_kernels():
    src = """template <typename T> kernel void fill(device T* o [[buffer(0)]], constant float& v [[buffer(1)]],
                                              uint i [[thread_position_in_grid]]) { o[i] = T(v * 2); }
    template [[host_name("fill_half")]] kernel void fill<half>(device half* o [[buffer(0)]],
        constant float& v [[buffer(1)]], uint i [[thread_position_in_grid]]);"""
    out = torch.zeros(8, dtype=torch.float16)
    metal_cpu.run(src, "fill_half", 1, 8, out, 1.25)
    assert out.tolist() == [2.5] * 8


# ------------------------------------------------------------------------ compile cache, fibers
def test_libraries_are_cached_in_process_and_on_disk(core, monkeypatch):
    assert metal_cpu.compile_shader(CORE) is core
    calls = []
    monkeypatch.setattr(build.subprocess, "run", lambda *a, **k: calls.append(a))
    lib = metal_cpu.CpuShaderLibrary(CORE)  # a new object: loads the cached .so, no g++
    assert lib.path == core.path and lib.path.exists() and not calls


def test_ucontext_fibers_match_the_assembly_switch():
    """Other architectures switch fibers with ucontext; both schedule the same."""
    lib = metal_cpu.compile_shader(CORE, defines=("MCPU_USE_UCONTEXT",))
    a = torch.randn(3000)
    out = torch.empty(3)
    lib.block_sum(out, a, threads=3000, group_size=1000)
    torch.testing.assert_close(out, a.view(3, 1000).sum(1), rtol=1e-5, atol=1e-4)
