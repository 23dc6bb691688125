"""templates/lang: the C-style dialect tables (SYCL and MSL, each a small subclass)."""

from __future__ import annotations

import pytest
import torch

from inductor_ext.templates.lang import MSL, SYCL


def test_sycl_types_casts_and_vectors() -> None:
    assert SYCL.type_name(torch.float16) == "sycl::half" and SYCL.type_name("int64") == "int64_t"
    assert SYCL.cast("x", torch.float16) == "static_cast<sycl::half>(x)"
    # bf16 goes through bits (SYCL's own conversion would link a device library)
    assert SYCL.cast("x", "bfloat16") == "ext::float_to_bf16(x)"
    assert SYCL.widen("p[i]", torch.bfloat16) == "ext::bf16_to_float(p[i])"
    assert SYCL.widen("p[i]", torch.float16) == "static_cast<float>(p[i])"
    assert SYCL.bitcast("x", "int32") == "sycl::bit_cast<int32_t>(x)"
    assert SYCL.vector_type("float32", 4) == "sycl::vec<float, 4>"
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        SYCL.type_name(torch.float8_e4m3fn)


@pytest.mark.parametrize("value,dtype,text", [
    (1.5, "float32", "1.5f"), (2.0, None, "2.0f"), (1e-05, "float32", "1e-05f"), (0.1, "float64", "0.1"),
    (3, "int32", "3"), (3, None, "3"), (2**40, "int64", "1099511627776LL"), (True, None, "true"),
    (float("inf"), "float32", "INFINITY"), (float("-inf"), None, "-INFINITY"), (float("nan"), "float32", "NAN"),
    (0.5, "float16", "static_cast<sycl::half>(0.5f)"),
])
def test_literals(value: float, dtype: str | None, text: str) -> None:
    assert SYCL.literal(value, dtype) == text


def test_math_names_and_arity() -> None:
    assert SYCL.math("exp", "x") == "sycl::exp(x)"
    assert SYCL.math("atan2", "y", "x") == "sycl::atan2(y, x)"
    with pytest.raises(ValueError, match="takes 1 arguments"):
        SYCL.math("exp", "x", "y")
    with pytest.raises(ValueError, match="not a known math function"):
        SYCL.math("erfinv", "x")


def test_kernel_signature_is_an_nd_range_free_function() -> None:
    params = [SYCL.pointer_param("float32", "x", const=True), SYCL.scalar_param("int64", "n")]
    text = SYCL.kernel_signature("k", params, 2, sub_group_size=16)
    assert text == ('extern "C" SYCL_EXT_ONEAPI_FUNCTION_PROPERTY((syclexp::nd_range_kernel<2>))\n'
                    "[[sycl::reqd_sub_group_size(16)]] void k(const float* __restrict__ x, int64_t n)")


def test_msl_dialect_spells_what_the_metal_templates_write() -> None:
    """The MSL subclass (templates/lang/msl.py): a few tables plus Metal's buffer and
    threadgroup-memory spelling; the Metal families' goldens pin the kernels built from it."""
    assert MSL.cast("x", "bfloat16") == "bfloat(x)" and MSL.cast("x", torch.float16) == "half(x)"
    assert MSL.bitcast("x", "int32") == "as_type<int>(x)"
    assert MSL.vector_type("float16", 4) == "half4"
    assert MSL.literal(float("-inf"), "float32") == "-INFINITY" and MSL.literal(0.0) == "0.0f"
    assert MSL.math("exp", "x") == "exp(x)" and MSL.math("fma", "a", "b", "c") == "fma(a, b, c)"
    with pytest.raises(NotImplementedError, match="msl has no erf"):
        MSL.math("erf", "x")
    with pytest.raises(ValueError, match="msl has no type for dtype 'float64'"):
        MSL.type_name("float64")
    # bf16 and e4m3 are read as their bits, written as their type
    assert MSL.pointer_param("bfloat16", "x", const=True) == "const device ushort* x"
    assert MSL.pointer_param("float8_e4m3fn", "a", const=True) == "const device uchar* a"
    assert MSL.pointer_param("bfloat16", "out", const=False) == "device bfloat* out"
    assert MSL.scalar_param("int64", "N") == "constant long& N"
    assert MSL.kernel_params([MSL.scalar_param("int64", "N")], [MSL.attribute("uint", "lane", "thread_index_in_simdgroup")]) \
        == "constant long& N [[buffer(0)]],\n    uint lane [[thread_index_in_simdgroup]]"
    assert MSL.local_array("float16", "As", 16, 32) == "threadgroup half As[16][32];"
    assert MSL.barrier() == "threadgroup_barrier(mem_flags::mem_threadgroup);"
