"""Inductor's jinja templates are compiled once per source during ext's compiles
(``lowering/jinja_templates.py``), and Inductor's own function is back afterwards."""

from torch._inductor.codegen.common import KernelTemplate

from inductor_ext.lowering import jinja_templates
from inductor_ext.testing.patches import assert_in_force_only_inside

SOURCE = "{{ name }} = {{ value|indent_except_first(1) }};"


def test_each_source_is_compiled_once_inside_and_renders_the_same():
    inductor = KernelTemplate.__dict__["_template_from_string"]
    with jinja_templates.compiled_once():
        first = KernelTemplate._template_from_string(SOURCE)
        again = KernelTemplate._template_from_string(SOURCE)
        other = KernelTemplate._template_from_string(SOURCE + " ")
    assert first is again and other is not first
    assert first.render(name="x", value="1\n2") == "x = 1\n    2;"
    assert KernelTemplate.__dict__["_template_from_string"] is inductor
    assert KernelTemplate._template_from_string(SOURCE) is not first  # outside: Inductor's own, a fresh compile


def test_restored_when_the_compile_fails():
    assert_in_force_only_inside(KernelTemplate, "_template_from_string", jinja_templates.compiled_once)
