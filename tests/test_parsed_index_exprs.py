"""Inductor's C++ template index expressions are parsed once per text during ext's compiles
(``lowering/parsed_index_exprs.py``), give what Inductor's parse gives, and Inductor's own
function is back afterwards."""

import sympy
import torch._inductor.lowering  # noqa: F401  (first: cpp_template_kernel imported alone is a circular import in 2.15)
from torch._inductor.codegen import cpp_template_kernel
from torch.utils._sympy.functions import FloorDiv

import torch

from inductor_ext.backend import resolve_config
from inductor_ext.lowering import install, parsed_index_exprs
from inductor_ext.testing.patches import assert_in_force_only_inside

INDUCTOR = cpp_template_kernel.parse_expr_with_index_symbols


def _counting(calls: list):
    def parse(expr):
        calls.append(expr)
        return INDUCTOR(expr)

    return parse


def test_each_text_is_parsed_once_and_gives_inductors_expression():
    calls: list = []
    parse = parsed_index_exprs.memoized(_counting(calls))
    text = "m_start + 2*k_end - 7"  # texts no other test parses (the memo is per process)
    first, again = parse(text), parse(text)
    assert first is again and calls == [text]
    assert first == INDUCTOR(text)
    # integer index symbols, as Inductor makes them (its codegen relies on them)
    assert all(sym.is_integer and sym.is_nonnegative for sym in first.free_symbols)
    assert {sym.name for sym in first.free_symbols} == {"m_start", "k_end"}
    assert parse("m_start + 11") is not first and calls == [text, "m_start + 11"]


def test_an_expression_passes_through_and_a_list_is_a_new_list_of_parsed_items():
    calls: list = []
    parse = parsed_index_exprs.memoized(_counting(calls))
    expr = FloorDiv(sympy.Symbol("n_size", integer=True), 16)
    assert parse(expr) is expr and calls == []
    texts = ["m_offset - 5", "n_end // 2", 4]  # texts no other test parses (the memo is per process)
    first, again = parse(texts), parse(tuple(texts))
    assert first == again == INDUCTOR(texts)
    assert first is not again and isinstance(again, list)  # the caller may change its list
    first.append("changed")
    assert parse(texts) == INDUCTOR(texts)
    assert calls == ["m_offset - 5", "n_end // 2", "4"]  # each text once, across the three lists


def test_inside_the_compile_context_inductor_parses_each_text_once_and_after_it_its_own_is_back():
    config, _ = resolve_config([torch.ones(2)])
    with install.compile_context(config):
        patched = cpp_template_kernel.parse_expr_with_index_symbols
        assert patched is not INDUCTOR
        assert patched("m_size * 3") is patched("m_size * 3")
    assert cpp_template_kernel.parse_expr_with_index_symbols is INDUCTOR
    assert INDUCTOR("m_size * 3") == patched("m_size * 3")


def test_restored_when_the_compile_fails():
    assert_in_force_only_inside(cpp_template_kernel, "parse_expr_with_index_symbols", parsed_index_exprs.parsed_once)
