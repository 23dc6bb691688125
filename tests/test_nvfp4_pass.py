"""lowering/nvfp4_alpha_fold.py: golden post-grad graphs before and after, where it must not
fire, and the fused graph's numbers on CPU against the reference."""

import expecttest
import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

from inductor_ext.kernels import nvfp4, nvfp4_ops, scaled_gemm

FP4 = torch.float4_e2m1fn_x2
M, N, K = 8, 32, 64


def _quantized(rows, seed):
    torch.manual_seed(seed)
    return nvfp4.quantize_nvfp4(torch.randn(rows, K))


W, X = _quantized(N, 0), _quantized(M, 1)
ARGS = (X.qdata.view(FP4), nvfp4.to_blocked(X.scales), X.global_scale)


class NvFp4Linear(torch.nn.Module):
    """ModelOpt-style: _scaled_mm in bf16, times the global scale, plus bias, then act."""

    def __init__(self, act=None, alpha_form="torchao", bias=True):
        super().__init__()
        self.act, self.alpha_form = act, alpha_form
        self.register_buffer("w", W.qdata.view(FP4))
        self.register_buffer("ws", nvfp4.to_blocked(W.scales))
        self.register_buffer("wg", W.global_scale)
        torch.manual_seed(2)
        self.bias = torch.nn.Parameter(torch.randn(N, dtype=torch.bfloat16)) if bias else None

    def forward(self, xq, xs, xg):
        y = torch._scaled_mm(xq, self.w.t(), xs, self.ws, out_dtype=torch.bfloat16)
        if self.alpha_form == "torchao":
            y = y * (xg * self.wg).to(torch.bfloat16)
        elif self.alpha_form == "modelopt":  # a 0-d fp32 tensor: eager multiplies in fp32
            y = y * (xg * self.wg)
        elif self.alpha_form == "python":
            y = y * 0.5
        elif self.alpha_form == "vector":  # not a scalar: must not fire
            y = y * torch.ones(N, dtype=torch.bfloat16)
        if self.bias is not None:
            y = y + self.bias
        return self.act(y) if self.act is not None else y


class Recorder:
    """Keeps the post-grad graph's code, after ext's post_grad_pre passes ran."""

    def __init__(self):
        self.code = None

    def __call__(self, graph):
        self.code = graph.python_code("self").src

    def uuid(self):
        return None  # no caching: each compile must reach this pass


def compile_graph(model, passes, runs=True):
    """(output, post-grad code, Inductor output code); an unfused fp4 graph cannot run on CPU."""
    rec = Recorder()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="ext", options={
        # freezing (on in the cpu preset) would turn the weights into constants of these goldens
        "passes": passes, "freezing": False,
        "inductor": {"post_grad_custom_post_pass": rec, "fx_graph_cache": False}})
    with torch.no_grad():
        if not runs:
            with pytest.raises(Exception, match="Invalid scaling configuration"):
                compiled(*ARGS)
            return None, rec.code, None
        out, codes = run_and_get_code(compiled, *ARGS)
    return out, rec.code, codes[0]


def _body(code):
    return "\n".join(l.strip() for l in code.splitlines() if "=" in l and "return" not in l)


def test_torchao_form_golden_before_and_after():
    _, before, _ = compile_graph(NvFp4Linear(torch.relu), [], runs=False)
    expecttest.assert_expected_inline(_body(before), """\
permute = torch.ops.aten.permute.default(arg0_1, [1, 0]);  arg0_1 = None
_scaled_mm = torch.ops.aten._scaled_mm.default(arg2_1, permute, arg3_1, arg1_1, None, None, torch.bfloat16);  arg2_1 = permute = arg3_1 = arg1_1 = None
mul = torch.ops.aten.mul.Tensor(arg5_1, arg4_1);  arg5_1 = arg4_1 = None
convert_element_type = torch.ops.prims.convert_element_type.default(mul, torch.bfloat16);  mul = None
mul_1 = torch.ops.aten.mul.Tensor(_scaled_mm, convert_element_type);  _scaled_mm = convert_element_type = None
add = torch.ops.aten.add.Tensor(mul_1, arg6_1);  mul_1 = arg6_1 = None
relu = torch.ops.aten.relu.default(add);  add = None""")
    _, after, _ = compile_graph(NvFp4Linear(torch.relu), ["nvfp4_alpha_fold"])
    expecttest.assert_expected_inline(_body(after), """\
permute = torch.ops.aten.permute.default(arg0_1, [1, 0]);  arg0_1 = None
mul = torch.ops.aten.mul.Tensor(arg5_1, arg4_1);  arg5_1 = arg4_1 = None
nvfp4_gemm_default = torch.ops.inductor_ext.nvfp4_gemm.default(arg2_1, permute, arg3_1, arg1_1, mul, arg6_1, 'relu', torch.bfloat16, torch.bfloat16);  arg2_1 = permute = arg3_1 = arg1_1 = mul = arg6_1 = None""")


def test_python_scalar_alpha_and_decomposed_silu_golden():
    _, after, _ = compile_graph(NvFp4Linear(F.silu, alpha_form="python", bias=False), ["nvfp4_alpha_fold"])
    expecttest.assert_expected_inline(_body(after), """\
permute = torch.ops.aten.permute.default(arg0_1, [1, 0]);  arg0_1 = None
scalar_tensor_default = torch.ops.aten.scalar_tensor.default(0.5, dtype = torch.float32)
nvfp4_gemm_default = torch.ops.inductor_ext.nvfp4_gemm.default(arg2_1, permute, arg3_1, arg1_1, scalar_tensor_default, None, 'silu', torch.bfloat16, torch.float32);  arg2_1 = permute = arg3_1 = arg1_1 = scalar_tensor_default = None""")


def test_modelopt_form_keeps_alpha_fp32_golden():
    _, after, _ = compile_graph(NvFp4Linear(alpha_form="modelopt"), ["nvfp4_alpha_fold"])
    # the last argument is the dtype alpha was rounded to: fp32, i.e. not rounded
    expecttest.assert_expected_inline(_body(after), """\
permute = torch.ops.aten.permute.default(arg0_1, [1, 0]);  arg0_1 = None
mul = torch.ops.aten.mul.Tensor(arg5_1, arg4_1);  arg5_1 = arg4_1 = None
nvfp4_gemm_default = torch.ops.inductor_ext.nvfp4_gemm.default(arg2_1, permute, arg3_1, arg1_1, mul, arg6_1, 'none', torch.bfloat16, torch.float32);  arg2_1 = permute = arg3_1 = arg1_1 = mul = arg6_1 = None""")


@pytest.mark.parametrize("form, alpha_dtype", [("modelopt", torch.float32), ("torchao", torch.bfloat16)])
def test_alpha_is_rounded_exactly_as_the_model_says(form, alpha_dtype):
    """alpha rounded to bf16 is off by up to 2^-9: within any bf16 tolerance, so compare exactly
    with the fused op's reference at the model's alpha dtype (fp32 for ModelOpt's 0-d tensor,
    bf16 for torchao's cast), and check that the other dtype would differ."""
    model = NvFp4Linear(alpha_form=form)
    out, _, _ = compile_graph(model, ["nvfp4_alpha_fold"])
    alpha = X.global_scale * W.global_scale
    args = (ARGS[0], W.qdata.view(FP4).t(), ARGS[1], nvfp4.to_blocked(W.scales))
    want, other = (nvfp4_ops.reference(*args, alpha, model.bias, "none", torch.bfloat16, dtype)
                   for dtype in (alpha_dtype, ({torch.float32, torch.bfloat16} - {alpha_dtype}).pop()))
    assert alpha.to(torch.bfloat16).float() != alpha and not torch.equal(want, other)
    assert torch.equal(out, want)


@pytest.mark.parametrize("act, name", [(None, "none"), (torch.relu, "relu"), (F.gelu, "gelu"),
                                       (lambda y: F.gelu(y, approximate="tanh"), "gelu_tanh"), (F.silu, "silu")])
def test_fused_graph_matches_reference_and_has_no_separate_multiply(act, name):
    model = NvFp4Linear(act)
    out, after, code = compile_graph(model, ["nvfp4_alpha_fold"])
    alpha_bf16 = (X.global_scale * W.global_scale).to(torch.bfloat16).float()
    pre_activation = scaled_gemm.scaled_mm_reference(X, W, alpha=alpha_bf16, bias=model.bias.float(),
                                                     out_dtype=torch.float32)
    want = nvfp4_ops.apply_activation(pre_activation, name)
    # the output is rounded to bf16 once: within a bf16 ulp of the fp32 reference
    torch.testing.assert_close(out.float(), want, rtol=2**-7, atol=1e-3)
    assert "nvfp4_gemm" in code and "_scaled_mm" not in code
    # nothing is left after the GEMM: its epilogue is fused (the one mul computes alpha itself)
    assert after.strip().endswith("return (nvfp4_gemm_default,)")
    assert "aten.add" not in after and after.count("aten.mul") == 1


class UsedTwice(NvFp4Linear):
    def forward(self, xq, xs, xg):
        y = torch._scaled_mm(xq, self.w.t(), xs, self.ws, out_dtype=torch.bfloat16)
        return y * (xg * self.wg).to(torch.bfloat16), y.sum()


class MxFp4(NvFp4Linear):
    """e8m0 scales (MXFP4): another format, not this pass's."""

    def forward(self, xq, xs, xg):
        e8m0 = torch.ones(xs.shape, dtype=torch.float8_e8m0fnu)
        y = torch._scaled_mm(xq, self.w.t(), e8m0, e8m0, out_dtype=torch.bfloat16)
        return y * (xg * self.wg).to(torch.bfloat16)


class WithScaledMmBias(NvFp4Linear):
    def forward(self, xq, xs, xg):
        y = torch._scaled_mm(xq, self.w.t(), xs, self.ws, bias=self.bias, out_dtype=torch.bfloat16)
        return y * (xg * self.wg).to(torch.bfloat16)


class VectorAlpha(NvFp4Linear):
    def __init__(self):
        super().__init__(torch.relu, alpha_form="vector")


@pytest.mark.parametrize("model_cls", [VectorAlpha, UsedTwice, MxFp4, WithScaledMmBias])
def test_does_not_fire(model_cls):
    _, after, _ = compile_graph(model_cls(), ["nvfp4_alpha_fold"], runs=False)
    assert after is not None and "nvfp4_gemm" not in after and "_scaled_mm" in after


def test_reference_op_matches_kernels_reference():
    alpha = X.global_scale * W.global_scale
    got = nvfp4_ops.reference(ARGS[0], W.qdata.view(FP4).t(), ARGS[1], nvfp4.to_blocked(W.scales), alpha,
                              None, "relu", torch.float32, torch.float32)
    want = scaled_gemm.scaled_mm_reference(X, W, activation="relu", out_dtype=torch.float32)
    torch.testing.assert_close(got, want)
