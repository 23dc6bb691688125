"""``inductor-ext tune build`` as a user runs it: the console script, from the folder that holds
the model's file (``mymodel:make``), or with a path (``models/mymodel.py:make``); a build that
caches nothing says why and what to do, and exits non-zero."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

MODEL = textwrap.dedent("""\
    import torch
    from helper_layers import make_layer   # a neighbour module: the file's own folder must be importable

    def make():
        torch.manual_seed(0)
        return make_layer()

    def inputs():
        return (torch.randn(4, 32),)
    """)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user_project")
    (root / "models").mkdir()
    (root / "models" / "mymodel.py").write_text(MODEL)
    (root / "models" / "helper_layers.py").write_text("import torch\n\ndef make_layer():\n"
                                                      "    return torch.nn.Linear(32, 16)\n")
    return root


def _build(cwd: Path, model: str, inputs: str, tmp: Path) -> subprocess.CompletedProcess:
    script = shutil.which("inductor-ext")
    assert script, "the inductor-ext console script is not installed (pip install -e .)"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"), "INDUCTOR_EXT_CACHE_DIR": str(tmp / "ext")}
    env.pop("PYTHONPATH", None)
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([script, "tune", "build", "--model", model, "--inputs", inputs, "--preset", "hopper",
                           "-o", str(tmp / "cache.db")], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def from_model_folder(project, tmp_path_factory):
    return _build(project / "models", "mymodel:make", "mymodel:inputs", tmp_path_factory.mktemp("a"))


def test_module_in_the_working_directory_is_found(from_model_folder):
    assert "ModuleNotFoundError" not in from_model_folder.stderr, from_model_folder.stderr[-2000:]
    assert "nothing cached" in from_model_folder.stderr, from_model_folder.stderr[-2000:]


def test_nothing_cached_says_why_and_what_to_do_and_fails(from_model_folder):
    err = from_model_folder.stderr
    assert from_model_folder.returncode == 1
    assert "none of the model's 1 GEMM problems was benchmarked" in err
    assert "Triton templates run on CPU only with options={'interpret': True}" in err
    assert "add --interpret" in err


def test_file_path_spec_from_another_folder(project, tmp_path):
    done = _build(project, "models/mymodel.py:make", "models/mymodel.py:inputs", tmp_path)
    assert "nothing cached" in done.stderr and done.returncode == 1, done.stderr[-2000:]


def test_bad_spec_names_the_forms_it_takes(project, tmp_path):
    done = _build(project, "models/nothere.py:make", "x:y", tmp_path)
    assert done.returncode == 1 and "no Python file 'models/nothere.py'" in done.stderr, done.stderr[-2000:]
