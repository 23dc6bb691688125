"""Issue 31: user mistakes on the command line end in one line and a fixed exit code (2 usage,
1 failure), and reading a cache never creates one. No compiles: every case fails before one."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from inductor_ext import cli, tune
from inductor_ext.autotune.cache import AutotuneCache, Entry, ProblemKey


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "Warning:" not in err
    return lines[0]


@pytest.fixture()
def cache_db(tmp_path: Path) -> Path:
    path = tmp_path / "c.db"
    key = ProblemKey(op="mm", shapes=[[8, 16], [16, 32]], strides=[[16, 1], [32, 1]], dtypes=["float32"] * 2,
                     device_name="cpu", arch="cpu")
    with AutotuneCache(path) as cache:
        cache.put(Entry(key=key, winner="aten", config={"name": "mm"}, winner_time_us=3.0, aten_time_us=3.0))
        cache.checkpoint()
    return path


@pytest.mark.parametrize("action", [["show"], ["export", "-o", "OUT/x.json"]])
def test_reading_a_missing_cache_creates_nothing_and_fails(tmp_path, capsys, action):
    missing = tmp_path / "no-dir" / "c.db"
    argv = [a.replace("OUT", str(tmp_path)) for a in action]
    code, out, err = _run(capsys, "tune", argv[0], str(missing), *argv[1:])
    assert code == 1 and "no such autotune cache" in _one_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither the folder nor the file


@pytest.mark.parametrize("content", [b"hello, not a database\n", b""])
def test_show_of_a_file_that_is_no_cache_is_one_line(tmp_path, capsys, content):
    bad = tmp_path / "c.db"
    bad.write_bytes(content)
    code, _, err = _run(capsys, "tune", "show", str(bad))
    assert code == 1 and "not a usable autotune cache" in _one_line(err)
    assert bad.read_bytes() == content and sorted(p.name for p in tmp_path.iterdir()) == ["c.db"]


def test_show_reads_without_writing_and_json_lists_the_entries(cache_db, capsys):
    before = cache_db.read_bytes()
    code, out, _ = _run(capsys, "tune", "show", str(cache_db), "--json")
    assert code == 0 and json.loads(out)["entries"][0]["problem"] == "mm 8x32x16 fp32"
    assert cache_db.read_bytes() == before and sorted(p.name for p in cache_db.parent.iterdir()) == ["c.db"]


def test_merge_with_a_missing_input_leaves_nothing(cache_db, tmp_path, capsys):
    out = tmp_path / "merged.db"
    code, _, err = _run(capsys, "tune", "merge", str(cache_db), str(tmp_path / "missing.db"), "-o", str(out))
    assert code == 1 and "missing.db" in _one_line(err)
    assert not any(p.name.startswith("merged") for p in tmp_path.iterdir())


def test_import_of_a_missing_file_is_one_line(tmp_path, capsys):
    code, _, err = _run(capsys, "tune", "import", str(tmp_path / "nope.json"), "-o", str(tmp_path / "c.db"))
    assert code == 1 and "nope.json" in _one_line(err)
    assert list(tmp_path.iterdir()) == []


def test_cache_only_with_a_missing_cache_warns_once_and_creates_nothing(tmp_path, caplog):
    missing = tmp_path / "no-dir" / "c.db"
    with caplog.at_level(logging.WARNING, logger="inductor_ext.autotune"):
        for _ in range(2):
            cache = AutotuneCache(missing, mode="if-exists")
            assert cache.get(ProblemKey(op="mm", shapes=[[1, 1]], strides=[[1, 1]], dtypes=["float32"],
                                        device_name="cpu", arch="cpu")) is None
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "does not exist" in r.getMessage()]
    assert len(warned) == 2 and str(missing) in warned[0].getMessage()  # once per cache object
    assert not (tmp_path / "no-dir").exists()


def test_ext_choices_reads_a_missing_cache_only_layer_without_creating_it(tmp_path):
    from inductor_ext import presets
    from inductor_ext.autotune import cache_layers
    from inductor_ext.lowering import ext_choices

    path = tmp_path / "no-dir" / "c.db"
    config = presets.resolve({"preset": "cpu", "autotune": "cache-only", "autotune_cache": str(path)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            sources = ext_choices.sources_for(config)
            assert sources.layers == [] and sources.writable.path != path
    assert not path.parent.exists()
    lines = [str(w.message) for w in caught if "does not exist" in str(w.message)]
    assert len(lines) == 1 and str(path) in lines[0]  # once per process for one version of the file
    cache_layers._layers.clear()


def test_dumps_show_on_a_corrupt_index_is_one_line(tmp_path, capsys):
    (tmp_path / "index.json").write_text('{"kernels": [')
    code, _, err = _run(capsys, "dumps", "show", str(tmp_path))
    assert code == 1 and "index.json is not valid JSON" in _one_line(err)


@pytest.mark.parametrize("argv, code, says", [
    (["tune", "build", "--model", "nosuchmod:make", "--shapes", "2x4", "-o", "X"], 1, "no module named 'nosuchmod'"),
    (["tune", "build", "--model", "m:f", "--shapes", "2x4", "--preset", "h100", "-o", "X"], 2, "unknown preset 'h100'"),
    (["demo", "--device", "foo"], 2, "invalid choice: 'foo'"),
    (["presets", "show", "nosuch"], 2, "unknown preset 'nosuch'"),
    (["tune", "show", "X", "--model", "m:f"], 2, "unrecognized arguments: --model"),  # another action's flag
    (["tune", "merge", "X", "-o", "Y"], 2, "required: B"),
])
def test_mistakes_end_in_one_line_with_the_convention_code(tmp_path, capsys, argv, code, says):
    argv = [str(tmp_path / "out.db") if a == "X" else a for a in argv]
    got, _, err = _run(capsys, *argv)
    assert got == code and says in err and "Traceback" not in err
    assert not (tmp_path / "out.db").exists()


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_demo_on_a_device_that_is_not_here_is_one_line(capsys, device):
    import torch

    if {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}[device]:
        pytest.skip(f"this machine has a {device} device, so the demo would run on it")
    code, _, err = _run(capsys, "demo", "--device", device)
    assert code == 1 and f"no {device} device on this machine" in _one_line(err)


def test_shapes_inputs_take_the_model_dtype_or_dtype(tmp_path, capsys, monkeypatch):
    (tmp_path / "bfmodel.py").write_text(  # a bf16 model that takes inputs of any float dtype
        "import torch\n\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(16, 16).to(torch.bfloat16)\n\n"
        "    def forward(self, x):\n        return self.lin(x.to(torch.bfloat16))\n\n"
        "def make():\n    return M()\n")
    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr(tune, "_compile_and_run", lambda model, inputs, options, train: seen.append(inputs[0].dtype))
    for extra, dtype in (([], "torch.bfloat16"), (["--dtype", "float16"], "torch.float16")):
        seen.clear()
        code, _, err = _run(capsys, "tune", "build", "--model", "bfmodel:make", "--shapes", "4x16",
                            "-o", str(tmp_path / "c.db"), *extra)
        assert code == 1 and "nothing cached" in err  # nothing ran, so nothing was tuned: a clean failure
        assert {str(d) for d in seen} == {dtype}


def test_version_and_python_dash_m():
    done = subprocess.run([sys.executable, "-m", "inductor_ext", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("inductor-ext ")


def _without_help(parser: argparse.ArgumentParser) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                missing += _without_help(child)
        elif not action.help:
            missing.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_argument_has_help():
    from inductor_ext.cli import comms_report

    assert _without_help(cli.build_parser()) + _without_help(comms_report.build_parser()) == []
    bare = argparse.ArgumentParser(prog="p")
    bare.add_argument("path")
    assert _without_help(bare) == ["p path"]  # the check itself sees a missing help


@pytest.mark.parametrize("argv", [["presets", "--json"], ["doctor", "--json"]])
def test_json_output(capsys, argv):
    code, out, _ = _run(capsys, *argv)
    assert code == 0 and json.loads(out)


def test_doctor_says_which_presets_can_compile_run_and_verify(capsys):
    code, out, _ = _run(capsys, "doctor", "--json")
    report = json.loads(out)
    assert {t["name"] for t in report["tools"]} >= {"ptxas", "ld.lld", "g++", "SYCL wheels", "flydsl", "helion",
                                                   "cuda-python"}
    cpu = next(p for p in report["presets"] if p["preset"] == "cpu")
    assert cpu["run"] and cpu["verify"]
    import torch

    hopper = next(p for p in report["presets"] if p["preset"] == "hopper")
    assert hopper["run"] == torch.cuda.is_available()


def test_export_into_a_missing_folder_is_one_line(cache_db, tmp_path, capsys):
    code, _, err = _run(capsys, "tune", "export", str(cache_db), "-o", str(tmp_path / "no-dir" / "c.json"))
    assert code == 1 and "no folder" in _one_line(err) and not (tmp_path / "no-dir").exists()


def test_an_existing_output_is_kept_unless_update_and_a_folder_is_named_as_one(cache_db, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert _run(capsys, "tune", "export", str(cache_db), "-o", str(out))[0] == 0
    written = out.read_bytes()
    code, _, err = _run(capsys, "tune", "export", str(cache_db), "-o", str(out))
    assert code == 1 and _one_line(err).endswith(f"{out} exists; pass --update to add to it, or name a new file")
    assert out.read_bytes() == written
    assert _run(capsys, "tune", "export", str(cache_db), "-o", str(out), "--update")[0] == 0
    code, _, err = _run(capsys, "tune", "export", str(cache_db), "-o", str(tmp_path))
    assert code == 1 and _one_line(err).endswith(f"{tmp_path} is a folder; give the JSON file to write")


def test_a_cache_that_cannot_be_renamed_into_place_is_one_error_and_leaves_nothing(cache_db, tmp_path):
    from inductor_ext.autotune import cache_transfer

    with AutotuneCache(cache_db, mode="read") as cache:
        entries = cache.entries()
    out = tmp_path / "out.db"  # a folder with a file in it: the final rename fails
    out.mkdir()
    (out / "x").write_text("")
    with pytest.raises(cache_transfer.OutputError) as caught:
        cache_transfer.write_cache(entries, out)
    assert str(caught.value) == f"{out}: Is a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db", "out.db"]


# Issue 47 item 3: a model file or factory that fails, inputs of the wrong kind or shapes the model
# refuses end in one line (1: the user's code failed; 2: a value no build accepts), before a compile.
_MODEL_FILES = {
    "syntax": "def make(:\n",
    "raises_on_import": "raise ImportError('the model needs a package that is missing')\n",
    "factory_raises": "def make():\n    raise RuntimeError('boom in the factory')\n",
    "linear": ("import torch\n\ndef make():\n    return torch.nn.Linear(64, 32)\n\n"
               "def number():\n    return 3\n\ndef raises():\n    raise ValueError('no inputs today')\n"),
}


@pytest.mark.parametrize("model, extra, code, says", [
    ("syntax:make", ["--shapes", "2x64"], 1, "syntax error at m_syntax.py:1: invalid syntax"),
    ("raises_on_import:make", ["--shapes", "2x64"], 1, "raised ImportError: the model needs a package that is missing"),
    ("factory_raises:make", ["--shapes", "2x64"], 1, "factory_raises.py:make raised RuntimeError: boom in the factory"),
    ("linear:make", ["--inputs", "linear:number"], 1, "returned a int; return the model's inputs as a tuple"),
    ("linear:make", ["--inputs", "linear:raises"], 1, "linear.py:raises raised ValueError: no inputs today"),
    ("linear:make", ["--shapes", "4x65"], 2, "--shapes: the model does not run on inputs of shape 4x65"),
    ("linear:make", ["--shapes", "1x63"], 2, "mat1 and mat2 shapes cannot be multiplied (1x63 and 64x32)"),
    ("linear:make", ["--shapes", "4x6y"], 2, "shape '4x6y' is not like 4x64x256"),
    ("linear:make", ["--shapes", "2x64", "--dtype", "fp8"], 2, "invalid choice: 'fp8'"),
])
def test_tune_build_model_mistakes_are_one_line_before_any_compile(tmp_path, capsys, model, extra, code, says):
    name, _, fn = model.partition(":")
    path = tmp_path / f"m_{name}.py"  # a name of its own: the file is imported under its stem
    path.write_text(_MODEL_FILES[name])
    extra = [f"{path}:{a.partition(':')[2]}" if a.startswith("linear:") else a for a in extra]
    out = tmp_path / "out.db"
    got, _, err = _run(capsys, "tune", "build", "--model", f"{path}:{fn}", *extra, "-o", str(out))
    says = says.replace("factory_raises.py", str(path)).replace("linear.py", str(path))
    said = [line for line in err.splitlines() if line.startswith("inductor-ext tune build")]  # after any usage
    assert got == code and len(said) == 1 and says in said[0], err
    assert "Traceback" not in err
    assert not out.exists()


def test_inputs_may_be_one_tensor_or_a_tuple_of_them():
    import torch

    x = torch.ones(2)
    assert tune._input_set("m:f", x) == (x,)
    assert tune._input_set("m:f", [x, x]) == (x, x)
    with pytest.raises(ValueError, match=r"m:f returned a dict; return the model's inputs as a tuple"):
        tune._input_set("m:f", {"x": x})


def test_presets_show_takes_json(capsys):
    code, out, err = _run(capsys, "presets", "show", "cpu", "--json")
    assert code == 0 and json.loads(out)["preset"] == "cpu", err


def test_comms_report_takes_its_options(capsys, monkeypatch):
    """Issue 47 item 3: argparse.REMAINDER swallowed nothing that starts with '-': every option of
    `comms report` was "unrecognized"."""
    from inductor_ext.cli import comms_report

    code, out, _ = _run(capsys, "comms", "report", "--help")
    assert code == 0 and "--layers" in out and "--json" in out
    seen = {}

    def run_report(**kw):
        seen.update(kw)
        return {"arms": {}}

    monkeypatch.setattr(comms_report, "run_report", run_report)
    code, out, err = _run(capsys, "comms", "report", "--json", "--layers", "1")
    assert code == 0 and seen["layers"] == 1 and json.loads(out)["arms"] == {}, err
    for argv, says in ((["--layers", "x"], "argument --layers: invalid int value: 'x'"),
                       (["--bogus"], "unrecognized arguments: --bogus")):
        code, _, err = _run(capsys, "comms", "report", *argv)
        assert code == 2 and says in err.splitlines()[-1] and "Traceback" not in err
