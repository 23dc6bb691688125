"""PDL for the CuTeDSL NVFP4 choice (templates/cutedsl/nvfp4_gemm.py, issue 30).

- I ISA: in the PTX of quack's warp-specialised kernel, no path from the entry reaches a TMA load
  of the operands or scales without passing ``griddepcontrol.wait``, and none reaches any other
  global read (alpha, the bias) without passing that wait or an mbarrier wait (the accumulator
  barrier, which the MMA warp arrives on only after the loads); ``launch_dependents`` comes once,
  after the last MMA and before the output's TMA stores. Warp roles are branches of one entry,
  so the order is checked on the control-flow graph, not on the text's order.
- the launch: ``NvFp4GemmProblem.use_pdl`` decides the build (quack's ``use_pdl``, set through
  its ``post_init_attrs``): the host function's launch config carries
  ``programmatic_stream_serialization_allowed`` 1 with it and 0 without it (the host IR, read
  at tier I), and without it the PTX has no ``griddepcontrol`` at all; the two builds have
  different cache keys. The problem's ``use_pdl`` rides to the op as a kwarg and marks the
  extern node as a PDL producer.
"""

from __future__ import annotations

import re

import pytest

from inductor_ext.templates.cutedsl import nvfp4_gemm as nv

P, C = nv.NvFp4GemmProblem, nv.NvFp4GemmConfig
# Kernels tests/test_cutedsl_nvfp4.py compiles as well (one compile for both: the ISA cache):
# the decode config with alpha in device memory, and the prefill config with a bias.
# Kernels built with PDL, and one without (the decode kernel tests/test_cutedsl_nvfp4.py compiles).
PDL_KERNELS = {"decode_alpha": (P(8, 4096, 4096, use_pdl=True), nv.configs(P(8, 4096, 4096), "sm_100a")[0]),
               "prefill_bias": (P(128, 256, 512, bias=True, use_pdl=True), nv.configs(P(128, 256, 512), "sm_100a")[0])}
KERNELS = {**PDL_KERNELS, "decode_alpha_off": (P(8, 4096, 4096), nv.configs(P(8, 4096, 4096), "sm_100a")[0])}

_WAIT = "griddepcontrol.wait"
_LAUNCH = "griddepcontrol.launch_dependents"


def _tma_load(op: str) -> bool:  # cp.async.bulk.tensor.<n>d.shared::<cta|cluster>.global...: global -> shared
    return op.startswith("cp.async.bulk.tensor.") and re.search(r"\.shared::\w+\.global", op) is not None


def _tma_store(op: str) -> bool:  # cp.async.bulk.tensor.<n>d.global.shared::...: shared -> global
    return op.startswith("cp.async.bulk.tensor.") and ".global.shared::" in op


def _global_read(op: str) -> bool:
    """TMA loads and ld/ldu that read global (or generic, which may be global) memory."""
    if _tma_load(op):
        return True
    parts = op.split(".")
    return parts[0] in ("ld", "ldu") and not any(p.split("::")[0] in ("param", "shared", "local", "const")
                                               for p in parts[1:])


class Ptx:
    """The instructions of a one-entry PTX module with their successors (labels resolved in the
    ``{ }`` scope they are defined in: inline asm repeats names like ``LAB_WAIT``)."""

    def __init__(self, text: str) -> None:
        self.ops: list[str] = []
        self.lines: list[str] = []
        chains: list[tuple[int, ...]] = []
        labels: dict[tuple[int, str], int] = {}
        scope, next_scope, in_entry = [0], 1, False
        for raw in text.splitlines():
            line = raw.split("//", 1)[0].strip()
            if ".entry" in line:
                in_entry = True
            if not in_entry or not line:
                continue
            if line.startswith("{"):
                scope.append(next_scope)
                next_scope += 1
                continue
            if line.startswith("}"):
                scope.pop()
                continue
            if line.endswith(":"):
                labels[scope[-1], line[:-1].strip()] = len(self.ops)
            elif line.endswith(";") and not line.startswith("."):
                self.lines.append(line)
                self.ops.append(re.sub(r"^@!?%?\w+\s+", "", line).split()[0].rstrip(";"))
                chains.append(tuple(scope))
        assert self.ops, "no instructions in the PTX entry"
        self.succ: list[list[int]] = []
        for i, (line, op) in enumerate(zip(self.lines, self.ops)):
            guarded = line.startswith("@")
            nxt = [i + 1] if i + 1 < len(self.ops) else []
            if op.startswith("bra"):
                name = line.rstrip(";").split()[-1]
                target = next((labels[s, name] for s in reversed(chains[i]) if (s, name) in labels), None)
                assert target is not None, f"branch to unknown label: {line}"
                self.succ.append([target] + (nxt if guarded else []))
            elif op in ("ret", "exit") and not guarded:
                self.succ.append([])
            else:
                self.succ.append(nxt)

    def reachable_avoiding(self, stop) -> set[int]:
        """Instructions reachable from the entry on paths through no instruction ``stop`` accepts."""
        seen, todo = set(), [0]
        while todo:
            i = todo.pop()
            if i in seen or i >= len(self.ops):
                continue
            seen.add(i)
            if not stop(self.ops[i]):
                todo.extend(self.succ[i])
        return seen


@pytest.fixture(scope="module")
def compiled(isa_cache) -> dict[str, dict[str, str]]:
    try:
        results = nv.compile_many_for_sm100(list(KERNELS.values()), cache=isa_cache)
    except nv.CuteDslCompileError as e:
        pytest.fail(f"CuTeDSL could not compile the NVFP4 GEMM for sm_100a: {e}")
    return dict(zip(KERNELS, results))


def assert_pdl_order(ptx_text: str) -> dict[str, int]:
    ptx = Ptx(ptx_text)
    ops = ptx.ops
    waits = [i for i, op in enumerate(ops) if op == _WAIT]
    launches = [i for i, op in enumerate(ops) if op == _LAUNCH]
    assert waits and len(launches) == 1, (len(waits), len(launches))
    loads = [i for i, op in enumerate(ops) if _tma_load(op)]
    reads = [i for i, op in enumerate(ops) if _global_read(op)]
    assert loads, "no TMA loads: not the kernel this test is about"
    # 1. every operand/scale load waits on the producer first, on every path
    early = sorted(set(loads) & ptx.reachable_avoiding(lambda op: op == _WAIT))
    assert not early, f"TMA loads reachable without {_WAIT}: {[ptx.lines[i] for i in early[:3]]}"
    # 2. any other global read (alpha, bias) comes after that wait or after a barrier wait
    unguarded = sorted(set(reads) & ptx.reachable_avoiding(lambda op: op == _WAIT or op.startswith("mbarrier.try_wait")))
    assert not unguarded, f"global reads before any wait: {[ptx.lines[i] for i in unguarded[:3]]}"
    # 3. dependents are released once every MMA is issued, before the output's stores
    mmas = [i for i, op in enumerate(ops) if op.startswith("tcgen05.mma")]
    stores = [i for i, op in enumerate(ops) if _tma_store(op) or op.startswith("st.global")]
    assert mmas and stores and max(mmas) < launches[0] < min(stores), (mmas[-1:], launches, stores[:1])
    return {"waits": len(waits), "tma_loads": len(loads), "global_reads": len(reads)}


def launch_pdl_attribute(host_launch: str) -> int:
    """The value the compiled host function sets for the PDL launch attribute: CuTeDSL's
    ``cuda.launch_cfg.programmatic_stream_serialization_allowed[%cfg] %c<value>_i32`` (its
    operand is a constant, which MLIR's printer names by value)."""
    lines = [line for line in host_launch.splitlines() if PDL_OP in line]
    assert len(lines) == 1, f"expected one {PDL_OP} in the host launch, got {lines}"
    value = re.search(r"\]\s+%c(\d+)_i32\b", lines[0])
    assert value, f"the PDL attribute is not a constant: {lines[0]}"
    return int(value.group(1))


# CuTeDSL's MLIR op for the attribute (cutlass._mlir.dialects.cuda ..OPERATION_NAME; checked below),
# lowered to CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION on the cuLaunchKernelEx config.
PDL_OP = "cuda.launch_cfg.programmatic_stream_serialization_allowed"


@pytest.mark.isa
@pytest.mark.parametrize("name", list(PDL_KERNELS))
def test_kernel_waits_before_reading_and_releases_after_its_mmas(compiled, name: str) -> None:
    counts = assert_pdl_order(compiled[name]["ptx"])
    assert counts["waits"] >= 2  # seen: the TMA-load warp and the scheduler warp
    assert launch_pdl_attribute(compiled[name]["host_launch"]) == 1  # launched with the attribute


@pytest.mark.isa
def test_without_pdl_nothing_waits_and_the_launch_has_no_attribute(compiled) -> None:
    """pdl="off" (use_pdl False) is a different build: no griddepcontrol in the kernel and the
    attribute 0 on the launch (quack's own default would launch with PDL)."""
    asm = compiled["decode_alpha_off"]
    assert "griddepcontrol" not in asm["ptx"]
    assert launch_pdl_attribute(asm["host_launch"]) == 0
    assert asm["host_launch"].count("cuda.launch_cfg.create") == 1  # one kernel launch, the GEMM's


def test_pdl_op_is_cutedsl_s() -> None:
    """The op name the launch check reads is CuTeDSL's own (the DSL's generated op class)."""
    gen = pytest.importorskip("cutlass._mlir.dialects._cuda_ops_gen",
                              reason="nvidia-cutlass-dsl is not installed, so there is no CuTeDSL NVFP4 kernel")
    assert gen.LaunchCfgProgrammaticStreamSerializationAllowedOp.OPERATION_NAME == PDL_OP


def test_launch_attribute_check_reads_the_value() -> None:
    line = "cuda.launch_cfg.programmatic_stream_serialization_allowed[%104] %c{}_i32 : !cuda.launch_cfg<max_attrs = 17>, i32"
    assert launch_pdl_attribute(line.format(1)) == 1 and launch_pdl_attribute(line.format(0)) == 0
    with pytest.raises(AssertionError, match="expected one"):
        launch_pdl_attribute("cuda.launch_cfg.cooperative[%104] %c0_i32")


def test_order_check_catches_a_load_before_the_wait() -> None:
    """The check itself: moving a TMA load above the wait on one path fails it."""
    ptx = """.visible .entry k(
{
\tsetp.eq.s32 %p1, %r1, 0;
\t@%p1 bra $L__BB0_2;
\tcp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r3, %r4}], [%r5];
$L__BB0_2:
\tgriddepcontrol.wait;
\tcp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r3, %r4}], [%r5];
\ttcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16 [%r6], %rd2, %rd3, %r7, [%r8], [%r9], %p2;
\tgriddepcontrol.launch_dependents;
\tcp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd4, {%r3, %r4}], [%r2];
\tret;
}
"""
    with pytest.raises(AssertionError, match="TMA loads reachable without"):
        assert_pdl_order(ptx)
    assert assert_pdl_order(ptx.replace("\t@%p1 bra $L__BB0_2;\n", "\tbra.uni $L__BB0_2;\n"))["tma_loads"] == 2


def test_inline_asm_labels_resolve_in_their_own_scope() -> None:
    ptx = Ptx(""".entry k(
{
\t{
\tLAB_WAIT:
\tmbarrier.try_wait.parity.shared.b64 P1, [%r1], %r2;
\t@P1 bra.uni DONE;
\tbra.uni LAB_WAIT;
\tDONE:
\t}
\t{
\tLAB_WAIT:
\tmbarrier.try_wait.parity.shared.b64 P1, [%r3], %r2;
\tbra.uni LAB_WAIT;
\t}
\tret;
}
""")
    assert ptx.succ[2] == [0] and ptx.succ[4] == [3]  # each `bra LAB_WAIT` loops in its own block


def test_use_pdl_rides_to_the_op_and_is_its_own_build() -> None:
    config = C(128, 64)
    on, off = P(8, 4096, 4096, use_pdl=True), P(8, 4096, 4096)
    assert nv.extern_kwargs(on, config)["use_pdl"] is True and nv.extern_kwargs(off, config)["use_pdl"] is False
    assert nv.kernel_name(on, config).endswith("_pdl") and not nv.kernel_name(off, config).endswith("_pdl")
    assert nv._cache_key(on, config) != nv._cache_key(off, config)  # two kernels, never mixed up
    assert nv._post_init_attrs(on) == (("use_pdl", True),) and nv._post_init_attrs(off) == (("use_pdl", False),)
    assert "USE_PDL = True" in nv.render(on, config).source and "USE_PDL = False" in nv.render(off, config).source
    assert nv.render(on, config).launch["use_pdl"] is True


def test_extern_node_with_use_pdl_marks_its_consumer() -> None:
    """lowering.pdl_consumers: the node of the CuTeDSL op bound with use_pdl=True is a PDL
    producer (Inductor then launches the kernel reading its output with PDL and a gdc_wait)."""
    pytest.importorskip("torch._inductor.scheduler")
    import torch
    from torch._inductor import ir
    from torch._inductor.scheduler import ExternKernelSchedulerNode

    import inductor_ext.lowering.cutedsl_nvfp4  # noqa: F401  (defines the op)
    from inductor_ext.lowering import pdl_consumers

    def node(op: object, use_pdl: bool) -> ExternKernelSchedulerNode:
        ir_node = object.__new__(ir.ExternKernelAlloc)
        object.__setattr__(ir_node, "op_overload", op)
        object.__setattr__(ir_node, "kwargs", {"tile_m": 128, "use_pdl": use_pdl})
        sched = object.__new__(ExternKernelSchedulerNode)
        sched.node = ir_node
        return sched

    op = torch.ops.inductor_ext.nvfp4_gemm_cutedsl.default
    assert pdl_consumers.is_ext_pdl_producer(node(op, True))
    assert not pdl_consumers.is_ext_pdl_producer(node(op, False))
    assert not pdl_consumers.is_ext_pdl_producer(node(torch.ops.aten.mm.default, True))  # not ext's
