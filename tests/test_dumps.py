"""Kernel dumps: index.json contents, GPU asm capture, the table, and a real CPU compile."""

import json
import types

import pytest
import torch

from inductor_ext import cli, dumps

OUTPUT_CODE = """
# kernel path: /tmp/x.py
# Topologically Sorted Source Nodes: [linear, relu], Original ATen: [aten.addmm, aten.relu]
# Graph fragment:
#   %addmm : Tensor "f32[4, 8][8, 1]cpu" = PlaceHolder[target=addmm]
#   %relu : Tensor "f32[4, 8][8, 1]cpu"[num_users=1] = call_function[target=torch.ops.aten.relu.default](args = (%addmm,), kwargs = {})
triton_tem_fused_addmm_relu_0 = async_compile.triton('triton_tem_fused_addmm_relu_0', '''
@triton_heuristics.template(
num_stages=2,
num_warps=4,
)
@triton.jit
def triton_tem_fused_addmm_relu_0(arg_A, arg_B, out_ptr0):
    BLOCK_M : tl.constexpr = 32
    BLOCK_N : tl.constexpr = 16
    # inductor_ext template: triton.gemm
    pass
''', device_str='cuda')


cpp_fused_mul_1 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''
extern "C" void kernel(const float* in_ptr0, float* out_ptr0) {}
''')
"""


def test_parse_output_code_reads_template_config_and_nodes():
    kernels = dumps.parse_output_code(OUTPUT_CODE)
    assert [k["kernel"] for k in kernels] == ["triton_tem_fused_addmm_relu_0", "cpp_fused_mul_1"]
    tem, cpp = kernels
    assert tem["template"] == "triton.gemm" and tem["language"] == "triton"
    assert tem["config"] == {"BLOCK_M": "32", "BLOCK_N": "16", "num_stages": 2, "num_warps": 4}
    assert tem["fx_nodes"] == ["addmm", "relu"]
    assert tem["aten_ops"] == ["aten.addmm", "aten.relu"]
    assert cpp["language"] == "cpp" and cpp["template"] is None and "extern" in cpp["source"]


EXTERN_CALL = """
def call(args):
    with torch.no_grad():
        # Topologically Sorted Source Nodes: [logits, probs], Original ATen: [inductor_ext.softmax]
        # [Provenance debug handles] extern_kernels.ext_metal_softmax_threads256_chunks1:7
        buf4 = extern_kernels.ext_metal_softmax_threads256_chunks1(buf3, problem='{"dtype": "bfloat16", "n": 4096, "out_dtype": "float32", "rows": 2}', target='mps')
        buf5 = extern_kernels.mm(buf4, arg1_1)
"""


def test_extern_template_calls_are_listed_with_their_family_source(tmp_path):
    """An extern template family's call is dumped with the source its family renders for the
    call's problem (here Metal MSL), its template and config, and its own provenance."""
    from inductor_ext.templates.metal import softmax

    (kernel,) = dumps.parse_output_code(EXTERN_CALL)
    assert kernel["kernel"] == "ext_metal_softmax_threads256_chunks1.buf4" and kernel["language"] == "msl"
    assert kernel["template"] == "metal.softmax" and kernel["config"] == {"threads": 256, "chunks": 1}
    assert kernel["suffix"] == ".metal" and kernel["aten_ops"] == ["inductor_ext.softmax"]
    problem = softmax.Problem(2, 4096, "bfloat16", "float32")
    assert kernel["source"] == softmax.render(problem, softmax.Config(256, 1), "mps").source
    assert kernel["properties"] == {"provenance": "extern_kernels.ext_metal_softmax_threads256_chunks1:7"}
    gm = torch.fx.symbolic_trace(torch.nn.Identity())
    provenance = {"extern_kernels.ext_metal_softmax_threads256_chunks1:7": (["softmax"], ["model.py:3"]),
                  "extern_kernels.mm:8": (["mm"], ["model.py:4"])}
    entries = dumps.write(tmp_path, "graph000_inference", EXTERN_CALL, gm, [], provenance)
    by_kernel = {e["kernel"]: e for e in entries}
    assert by_kernel["ext_metal_softmax_threads256_chunks1.buf4"]["fx_nodes"] == ["softmax"]
    assert by_kernel["ext_metal_softmax_threads256_chunks1.buf4"]["user_source"] == ["model.py:3"]
    assert by_kernel["extern_kernels.mm:8"]["template"] == "aten"  # ATen's calls stay listed as before
    assert len(entries) == 2
    assert "kernel void softmax_row(" in (tmp_path / "graph000_inference" /
                                          "ext_metal_softmax_threads256_chunks1.buf4.metal").read_text()


def test_gpu_asm_collects_ptx_and_amdgcn_from_compiled_kernels():
    def compiled(**asm):
        return types.SimpleNamespace(kernel=types.SimpleNamespace(asm=asm))

    module_globals = {
        "triton_a": types.SimpleNamespace(compile_results=[compiled(ptx="tcgen05.mma", cubin=b"\0")]),
        "triton_b": types.SimpleNamespace(compile_results=[compiled(amdgcn="v_mfma")]),
        "interpreted": types.SimpleNamespace(compile_results=[]),
        "other": 3,
    }
    assert dumps.gpu_asm(module_globals) == {"triton_a": {"ptx": "tcgen05.mma"}, "triton_b": {"amdgcn": "v_mfma"}}


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=-1) * 2  # the line the dump must point at


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    out = tmp_path_factory.mktemp("dump")
    model, x = Block(), torch.randn(4, 16)
    with torch.no_grad():
        # Unfrozen: every kernel then comes from a user line (freezing inlines small constants
        # into kernels of their own); frozen graphs' dumps: tests/test_cpp_gemm.py.
        got = torch.compile(model, backend="ext", options={"dump_dir": str(out), "freezing": False})(x)
        assert torch.allclose(got, model(x), atol=1e-6)
    return out, dumps.read_index(out)


def test_cpu_compile_dump_names_nodes_and_user_line(dumped):
    out, index = dumped
    kernels = index["kernels"]
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "the line the dump" in text)
    generated = [k for k in kernels if k["language"] == "cpp"]
    assert generated, kernels
    for k in generated:
        assert (out / k["file"]).read_text().strip()
        assert k["fx_nodes"]
        assert any(loc.endswith(f"test_dumps.py:{line}") for loc in k["user_source"]), k
    aten = [k for k in kernels if k["language"] == "extern"]
    assert [k["kernel"].split(":")[0] for k in aten] == ["extern_kernels.addmm"]
    assert (out / kernels[0]["graph"] / "output_code.py").exists()


def test_dumps_show_prints_table_sorted_and_filtered(dumped, capsys):
    out, _ = dumped
    assert cli.main(["dumps", "show", str(out), "--sort", "kernel", "--filter", "addmm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["graph", "kernel", "file", "template"]
    assert len(lines) == 2 and "extern_kernels.addmm" in lines[1]


def test_dumps_show_missing_dir_says_how_to_make_one(tmp_path, capsys):
    assert cli.main(["dumps", "show", str(tmp_path)]) == 1  # a failure, not a usage mistake
    assert "dump_dir" in capsys.readouterr().err


def test_env_var_sets_dump_dir(tmp_path, monkeypatch):
    from inductor_ext.backend import resolve_config

    monkeypatch.setenv("INDUCTOR_EXT_DUMP_DIR", str(tmp_path))
    config, _ = resolve_config([torch.randn(2)], None, None)
    assert config.dump_dir == str(tmp_path)
    config, _ = resolve_config([torch.randn(2)], {"dump_dir": "/elsewhere"}, None)
    assert config.dump_dir == "/elsewhere"  # an explicit option wins


def test_index_is_valid_json_after_two_graphs(tmp_path):
    model = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8, requires_grad=True)
    out = torch.compile(model, backend="ext", options={"dump_dir": str(tmp_path)})(x)
    out.sum().backward()
    index = json.loads((tmp_path / "index.json").read_text())
    graphs = {k["graph"].split("_", 1)[1] for k in index["kernels"]}
    assert graphs == {"forward", "backward"}


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up_proj, self.down_proj = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.down_proj(torch.relu(self.up_proj(x)))


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = _Mlp()

    def forward(self, x):
        return x + self.mlp(x)


@pytest.fixture(scope="module")
def nested_dump(tmp_path_factory):
    """A model built only from nn.Modules (every frame is inside torch), forward and backward."""
    out = tmp_path_factory.mktemp("nested_dump")
    torch._dynamo.reset()
    model = torch.nn.Sequential(_Block(), _Block())
    compiled = torch.compile(model, backend="ext", options={"dump_dir": str(out)})
    compiled(torch.randn(4, 16, requires_grad=True)).sum().backward()
    return out


def test_module_path_normalises_dynamo_paths():
    assert dumps.module_path("L['self'].layers[0]._modules['mlp'].down_proj") == "layers.0.mlp.down_proj"
    assert dumps.module_path("L['fn'].1.mlp") == "1.mlp"
    assert dumps.module_path("L['self']") == ""


def test_every_kernel_names_its_modules(nested_dump):
    kernels = dumps.read_index(nested_dump)["kernels"]
    forward = [k for k in kernels if "forward" in k["graph"]]
    assert forward and all(k["modules"] for k in forward), [(k["kernel"], k["modules"]) for k in forward]
    named = {m for k in forward for m in k["modules"]}
    assert {"0.mlp.up_proj (Linear)", "0.mlp.down_proj (Linear)", "1.mlp.up_proj (Linear)"} <= named, named
    backward = [k for k in kernels if "backward" in k["graph"]]
    assert backward and any(k["modules"] for k in backward)


def test_dumps_show_has_a_module_column(nested_dump, capsys):
    assert cli.main(["dumps", "show", str(nested_dump)]) == 0
    table = capsys.readouterr().out
    assert "module" in table.splitlines()[0].split() and "mlp.down_proj (Linear)" in table


def test_device_codegen_kernels_are_found_through_their_own_description(monkeypatch, tmp_path):
    """A codegen's kernels (Metal, SYCL) are not Triton or C++: dumps list them because the
    codegen describes its own output, not because one regex knows every language."""
    from inductor_ext import codegen as codegens
    from inductor_ext.codegen import DeviceCodegen, KernelInfo

    code = OUTPUT_CODE + "\nmetal_k0 = msl_kernel('kernel void k0(device float* x [[buffer(0)]]) {}')\n"

    def describe(text):
        return [KernelInfo("metal_k0", "msl", "kernel void k0(device float* x [[buffer(0)]]) {}", ".metal",
                           {"threadgroup": 256})] if "msl_kernel(" in text else []

    fake = DeviceCodegen("fakemetal", ("mps",), "msl", describe_kernels=describe)
    monkeypatch.setattr(codegens, "available", lambda: {"fakemetal": fake})
    kernels = {k["kernel"]: k for k in dumps.parse_output_code(code)}
    assert set(kernels) == {"triton_tem_fused_addmm_relu_0", "cpp_fused_mul_1", "metal_k0"}
    assert kernels["metal_k0"]["language"] == "msl" and kernels["metal_k0"]["properties"] == {"threadgroup": 256}
    graph = torch.fx.symbolic_trace(lambda x: x)
    entries = dumps.write(tmp_path, "g0", code, graph, [])
    assert (tmp_path / "g0" / "metal_k0.metal").read_text().startswith("kernel void k0")
    assert {e["kernel"] for e in entries} >= {"metal_k0"}


def test_a_decision_no_kernel_or_provenance_names_is_still_indexed(tmp_path):
    """A graph served from Inductor's FX graph cache has no provenance: each of its decisions is
    indexed on its own, as an ATen call, with its node, op and decision."""
    gm = torch.fx.symbolic_trace(torch.nn.Identity())
    decision = types.SimpleNamespace(node="addmm_1", op="addmm", winner="bias_addmm", reason="cache",
                                     problem={"op": "addmm"}, candidates=[])
    entries = dumps.write(tmp_path, "graph001_inference", "def call(args):\n    pass\n", gm, [decision], {})
    (entry,) = entries
    assert entry["kernel"] == "bias_addmm" and entry["template"] == "aten" and entry["fx_nodes"] == ["addmm_1"]
    assert entry["aten_ops"] == ["addmm"] and entry["decision"]["reason"] == "cache"
    index = json.loads((tmp_path / "index.json").read_text())
    assert [k["kernel"] for k in index["kernels"]] == ["bias_addmm"]
