"""Kernel text kept in a resource file beside its family (``templates/base.py`` ``resource_text``) is
part of the family's source hash, so editing the file misses the autotune cache as editing the
module does; and the wheel ships every such file (``[tool.setuptools.package-data]``)."""

from __future__ import annotations

import fnmatch
import importlib
import sys
import tomllib
from pathlib import Path

from inductor_ext import presets
from inductor_ext.lowering import template_keys
from inductor_ext.templates import base
from inductor_ext.templates.cpp import flash_attention

ROOT = Path(__file__).resolve().parents[1]


def _package(tmp_path, monkeypatch, kernel: str):
    """A package ``resfam`` with a module that reads ``kernel.cpp`` at import, as a family does."""
    pkg = tmp_path / "resfam"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "family.py").write_text("from inductor_ext.templates.base import resource_text\n"
                                   "KERNEL = resource_text(__name__, 'kernel.cpp')\n")
    (pkg / "kernel.cpp").write_text(kernel)
    (pkg / "plain.py").write_text("KERNEL = 'int f() { return 1; }'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("resfam", "resfam.family", "resfam.plain"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(base, "_resources", {})
    return pkg


def test_editing_a_resource_file_changes_the_module_hash(tmp_path, monkeypatch):
    pkg = _package(tmp_path, monkeypatch, "int f() { return 1; }\n")
    module = importlib.import_module("resfam.family")
    assert module.KERNEL == "int f() { return 1; }\n"
    first = base.module_source_hash(module)
    (pkg / "kernel.cpp").write_text("int f() { return 2; }\n")  # the .py is untouched
    module = importlib.reload(module)
    assert module.KERNEL == "int f() { return 2; }\n"
    assert base.module_source_hash(module) != first


def test_a_module_without_resources_keeps_the_hash_of_its_source(tmp_path, monkeypatch):
    import hashlib
    import inspect

    _package(tmp_path, monkeypatch, "")
    plain = importlib.import_module("resfam.plain")
    assert base.module_source_hash(plain) == hashlib.sha256(inspect.getsource(plain).encode()).hexdigest()[:16]


def test_flash_attention_kernel_text_enters_the_cache_key(monkeypatch):
    """The key of a compile that enables ``cpp.flash_attention`` moves when its .cpp text does."""
    cpp = Path(flash_attention.__file__).with_name("flash_attention.cpp")
    assert flash_attention.KERNEL == cpp.read_text(encoding="utf-8")
    config = presets.resolve({"preset": "cpu"})
    assert "cpp.flash_attention" in config.templates

    def fresh_hash(module):  # a new hashing function: template_keys keeps a hash per function
        return base.module_source_hash(module)

    monkeypatch.setattr(template_keys, "module_source_hash", fresh_hash)
    before = template_keys.templates_hash(config)
    edited = {**base._resources[flash_attention.__name__]}
    edited["flash_attention.cpp"] += "// edited\n"
    monkeypatch.setitem(base._resources, flash_attention.__name__, edited)
    monkeypatch.setattr(template_keys, "module_source_hash", lambda module: fresh_hash(module))
    assert template_keys.templates_hash(config) != before


def test_every_resource_file_a_family_reads_ships_in_the_wheel():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    registry = importlib.import_module("inductor_ext.templates.registry")
    registry.families()  # import every family: each reads its resources at import
    assert base._resources, "no family reads a resource file: this test would check nothing"
    for module_name, read in base._resources.items():
        package = module_name.rpartition(".")[0]
        for name in read:
            assert any(fnmatch.fnmatch(name, p) for p in package_data.get(package, ())), (package, name)
