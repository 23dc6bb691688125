"""``options=`` and ``mode=`` of ``backend="ext"``: validation, presets, the resolved ExtConfig.

Fast: everything but the last few tests works on plain data; those trace a one-line function
with Dynamo and fail in the backend before Inductor compiles anything.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import torch
from torch._inductor import list_mode_options

from inductor_ext import presets
from inductor_ext.backend import resolve_config
from inductor_ext.config import (
    AUTOTUNE_EFFORTS,
    OPTIONS,
    PDL_MODES,
    ExtConfig,
    ExtOptionError,
    validate_options,
)
from inductor_ext.lowering.ext_choices import ExtChoices, available_templates
from inductor_ext.lowering.install import inductor_patches
from inductor_ext.lowering.passes import available_passes

PRESET_NAMES = list(presets.PRESETS)


def error_of(options, example_inputs=(), preset=None) -> str:
    with pytest.raises(ExtOptionError) as info:
        presets.resolve(options, example_inputs, preset)
    return str(info.value)


def assert_lists_all(message: str, names) -> None:
    missing = [n for n in names if n not in message]
    assert not missing, f"{missing} not listed in: {message}"


@pytest.fixture(autouse=True)
def _no_env_dump_dir(monkeypatch):
    # resolve_config reads INDUCTOR_EXT_DUMP_DIR; keep the caller's environment out of these tests.
    monkeypatch.delenv("INDUCTOR_EXT_DUMP_DIR", raising=False)


# --- unknown keys ---------------------------------------------------------------------------


@pytest.mark.parametrize("typo, meant", [
    ("autotun", "autotune"),
    ("autotunes", "autotune"),
    ("tempaltes", "templates"),
    ("dumpdir", "dump_dir"),
    ("template_margn", "template_margin"),
    ("forcetemplate", "force_template"),
])
def test_unknown_key_names_it_suggests_closest_and_lists_valid(typo, meant):
    message = error_of({typo: "full"})
    assert f"unknown option {typo!r}" in message
    assert f"Did you mean {meant!r}?" in message
    assert "Valid options: " + ", ".join(sorted(OPTIONS)) in message


def test_unknown_key_without_near_miss_still_lists_valid():
    message = error_of({"zzzzzz": 1})
    assert "unknown option 'zzzzzz'" in message
    assert "Did you mean" not in message
    assert_lists_all(message, OPTIONS)


def test_unknown_key_is_reported_by_validate_options_too():
    with pytest.raises(ExtOptionError, match=r"unknown option 'autotun'.*Did you mean 'autotune'\?"):
        validate_options({"autotun": "quick"})


def test_options_must_be_a_dict():
    with pytest.raises(ExtOptionError, match="options must be a dict, got list"):
        validate_options([("autotune", "quick")])
    assert validate_options(None) == {}
    assert validate_options({}) == {}


def test_ext_option_error_is_a_value_error():
    # Users catching ValueError around torch.compile(options=...) keep working.
    assert issubclass(ExtOptionError, ValueError)


# --- bad values -----------------------------------------------------------------------------

BAD_VALUES = [
    # key, value, what the message must say is allowed
    ("autotune", "fast", [repr(e) for e in AUTOTUNE_EFFORTS]),
    ("autotune", None, [repr(e) for e in AUTOTUNE_EFFORTS]),
    ("pdl", 1, [repr(m) for m in PDL_MODES]),
    ("pdl", True, [repr(m) for m in PDL_MODES]),
    ("template_margin", -1, [">= 0"]),
    ("template_margin", "0.05", [">= 0"]),
    ("template_margin", True, [">= 0"]),
    ("dump_dir", 3, ["path", "None"]),
    ("autotune_cache", 3.5, ["path", "None"]),
    ("interpret", 1, ["True or False"]),
    ("interpret", "yes", ["True or False"]),
    ("templates", "triton.gemm", ["list of names"]),
    ("passes", [1, 2], ["list of names"]),
    ("force_template", 7, ["template family name or None", "list of names"]),
    ("force_template", [], ["template family name or None", "list of names"]),
    ("inductor", "max_autotune", ["dict", "torch._inductor.config"]),
    ("preset", "h100", ["'auto'", *map(repr, PRESET_NAMES)]),
]


@pytest.mark.parametrize("key, value, allowed", BAD_VALUES,
                         ids=[f"{k}={v!r}" for k, v, _ in BAD_VALUES])
def test_bad_value_names_value_and_what_is_allowed(key, value, allowed):
    message = error_of({key: value})
    assert f"options[{key!r}] = {value!r}" in message
    assert_lists_all(message, allowed)


def test_bad_inductor_key_suggests_closest():
    message = error_of({"inductor": {"max_autotun": True}})
    assert "options['inductor']" in message
    assert "unknown Inductor config key 'max_autotun'" in message
    assert "did you mean 'max_autotune'?" in message


@pytest.mark.parametrize("settings, expected", [
    ({"max_prefech": 1}, ["unknown fsdp_overlap setting 'max_prefech'", "did you mean 'max_prefetch'?",
                          "bucket_cap_bytes", "memory_budget_ratio", "reorder"]),
    ({"reorder": 1}, ["reorder=1", "True or False"]),
    ({"gpu": "A100"}, ["gpu='A100'", "H100", "H200", "B200", "MI355X"]),
    ({"bucket_cap_bytes": -1}, ["bucket_cap_bytes=-1", "an int >= 0 or None"]),
    ({"max_prefetch": None}, ["max_prefetch=None", "an int >= 0"]),
    ({"memory_budget_ratio": "0.1"}, ["memory_budget_ratio='0.1'", "a finite number >= 0"]),
    ({"memory_budget_ratio": float("inf")}, ["memory_budget_ratio=inf", "a finite number >= 0"]),
    ({"default_world_size": 0}, ["default_world_size=0"]),
    (["reorder"], ["expected a dict of fsdp_overlap settings"]),
])
def test_bad_fsdp_overlap_settings_name_the_setting_and_what_is_allowed(settings, expected):
    message = error_of({"fsdp_overlap": settings})
    assert "options['fsdp_overlap']" in message
    assert_lists_all(message, expected)


def test_fsdp_overlap_settings_reach_the_pass_and_its_uuid():
    from inductor_ext.comms_passes.fsdp import overlap as fsdp_overlap

    config = presets.resolve({"preset": "cpu", "passes": ["fsdp_overlap"],
                              "fsdp_overlap": {"max_prefetch": 1, "bucket_cap_bytes": 1 << 20, "gpu": "H200"}})
    settings = fsdp_overlap.current_settings(config)
    assert (settings.max_prefetch, settings.bucket_cap_bytes, settings.gpu) == (1, 1 << 20, "H200")
    with fsdp_overlap.configure(max_prefetch=3):  # the context manager wins over the option
        assert fsdp_overlap.current_settings(config).max_prefetch == 3
    other = presets.resolve({"preset": "cpu", "passes": ["fsdp_overlap"], "fsdp_overlap": {"max_prefetch": 2}})
    assert (fsdp_overlap.FsdpOverlapPass(config).uuid() != fsdp_overlap.FsdpOverlapPass(other).uuid())


def test_good_values_are_normalised(tmp_path):
    checked = validate_options({
        "template_margin": 1, "dump_dir": tmp_path, "autotune_cache": None,
        "templates": ["triton.gemm"], "passes": [], "interpret": False,
        "inductor": {"triton.cudagraphs": False},
    })
    assert checked["template_margin"] == 1.0 and isinstance(checked["template_margin"], float)
    assert checked["dump_dir"] == os.fspath(tmp_path) and isinstance(checked["dump_dir"], str)
    assert checked["autotune_cache"] is None
    assert checked["templates"] == ("triton.gemm",)
    assert checked["passes"] == ()
    assert checked["inductor"] == {"triton.cudagraphs": False}


@pytest.mark.parametrize("effort", AUTOTUNE_EFFORTS)
def test_every_autotune_effort_is_accepted(effort):
    assert presets.resolve({"autotune": effort}).autotune == effort


@pytest.mark.parametrize("pdl", PDL_MODES)
def test_every_pdl_mode_is_accepted(pdl):
    assert presets.resolve({"preset": "hopper", "pdl": pdl}).pdl == pdl


# --- mode= ----------------------------------------------------------------------------------

CPU_INPUTS = [torch.zeros(2, 2)]


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_mode_accepts_preset_names(name):
    config, patches = resolve_config(CPU_INPUTS, None, name)
    assert config.preset == name
    assert config.autotune == presets.PRESETS[name]["autotune"]
    assert patches == {}


def test_mode_hopper_gives_hopper_preset():
    config, _ = resolve_config(CPU_INPUTS, None, "hopper")
    assert (config.preset, config.target, config.autotune) == ("hopper", "sm_90a", "quick")


def test_mode_preset_does_not_override_an_explicit_preset_option():
    config, _ = resolve_config(CPU_INPUTS, {"preset": "cpu"}, "hopper")
    assert config.preset == "cpu"


@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
def test_mode_max_autotune_means_full_autotune(mode):
    config, patches = resolve_config(CPU_INPUTS, None, mode)
    assert config.preset == "cpu"  # auto-detected from the CPU inputs
    assert config.autotune == "full"
    # Inductor's mode patches pass through; ext's own GEMM settings come from inductor_patches().
    assert patches == dict(list_mode_options(mode))


def test_mode_max_autotune_keeps_an_explicit_autotune_option():
    config, _ = resolve_config(CPU_INPUTS, {"autotune": "quick"}, "max-autotune")
    assert config.autotune == "quick"


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_mode_other_inductor_modes_pass_their_patches(mode):
    config, patches = resolve_config(CPU_INPUTS, None, mode)
    assert config.autotune == "model"  # the cpu preset's
    assert patches == dict(list_mode_options(mode))


def test_mode_none_is_the_detected_preset():
    config, patches = resolve_config(CPU_INPUTS)
    assert config.preset == "cpu" and patches == {}


def test_unknown_mode_lists_inductor_modes_and_presets():
    with pytest.raises(ExtOptionError) as info:
        resolve_config(CPU_INPUTS, None, "warp-speed")
    message = str(info.value)
    assert "unknown mode 'warp-speed'" in message
    assert_lists_all(message, list_mode_options())
    assert_lists_all(message, PRESET_NAMES)


def test_mode_does_not_mutate_the_callers_options():
    options = {"autotune": "quick"}
    resolve_config(CPU_INPUTS, options, "hopper")
    assert options == {"autotune": "quick"}


def test_env_dump_dir_is_used_unless_an_option_says_otherwise(monkeypatch, tmp_path):
    monkeypatch.setenv("INDUCTOR_EXT_DUMP_DIR", str(tmp_path / "env"))
    assert resolve_config(CPU_INPUTS)[0].dump_dir == str(tmp_path / "env")
    assert resolve_config(CPU_INPUTS, {"dump_dir": None})[0].dump_dir is None
    assert resolve_config(CPU_INPUTS, {"dump_dir": tmp_path / "opt"})[0].dump_dir == str(tmp_path / "opt")


# --- presets --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_preset_resolves(name):
    data = presets.PRESETS[name]
    for config in (presets.resolve({"preset": name}), presets.resolve({}, preset=name)):
        assert isinstance(config, ExtConfig)
        assert config.preset == name
        assert config.device_type == data["device_type"]
        assert config.target == data["target"]
        assert config.passes == tuple(data["passes"])
        assert config.templates == tuple(data["templates"])
        assert (config.autotune, config.pdl) == (data["autotune"], data["pdl"])
        assert config.template_margin == data["template_margin"]
        json.loads(config.to_json())  # part of cache keys: must serialise


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_preset_has_a_description_and_only_known_parts(name):
    data = presets.PRESETS[name]
    assert data["description"].strip()
    assert set(data["passes"]) <= set(available_passes())
    assert set(data["templates"]) <= set(available_templates())


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_describe_works_for_every_preset(name):
    shown = presets.describe(name)
    assert shown["description"] == presets.PRESETS[name]["description"]
    assert shown["preset"] == name
    assert shown["target"] == presets.PRESETS[name]["target"]
    assert "inductor_choices_class" in shown["inductor_patches"]
    json.dumps(shown)  # printable as is


def test_describe_unknown_preset_raises():
    with pytest.raises(ExtOptionError, match="'nope'"):
        presets.describe("nope")


@pytest.mark.parametrize("preset, options, field, expected", [
    ("hopper", {"autotune": "off"}, "autotune", "off"),
    ("hopper", {"pdl": "force"}, "pdl", "force"),
    ("hopper", {"template_margin": 0.5}, "template_margin", 0.5),
    ("hopper", {"templates": []}, "templates", ()),
    ("cpu", {"autotune": "full"}, "autotune", "full"),
    ("blackwell", {"autotune": "cache-only"}, "autotune", "cache-only"),
])
def test_explicit_options_override_preset(preset, options, field, expected):
    assert getattr(presets.resolve({"preset": preset, **options}), field) == expected
    assert getattr(presets.resolve(options, preset=preset), field) == expected


def test_preset_option_wins_over_preset_argument():
    assert presets.resolve({"preset": "cpu"}, preset="hopper").preset == "cpu"


def test_unknown_preset_argument_lists_presets():
    message = error_of({}, preset="h100")
    assert "unknown preset 'h100'" in message
    assert_lists_all(message, ["auto", *PRESET_NAMES])


def test_auto_on_cpu_tensors_is_cpu():
    x = torch.randn(3)
    assert presets.resolve({"preset": "auto"}, [x]).preset == "cpu"
    assert presets.resolve({}, [x]).preset == "cpu"  # auto is the default
    # The first tensor decides; non-tensor inputs (SymInts, ints) are skipped.
    assert presets.detect_preset([3, None, x]) == "cpu"
    assert presets.detect_preset([]) == "cpu"


def test_preset_for_other_devices():
    assert presets.preset_for_device(torch.device("meta")) == "aten"
    assert presets.preset_for_device(torch.device("mps")) == "mps"
    assert presets.preset_for_device(torch.device("xpu")) == "xpu"


# --- passes, templates, force_template -------------------------------------------------------


def test_unknown_pass_lists_available():
    message = error_of({"passes": ["no_such_pass"]})
    assert "unknown pass 'no_such_pass'" in message
    available = sorted(available_passes())
    assert ("available: " + ", ".join(available)) in message if available else "available: none" in message


def test_unknown_template_lists_available():
    message = error_of({"templates": ["cutlass.gemm"]})
    assert "unknown template family 'cutlass.gemm'" in message
    assert "available: " + ", ".join(sorted(available_templates())) in message


@pytest.mark.parametrize("options", [
    {"force_template": "triton.gemm", "templates": []},
    {"force_template": "triton.gemm", "preset": "mps"},  # mps enables only Metal templates
    {"force_template": "cutlass.gemm"},
    {"force_template": ["cpp.gemm", "cutlass.gemm"]},  # the cpu preset enables cpp.gemm only
])
def test_force_template_must_be_enabled(options):
    message = error_of(options)
    force = options["force_template"]
    assert f"force_template={force if isinstance(force, str) else force[-1]!r}" in message
    assert "not among the enabled templates" in message


def test_force_template_among_enabled_is_accepted():
    assert presets.resolve({"force_template": "cpp.gemm"}).force_template == "cpp.gemm"  # the cpu preset's
    assert presets.resolve({"preset": "hopper", "force_template": "triton.gemm"}).force_template == "triton.gemm"
    both = ["triton.gemm", "triton.nvfp4_gemm"]
    assert presets.resolve({"preset": "blackwell", "force_template": both}).force_template == tuple(both)


# --- ExtConfig.inductor_patches ---------------------------------------------------------------


@pytest.mark.parametrize("effort", AUTOTUNE_EFFORTS)
def test_inductor_patches_install_ext_choices(effort):
    config = presets.resolve({"preset": "cpu", "autotune": effort})
    patches = inductor_patches(config)
    factory = patches["inductor_choices_class"]
    choices = factory()
    assert isinstance(choices, ExtChoices)
    assert choices.config is config
    # ext offers its templates without Inductor's max-autotune (which only costs compile time)
    assert "max_autotune_gemm" not in patches and "max_autotune" not in patches
    if effort == "off":
        assert "max_autotune_gemm_backends" not in patches
    else:
        assert patches["max_autotune_gemm_backends"] == "ATEN"


def test_inductor_patches_use_only_real_inductor_keys():
    from torch._inductor import config as inductor_config

    valid = inductor_config.get_config_copy()
    for name in PRESET_NAMES:
        for effort in AUTOTUNE_EFFORTS:
            patches = inductor_patches(presets.resolve({"preset": name, "autotune": effort}))
            assert set(patches) <= set(valid), (name, effort, set(patches) - set(valid))


def test_cpu_autotuning_times_choices_anew_instead_of_reading_inductors_timing_cache():
    assert inductor_patches(presets.resolve({"preset": "cpu", "autotune": "quick"}))["autotune_local_cache"] is False
    assert "autotune_local_cache" not in inductor_patches(presets.resolve({"preset": "cpu", "autotune": "off"}))
    assert "autotune_local_cache" not in inductor_patches(presets.resolve({"preset": "hopper", "autotune": "quick"}))


def test_explicit_inductor_patches_win():
    config = presets.resolve({"autotune": "quick",
                              "inductor": {"max_autotune_gemm_backends": "ATEN,TRITON", "coordinate_descent_tuning": True}})
    patches = inductor_patches(config)
    assert patches["max_autotune_gemm_backends"] == "ATEN,TRITON"
    assert patches["coordinate_descent_tuning"] is True


def test_interpret_adds_interpret_patches():
    from inductor_ext.lowering.install import interpret_patches

    patches = inductor_patches(presets.resolve({"preset": "hopper", "interpret": True}))
    assert interpret_patches().items() <= patches.items()
    assert "cpu_backend" not in inductor_patches(presets.resolve({"preset": "hopper"}))
    # The CPU's own kernels are native C++: interpret mode changes nothing there.
    assert "cpu_backend" not in inductor_patches(presets.resolve({"interpret": True}))


def test_choices_uuid_follows_the_config():
    # The uuid enters Inductor's FX graph cache key: different options, different key.
    uuids = {inductor_patches(presets.resolve({"autotune": e}))["inductor_choices_class"]().uuid()
             for e in AUTOTUNE_EFFORTS}
    assert len(uuids) == len(AUTOTUNE_EFFORTS)
    again = inductor_patches(presets.resolve({"autotune": "quick"}))["inductor_choices_class"]().uuid()
    assert again in uuids


# --- errors through torch.compile -------------------------------------------------------------


class Tiny(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


def compile_error(**compile_kwargs) -> BaseException:
    compiled = torch.compile(Tiny(), backend="ext", **compile_kwargs)
    with pytest.raises(Exception) as info:
        compiled(torch.ones(3))
    return info.value


def chain(exc: BaseException | None):
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = getattr(exc, "inner_exception", None) or exc.__cause__ or exc.__context__
    return seen


@pytest.mark.parametrize("compile_kwargs, expected", [
    ({"options": {"bogus": 1}}, ["unknown option 'bogus'", "Valid options: "]),
    ({"options": {"autotun": "full"}}, ["unknown option 'autotun'", "Did you mean 'autotune'?"]),
    ({"options": {"autotune": "fast"}}, ["options['autotune'] = 'fast'", "'quick'"]),
    ({"mode": "warp-speed"}, ["unknown mode 'warp-speed'", "max-autotune", "hopper"]),
], ids=["unknown-key", "near-miss", "bad-value", "bad-mode"])
def test_errors_surface_through_torch_compile(compile_kwargs, expected):
    error = compile_error(**compile_kwargs)
    assert_lists_all(str(error), expected)
    assert "backend='ext'" in str(error)
    assert any(isinstance(e, ExtOptionError) for e in chain(error)), chain(error)


# --- bad value types ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [3, None], ids=["int", "None"])
def test_non_iterable_names_raise_ext_option_error(value):
    message = error_of({"passes": value})
    assert "list of names" in message


def test_non_str_inductor_key_raises_ext_option_error():
    message = error_of({"inductor": {1: True}})
    assert "has key 1: Inductor config keys are strings" in message


def test_pdl_force_patches_inductor_consumers_on_nvidia_only():
    assert inductor_patches(presets.resolve({"preset": "hopper", "pdl": "force"}))["triton.enable_pdl"] is True
    assert "triton.enable_pdl" not in inductor_patches(presets.resolve({"preset": "hopper"}))  # auto
    with pytest.raises(ExtOptionError, match="pdl='force' needs an NVIDIA target.*'gfx950'"):
        presets.resolve({"preset": "gfx950", "pdl": "force"})


def test_cli_presets_list_and_show(capsys):
    from inductor_ext import cli

    assert cli.main(["presets"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in presets.PRESETS) and "auto" in listed
    assert cli.main(["presets", "show", "blackwell"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["target"] == "sm_100a" and "nvfp4_alpha_fold" in shown["passes"]
    assert cli.main(["presets", "show", "auto"]) == 0  # this machine: CPU
    assert json.loads(capsys.readouterr().out)["preset"] == "cpu"
    assert cli.main(["presets", "show", "nope"]) == 2
    assert "valid presets" in capsys.readouterr().err


def test_every_pass_in_the_package_has_its_entry_point():
    """A pass without its pyproject line is never installed by name or by default in a user's
    compile (only where a test imported its module): every ExtGraphPass subclass we ship is listed."""
    import importlib
    import pkgutil

    import inductor_ext
    from inductor_ext.lowering.passes.base import ExtGraphPass

    for info in pkgutil.walk_packages(inductor_ext.__path__, "inductor_ext."):
        if ".passes" in info.name or info.name.startswith("inductor_ext.comms_passes"):
            importlib.import_module(info.name)
    shipped = {cls.name: cls for cls in _subclasses(ExtGraphPass)  # a base such as OneOpPass names no pass
               if cls.__module__.startswith("inductor_ext.") and hasattr(cls, "name")}
    listed = available_passes()
    assert {name: listed.get(name) for name in shipped} == shipped


def _subclasses(cls: type) -> list[type]:
    return [c for s in cls.__subclasses__() for c in (s, *_subclasses(s))]


# Issue 47 item 3: values Inductor would take silently, and a dump_dir that could only fail after
# the whole compile, are refused when the options are read, naming the value and what is allowed.
@pytest.mark.parametrize("patch, says", [
    ({"max_autotune": "yes"}, "Inductor's max_autotune takes True or False"),
    ({"max_autotune": 1}, "Inductor's max_autotune takes True or False"),
    ({"compile_threads": "2"}, "Inductor's compile_threads takes an integer or None"),
    ({"mixed_mm_choice": "fast"}, "Inductor's mixed_mm_choice takes one of 'default', 'triton', 'aten', 'heuristic'"),
])
def test_inductor_patches_of_the_wrong_type_are_refused(patch, says):
    with pytest.raises(ExtOptionError, match=re.escape(says)):
        presets.resolve({"inductor": patch})


@pytest.mark.parametrize("patch", [{"max_autotune": True}, {"compile_threads": None}, {"compile_threads": 2},
                                   {"mixed_mm_choice": "aten"}, {"max_autotune_gemm_backends": "ATEN,CPP"},
                                   {"post_grad_fusion_options": {}}])
def test_inductor_patches_of_the_declared_type_pass(patch):
    assert presets.resolve({"inductor": patch}).inductor == patch


def test_a_dump_dir_that_cannot_be_a_folder_is_refused_before_the_compile(tmp_path):
    from inductor_ext import backend

    afile = tmp_path / "afile"
    afile.write_text("x")
    for bad, says in ((afile, "is a file, not a folder"), (afile / "sub", "is a file, so")):
        with pytest.raises(ExtOptionError, match=re.escape(says)):
            backend.resolve_config((), {"dump_dir": str(bad)}, None)
    assert backend.resolve_config((), {"dump_dir": str(tmp_path / "new" / "dumps")}, None)[0].dump_dir
    assert not (tmp_path / "new").exists()  # checking creates nothing
