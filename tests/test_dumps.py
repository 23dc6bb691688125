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
    assert lines[0].split()[:3] == ["graph", "kernel", "template"]
    assert len(lines) == 2 and "extern_kernels.addmm" in lines[1]


def test_dumps_show_missing_dir_says_how_to_make_one(tmp_path, capsys):
    assert cli.main(["dumps", "show", str(tmp_path)]) == 2
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
