"""inductor_ext where optional toolchains are not installed (macOS has no Triton, aarch64 no FlyDSL).

``python _hidden_toolchain_script.py CASES_JSON``: CASES_JSON maps a case name to
[modules, distributions]: top-level modules made unimportable (a meta-path finder raising
ImportError, as a missing package does) and distributions made unknown to ``importlib.metadata``
(the SYCL wheels hold no Python module; ext finds them by their metadata). The first case is
imported under and compiles a tiny model on the cpu preset (ext's C++ GEMM family forced, so
the trace holds one of ext's kernels under any TORCH_TRACE the caller set); then each case in turn, with the
registry's caches cleared, lists the families the registry calls unavailable and what every
preset's ``presets.describe`` (``inductor-ext presets show``) says it lacks. No hidden module is
ever loaded (checked before each case), so hiding one is as good as a fresh process without it.
Prints one JSON line: {"matches": bool, "cases": {name: {"unavailable": ..., "presets": ...}}}.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import json
import sys

cases: dict[str, list[str]] = json.loads(sys.argv[1])
hidden_modules: set[str] = set()
hidden_dists: set[str] = set()


class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201 - the finder protocol
        if name.split(".")[0] in hidden_modules:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Hide())
_real_distribution = importlib.metadata.distribution


def _distribution(name: str) -> importlib.metadata.Distribution:
    if name.replace("_", "-").lower() in hidden_dists:
        raise importlib.metadata.PackageNotFoundError(name)
    return _real_distribution(name)


importlib.metadata.distribution = _distribution  # files() and version() go through it


def hide(case: str) -> None:
    modules, distributions = cases[case]
    hidden_modules.clear()
    hidden_modules.update(m for m in modules.split(",") if m)
    hidden_dists.clear()
    hidden_dists.update(d for d in distributions.split(",") if d)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in hidden_modules)
    if loaded:  # find_spec would answer from sys.modules: the case would prove nothing
        raise SystemExit(f"case {case}: {loaded} were loaded by an earlier step")


hide(next(iter(cases)))

import torch  # noqa: E402

import inductor_ext  # noqa: E402,F401
from inductor_ext import presets  # noqa: E402
from inductor_ext.runtime.sycl import wheels  # noqa: E402
from inductor_ext.templates import registry  # noqa: E402

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
x = torch.randn(4, 16)
with torch.no_grad():
    expected = model(x)
    got = torch.compile(model, backend="ext", options={"preset": "cpu", "force_template": "cpp.gemm"})(x)

out: dict[str, object] = {"matches": bool(torch.allclose(got, expected, rtol=1e-5, atol=1e-5)), "cases": {}}
for case in cases:
    hide(case)
    for cached in (registry._scan, registry._installed, wheels.find):
        cached.cache_clear()
    listed = {}
    for name in presets.PRESETS:
        try:
            listed[name] = presets.describe(name)["unavailable_templates"]
        except Exception as e:  # noqa: BLE001 - reported, the test decides
            listed[name] = f"{type(e).__name__}: {e}"
    out["cases"][case] = {"unavailable": registry.unavailable(), "presets": listed}
print(json.dumps(out))
