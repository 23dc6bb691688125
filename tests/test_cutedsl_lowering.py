"""The CuTeDSL NVFP4 GEMM as an autotune choice of ``inductor_ext::nvfp4_gemm`` (sm_100a).

No GPU here: the choices are built on Inductor IR for a CUDA device (nothing runs), and the
launch path is checked up to quack's entry point, whose arguments must describe the same GEMM
as the op's (the kernel itself is proven at tier I in test_cutedsl_nvfp4.py).
"""

import pytest
import torch
from torch._inductor import ir
from torch._inductor.graph import GraphLowering
from torch._inductor.virtualized import V

from inductor_ext import dumps, presets, targets
from inductor_ext.kernels import nvfp4_ops
from inductor_ext.kernels.nvfp4 import e2m1_to_float, from_blocked, quantize_nvfp4, to_blocked, unpack_e2m1
from inductor_ext.lowering.refusals import Refusal
from inductor_ext.lowering import adapters, cutedsl_nvfp4, decision_record, ext_choices
from inductor_ext.lowering.ops import FixedKernelInputs
from inductor_ext.lowering.ops import nvfp4_gemm as nvfp4_lowering
from inductor_ext.templates import registry
from inductor_ext.templates.cutedsl import nvfp4_gemm as template
from _script_runner import interpret_env, run_json_script

CUDA = torch.device("cuda", 0)
FAMILY = "cutedsl.nvfp4_gemm"


def _buffer(name, size, dtype, stride=None, device=CUDA):
    return ir.InputBuffer(name=name, layout=ir.FixedLayout(device, dtype, list(size), stride))


@pytest.fixture
def graph():
    with V.set_graph_handler(GraphLowering(torch.fx.symbolic_trace(lambda x: x))):
        yield


def _inputs(m=16, n=256, k=512, *, bias=None, activation="none", b_stride=None, device=CUDA):
    fp4, e4m3 = torch.float4_e2m1fn_x2, torch.float8_e4m3fn
    nodes = [_buffer("a", (m, k // 2), fp4, device=device),
             _buffer("b", (k // 2, n), fp4, b_stride or [1, k // 2], device=device),
             _buffer("sa", (512,), e4m3, device=device), _buffer("sb", (512,), e4m3, device=device),
             _buffer("alpha", (), torch.float32, [], device=device)]
    if bias is not None:
        nodes.append(_buffer("bias", (n,), bias, device=device))
    layout = ir.FixedLayout(device, torch.bfloat16, [m, n])
    kernel_inputs = FixedKernelInputs(nodes, layout, {"activation": activation, "out_dtype": torch.bfloat16})
    return kernel_inputs, nodes, layout


def _aten(nodes, layout):
    kwargs = {"activation": "none", "out_dtype": torch.bfloat16, "alpha_dtype": torch.float32}
    if len(nodes) == 5:
        kwargs["bias"] = None
    return nvfp4_lowering.ATEN_CHOICE.bind(tuple(nodes), layout, **kwargs)


def _offer(monkeypatch, tmp_path, kernel_inputs, nodes, layout, **options):
    monkeypatch.setattr(targets, "device_name", lambda device: "NVIDIA B200")  # no GPU to ask
    config = presets.resolve({"preset": "blackwell", "templates": [FAMILY],
                              "autotune_cache": str(tmp_path / "cache.db"), **options})
    choices = ext_choices.ExtChoices(config)
    return choices, choices.offer("nvfp4_gemm", kernel_inputs, [_aten(nodes, layout)])


def test_blackwell_preset_offers_it():
    assert FAMILY in presets.resolve({"preset": "blackwell"}).templates


@pytest.mark.parametrize("bias", [None, torch.bfloat16])
def test_offered_beside_aten_on_sm100(graph, monkeypatch, tmp_path, bias):
    kernel_inputs, nodes, layout = _inputs(bias=bias)
    _, offered = _offer(monkeypatch, tmp_path, kernel_inputs, nodes, layout)
    decision = decision_record.decisions[-1]
    assert offered[0].name == "nvfp4_gemm_aten"
    ours = offered[1:]
    assert ours and all(c.name.startswith("ext_cutedsl_nvfp4_gemm_") for c in ours)
    assert [c["family"] for c in decision.candidates] == ["aten"] + [FAMILY] * len(ours)
    expected = template.configs(template.NvFp4GemmProblem(16, 256, 512, bias=bias is not None), "sm_100a")
    assert [c["config_dict"] for c in decision.candidates[1:]] == [vars(c) for c in expected[:len(ours)]]
    first = ours[0]
    # M = 16 under pdl="auto": the op is told to release the kernel after it (issue 30)
    assert first.kwargs == {**({"bias": None} if bias is None else {}), **vars(expected[0]), "use_pdl": True}
    assert list(first.input_nodes) == nodes
    assert first.to_callable().func is cutedsl_nvfp4.OP
    assert decision.reason == "benchmark"


@pytest.mark.parametrize("case, why", [
    ("cpu", "runs only on an sm_100 GPU"),
    ("activation", "activation 'gelu'"),
    ("b_not_k_major", "not K-major"),
    ("k_not_32", "K=48 is not a multiple of 32"),
    ("bias_fp16", "bias dtype torch.float16"),
])
def test_prepare_refuses_what_it_cannot_serve(graph, case, why):
    kwargs = {"cpu": dict(device=torch.device("cpu")), "activation": dict(activation="gelu"),
              "b_not_k_major": dict(b_stride=[256, 1], n=256, k=512), "k_not_32": dict(k=48),
              "bias_fp16": dict(bias=torch.float16)}[case]
    kernel_inputs, _, _ = _inputs(**kwargs)
    refused = adapters.prepare(registry.get(FAMILY), kernel_inputs, "nvfp4_gemm")
    assert isinstance(refused, Refusal) and refused.stage == "problem" and why in refused.reason, refused


def test_not_offered_off_sm100(graph, monkeypatch, tmp_path):
    kernel_inputs, nodes, layout = _inputs()
    monkeypatch.setattr(targets, "device_name", lambda device: "NVIDIA H200")
    config = presets.resolve({"preset": "hopper", "templates": [FAMILY], "autotune_cache": str(tmp_path / "c.db")})
    offered = ext_choices.ExtChoices(config).offer("nvfp4_gemm", kernel_inputs, [_aten(nodes, layout)])
    assert [c.name for c in offered] == ["nvfp4_gemm_aten"]
    assert decision_record.decisions[-1].reason == "fallback: verified for sm_100a, not target sm_90a"


@pytest.mark.parametrize("cutedsl_ms, winner", [(0.5, "cutedsl"), (0.99, "aten")])
def test_margin_counts_it_as_a_template_not_as_aten(graph, monkeypatch, tmp_path, cutedsl_ms, winner):
    """Both are extern kernels to Inductor; the margin rule must still see ours as a template."""
    kernel_inputs, nodes, layout = _inputs()
    choices, offered = _offer(monkeypatch, tmp_path, kernel_inputs, nodes, layout, template_margin=0.05)
    aten, ours = offered[0], offered[1]
    timings = {aten: 1.0, ours: cutedsl_ms, **{c: float("inf") for c in offered[2:]}}
    chosen = choices.override_best_choice(min(timings, key=timings.get), timings)
    assert chosen is (ours if winner == "cutedsl" else aten)
    entry = ext_choices.cache_for(choices.config).get(decision_record.decisions[-1].key)
    assert entry.winner == (FAMILY if winner == "cutedsl" else "aten")


def test_cached_winner_comes_back_as_the_one_choice(graph, monkeypatch, tmp_path):
    kernel_inputs, nodes, layout = _inputs()
    choices, offered = _offer(monkeypatch, tmp_path, kernel_inputs, nodes, layout)
    timings = {c: 1.0 for c in offered} | {offered[2]: 0.25}
    choices.override_best_choice(offered[2], timings)
    _, again = _offer(monkeypatch, tmp_path, kernel_inputs, nodes, layout)
    assert [c.name for c in again] == [offered[2].name]
    assert again[0].kwargs == offered[2].kwargs
    assert decision_record.decisions[-1].reason == "cache"


def test_op_says_it_needs_a_gpu():
    a = torch.zeros(1, 16, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    with pytest.raises(RuntimeError, match="runs only on an sm_100 GPU; got tensors on cpu"):
        cutedsl_nvfp4.nvfp4_gemm_cutedsl(a, a.t(), torch.zeros(512, dtype=torch.float8_e4m3fn),
                                         torch.zeros(512, dtype=torch.float8_e4m3fn),
                                         torch.ones((), dtype=torch.float32), None, 128, 64, 1, 1, False)


def _fake_launch_quack(problem, config, A, B, D, SFA, SFB, epi_values):
    """The template's quack launch (``_launch_quack``) for NVFP4, in plain torch:
    D = alpha * (A @ B^T) + bias, A (M, K/2) and B (N, K/2) K-major fp4, SFA/SFB 5-D blocked e4m3
    scales, epi_values quack's epilogue values (alpha, the (1, N) bias row)."""
    assert A.stride(-1) == 1 and B.stride(-1) == 1, "quack reads both operands K-major"
    assert SFA.dim() == 5 and SFB.dim() == 5 and SFA.shape[2:] == (32, 4, 4)

    def dequant(q, sf):
        rows, k = q.shape[0], 2 * q.shape[1]
        values = e2m1_to_float(unpack_e2m1(q.contiguous().view(torch.uint8)))
        scales = from_blocked(sf.reshape(-1), rows, k // 16).float()
        return (values.view(rows, -1, 16) * scales.unsqueeze(-1)).view(rows, k)

    alpha, bias = epi_values["alpha"], epi_values["mRowVecBroadcast"]
    out = dequant(A, SFA) @ dequant(B, SFB).t()
    out = out * (alpha.float() if isinstance(alpha, torch.Tensor) else 1.0 if alpha is None else alpha)
    if bias is not None:
        out = out + bias.float()
    D.copy_(out.to(D.dtype))
    _fake_launch_quack.calls.append({"tile": (config.tile_m, config.tile_n, config.cluster_m, config.cluster_n),
                                     "use_pdl": problem.use_pdl})


@pytest.mark.parametrize("m, n, k, has_bias, use_pdl", [(1, 64, 64, False, False), (16, 136, 96, True, True),
                                                        (130, 256, 512, True, False)])
def test_launch_hands_quack_the_ops_gemm(monkeypatch, m, n, k, has_bias, use_pdl):
    """The op's _scaled_mm-order arguments reach quack as the same GEMM: the result through
    quack's contract equals the op's reference (B transposed back, scales, alpha, bias), and
    use_pdl picks the build."""
    _fake_launch_quack.calls = []
    monkeypatch.setattr(template, "_launch_quack", _fake_launch_quack)
    gen = torch.Generator().manual_seed(m * n + k)
    a_q, b_q = quantize_nvfp4(torch.randn(m, k, generator=gen)), quantize_nvfp4(torch.randn(n, k, generator=gen))
    fp4 = torch.float4_e2m1fn_x2
    a, b = a_q.qdata.view(fp4), b_q.qdata.view(fp4).t()  # _scaled_mm's B: the weight's [K/2, N] view
    sa, sb = to_blocked(a_q.scales), to_blocked(b_q.scales)
    alpha = (a_q.global_scale * b_q.global_scale * 1.25).reshape(()).float()
    bias = torch.randn(n, generator=gen).to(torch.bfloat16) if has_bias else None
    config = template.NvFp4GemmConfig(128, 64, 1, 2)
    out = cutedsl_nvfp4.launch(a, b, sa, sb, alpha, bias, config, use_pdl=use_pdl)
    expected = nvfp4_ops.reference(a, b, sa, sb, alpha, bias, "none", torch.bfloat16, torch.float32)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert _fake_launch_quack.calls == [{"tile": (128, 64, 1, 2), "use_pdl": use_pdl}]
    assert out.shape == (m, n) and out.dtype == torch.bfloat16


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return run_json_script("_cutedsl_codegen_script.py", env=interpret_env(tmp_path_factory.mktemp("cutedsl_codegen")))


def test_compiled_graph_calls_the_winning_config(compiled):
    """The generated wrapper calls the op with the config autotuning picked (kwargs and all)."""
    (decision,) = compiled["decisions"]
    assert decision["winner"].startswith("ext_cutedsl_nvfp4_gemm_"), decision
    assert decision["reason"] == "force_template=cutedsl.nvfp4_gemm"
    assert decision["candidates"][0] == "nvfp4_gemm_aten" and len(decision["candidates"]) > 2
    config = decision["winner"].removeprefix("ext_cutedsl_nvfp4_gemm_")
    tile, cluster = config.split("_c")
    tile_m, tile_n = tile.split("x")
    cluster_m, cluster_n = cluster.split("x")
    assert f"extern_kernels.{decision['winner']}(" in compiled["code"]
    # pdl="auto" (the preset's) at M = 8: the op is told so, which marks the kernel after it (issue 30)
    for kwarg in (f"tile_m={tile_m}", f"tile_n={tile_n}", f"cluster_m={cluster_m}", f"cluster_n={cluster_n}",
                  "use_pdl=True"):
        assert kwarg in compiled["code"], kwarg
    assert compiled["quack_calls"] > len(decision["candidates"]) - 1  # benchmarked, then run
    assert compiled["quack_use_pdl"] == [True]  # benchmarked and run as the PDL build
    # the dumps index gives the call's config and PDL with it (dumps.write's entry for the call)
    kwargs = dumps._ext_op_kwargs(compiled["code"], f"extern_kernels.{decision['winner']}:1")
    assert kwargs["use_pdl"] is True and kwargs["tile_m"] == int(tile_m), kwargs


def test_compiled_graph_gives_the_reference_numbers(compiled):
    # alpha is rounded to bf16 by the model (torchao's form) and applied once in fp32: one bf16 ulp
    assert compiled["max_err"] <= compiled["max_ref"] * 2**-7, compiled


def test_every_config_is_callable_from_cached_code_in_a_new_process():
    """A compiled graph loaded from the FX graph cache calls extern_kernels.<choice> without any
    lowering having run: importing ext's choices must register every config."""
    import subprocess
    import sys

    names = [f"ext_cutedsl_nvfp4_gemm_{c.name()}" for c in template.ALL_CONFIGS]
    code = ("import inductor_ext.lowering.ext_choices\n"
            "from torch._inductor.select_algorithm import extern_kernels\n"
            f"missing = [n for n in {names!r} if getattr(extern_kernels, n, None) is None]\n"
            "print(missing)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
