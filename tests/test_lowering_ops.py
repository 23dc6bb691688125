"""lowering/ops/: one module per op, found by listing the folder, loaded by the installer, and
hashed as a folder into the autotune cache key (no hand list to forget)."""

import shutil
import subprocess
import sys
import types

import pytest

from inductor_ext.lowering import ops
from inductor_ext.templates import registry


def test_every_op_a_family_claims_has_its_glue_in_an_op_module():
    claimed = {op: name for name, module in registry.families().items() for op in module.ops}
    missing = {op: family for op, family in claimed.items() if op not in ops.specs()}
    assert not missing, f"families claim ops no module in lowering/ops/ describes: {missing}"
    assert ops.op_inputs("no_such_op", None).startswith("ext offers no templates for 'no_such_op'")


def test_an_op_claimed_by_two_modules_is_refused_naming_both(monkeypatch):
    first = types.SimpleNamespace(__name__="ops.first", SPECS={"mm": lambda k: "first"})
    second = types.SimpleNamespace(__name__="ops.second", SPECS={"mm": lambda k: "second"})
    monkeypatch.setattr(ops, "modules", lambda: (first, second))
    ops.specs.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="'mm' is claimed by both ops.first and ops.second"):
            ops.specs()
    finally:
        ops.specs.cache_clear()


def test_the_folder_hash_sees_a_new_op_module_and_an_edited_one(tmp_path, monkeypatch):
    folder = tmp_path / "ops"
    shutil.copytree(ops._FOLDER, folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(ops, "_FOLDER", folder)
    before = ops.sources_hash()
    (folder / "new_op.py").write_text('SPECS = {"new_op": None}\n')
    added = ops.sources_hash()
    (folder / "_spec.py").write_text((folder / "_spec.py").read_text() + "\n# a helper changed\n")
    assert len({before, added, ops.sources_hash()}) == 3
    assert "new_op" in ops.module_names() and "_spec" not in ops.module_names()


def test_lowerings_are_registered_by_the_installer_not_by_importing_ext_choices():
    code = """
import sys
import torch
from torch._inductor.lowering import lowerings
import inductor_ext.lowering.ext_choices
from inductor_ext.kernels.norm_ops import OP
before = [m for m in sys.modules if m.startswith("inductor_ext.lowering.ops.") and not m.rpartition(".")[2].startswith("_")]
assert not before and OP not in lowerings, before
from inductor_ext import presets
from inductor_ext.lowering import install, ops
install.inductor_patches(presets.resolve({"preset": "cpu"}))
loaded = sorted(m.rpartition(".")[2] for m in sys.modules if m.startswith("inductor_ext.lowering.ops.")
                and not m.rpartition(".")[2].startswith("_"))
assert loaded == ops.module_names() and OP in lowerings, loaded
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
