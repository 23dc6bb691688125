"""How passes are found (``lowering/passes/__init__.py``): ext's own by listing its files, so a new
pass file is found without reinstalling the package; other packages' through the
``inductor_ext.passes`` entry-point group; and what an unknown or broken one says."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
import tomllib
import types
import uuid
from pathlib import Path

import pytest

from inductor_ext import presets
from inductor_ext.comms_passes import PASSES as COMMS_PASSES
from inductor_ext.config import ExtOptionError
from inductor_ext.lowering import passes
from inductor_ext.lowering.passes.base import ExtGraphPass

PASS_SOURCE = '''
from inductor_ext.lowering.passes.base import ExtGraphPass


class {cls}(ExtGraphPass):
    name = {name!r}
    stage = "post_grad_pre"

    def run(self, graph):
        return 0
'''


@pytest.fixture
def rescan(monkeypatch):
    """The registry scanned afresh inside the test (and again after it, for the tests after)."""
    passes._scan.cache_clear()
    yield
    passes._scan.cache_clear()


def _write(folder: Path, module: str, source: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(textwrap.dedent(source))


def _new_pass_file(monkeypatch, tmp_path, module: str, pass_name: str | None = None) -> None:
    """A pass file appears in the folder ``lowering/passes`` (a second directory of the package's
    path, so the repository is not written to), as a contributor adds one."""
    folder = tmp_path / "passes_dir"
    _write(folder, module, PASS_SOURCE.format(cls="Added", name=pass_name or module))
    monkeypatch.setattr(passes, "__path__", [*passes.__path__, str(folder)])
    monkeypatch.delitem(sys.modules, f"{passes.__name__}.{module}", raising=False)


def test_every_in_tree_pass_is_found_from_the_files():
    listed = passes.available_passes()
    own = {m.rpartition(".")[2] for m in passes.pass_module_names()} - {"base", "op_offer"}
    assert own <= set(listed), own - set(listed)
    assert set(COMMS_PASSES) <= set(listed)
    for name, cls in listed.items():
        assert cls.name == name
    # ext's passes are no longer declared as entry points of its own distribution
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert passes.ENTRY_POINT_GROUP not in project.get("entry-points", {})


def test_a_new_pass_file_is_found_without_reinstalling(monkeypatch, tmp_path, rescan):
    module = f"test_added_{uuid.uuid4().hex[:8]}"
    with pytest.raises(ExtOptionError, match=f"unknown pass '{module}'"):
        presets.resolve({"passes": [module]})  # not there yet
    passes._scan.cache_clear()
    _new_pass_file(monkeypatch, tmp_path, module)
    listed = passes.available_passes()
    assert listed[module].__module__ == f"{passes.__name__}.{module}"
    assert presets.resolve({"passes": [module]}).passes == (module,)
    stages = passes.build_stages(presets.resolve({"passes": [module]}))
    assert [type(p).name for p in stages["post_grad_pre"].passes] == [module]


def test_a_pass_named_unlike_its_file_is_an_error(monkeypatch, tmp_path, rescan):
    module = f"test_misnamed_{uuid.uuid4().hex[:8]}"
    _new_pass_file(monkeypatch, tmp_path, module, pass_name="something_else")
    with pytest.raises(passes.PassError, match=f"defines pass\\(es\\) 'something_else'.*name its pass '{module}'"):
        passes.available_passes()


def test_helper_modules_are_not_passes():
    assert "base" not in passes.available_passes() and "op_offer" not in passes.available_passes()


def test_importing_the_registry_imports_no_pass_module():
    """Pass modules (and comms_passes) load when the registry is first asked, not before."""
    code = ("import sys; import inductor_ext.lowering.passes as p; "
            "print(sorted(m for m in sys.modules if m.startswith(('inductor_ext.lowering.passes.', "
            "'inductor_ext.comms_passes'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['inductor_ext.lowering.passes.base']"


def test_unknown_pass_says_which_exist_and_where_passes_come_from(rescan):
    with pytest.raises(ExtOptionError) as info:
        presets.resolve({"passes": ["no_such_pass"]})
    message = str(info.value)
    assert message.startswith("unknown pass 'no_such_pass'; available: " + ", ".join(sorted(passes.available_passes())))
    assert "inductor_ext/lowering/passes/" in message
    assert "entry point in group 'inductor_ext.passes'" in message and "none declares 'no_such_pass'" in message


# --- other packages' passes: entry points ------------------------------------------------------------


def _entry_point(name: str, value: str, dist: str) -> importlib.metadata.EntryPoint:
    ep = importlib.metadata.EntryPoint(name, value, passes.ENTRY_POINT_GROUP)
    ep._for(types.SimpleNamespace(name=dist))  # what importlib.metadata does for an installed distribution
    return ep


@pytest.fixture
def third_party(monkeypatch, tmp_path, rescan):
    """Installs fake distributions' entry points: ``install(name, value, dist)``; their modules
    live in ``tmp_path`` (on sys.path)."""
    installed: list[importlib.metadata.EntryPoint] = []
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(passes, "entry_points",
                        lambda group: [ep for ep in installed if ep.group == group])

    def install(name: str, value: str, dist: str) -> None:
        installed.append(_entry_point(name, value, dist))
        passes._scan.cache_clear()

    return types.SimpleNamespace(install=install, folder=tmp_path)


def test_a_third_party_entry_point_is_loaded(third_party, monkeypatch):
    module = f"extpkg_{uuid.uuid4().hex[:8]}"
    monkeypatch.delitem(sys.modules, module, raising=False)
    _write(third_party.folder, module, PASS_SOURCE.format(cls="Theirs", name="their_pass"))
    third_party.install("their_pass", f"{module}:Theirs", "their-pkg")
    cls = passes.available_passes()["their_pass"]
    assert cls.__module__ == module and issubclass(cls, ExtGraphPass)
    assert passes.broken_entry_points() == ()
    assert "rms_norm_op" in passes.available_passes()  # ext's own are still there
    assert presets.resolve({"passes": ["their_pass"]}).passes == ("their_pass",)


def test_a_third_party_module_that_raises_gives_one_clear_error(third_party, monkeypatch):
    module = f"extpkg_broken_{uuid.uuid4().hex[:8]}"
    monkeypatch.delitem(sys.modules, module, raising=False)
    _write(third_party.folder, module, "raise RuntimeError('needs a GPU driver')\n")
    third_party.install("broken_pass", f"{module}:Broken", "broken-pkg")
    listed = passes.available_passes()  # a broken package does not break compiles that do not use it
    assert "broken_pass" not in listed and "rms_norm_op" in listed
    presets.resolve({"passes": ["rms_norm_op"]})
    with pytest.raises(ExtOptionError) as info:
        presets.resolve({"passes": ["broken_pass"]})
    message = str(info.value)
    assert message.startswith("pass 'broken_pass' is not available: entry point 'broken_pass' = "
                              f"'{module}:Broken' of distribution 'broken-pkg'")
    assert "failed to load: RuntimeError: needs a GPU driver" in message
    with pytest.raises(ExtOptionError) as info:  # any unknown name mentions it too
        presets.resolve({"passes": ["typo_pass"]})
    assert "unknown pass 'typo_pass'" in str(info.value)
    assert "broken: entry point 'broken_pass'" in str(info.value) and "broken-pkg" in str(info.value)


def test_a_third_party_entry_point_named_unlike_its_pass_is_reported(third_party, monkeypatch):
    module = f"extpkg_renamed_{uuid.uuid4().hex[:8]}"
    monkeypatch.delitem(sys.modules, module, raising=False)
    _write(third_party.folder, module, PASS_SOURCE.format(cls="Renamed", name="new_name")
           + PASS_SOURCE.format(cls="Shadow", name="rms_norm_op"))
    third_party.install("old_name", f"{module}:Renamed", "renamed-pkg")
    third_party.install("rms_norm_op", f"{module}:Shadow", "shadow-pkg")  # ext's name: ext's pass stays
    assert "old_name" not in passes.available_passes() and "new_name" not in passes.available_passes()
    assert passes.available_passes()["rms_norm_op"].__module__ == "inductor_ext.lowering.passes.rms_norm_op"
    with pytest.raises(ExtOptionError) as info:
        presets.resolve({"passes": ["old_name"]})
    assert "names a pass called 'new_name'; the entry point's name must be the pass's name" in str(info.value)
    reasons = {b.distribution: b.reason for b in passes.broken_entry_points()}
    assert "second pass called 'rms_norm_op'" in reasons["shadow-pkg"]


def test_stale_entry_points_of_ext_itself_are_not_read(third_party):
    """An older install's metadata (ext's own passes as entry points) neither breaks nor shadows
    the files: ext's passes come from its tree."""
    third_party.install("gone_pass", "inductor_ext.lowering.passes.gone_pass:Gone", "inductor-ext")
    third_party.install("rms_norm_op", "inductor_ext.lowering.passes.rms_norm_op:RmsNormOp", "inductor-ext")
    assert "gone_pass" not in passes.available_passes()
    assert passes.broken_entry_points() == ()
