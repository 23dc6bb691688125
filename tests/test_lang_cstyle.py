"""templates/lang: the C-style dialect tables (SYCL now; MSL is meant to be a few-line subclass)."""

from __future__ import annotations

import pytest
import torch

from inductor_ext.templates.lang import SYCL, CStyleLanguage


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


def test_another_dialect_is_a_few_table_entries() -> None:
    """What an MSL dialect needs beyond the shared rules (the Metal codegen's own module will
    hold the real one)."""

    class MslLike(CStyleLanguage):
        name = "msl"
        type_names = {**CStyleLanguage.type_names, "float16": "half", "bfloat16": "bfloat", "int64": "long"}
        math_prefix = "metal::precise::"
        math_names = {"erf": None, "fabs": "metal::fabs"}
        bitcast_format = "as_type<{type}>({x})"
        infinity = "HUGE_VALF"

    msl = MslLike()
    assert msl.cast("x", "float16") == "static_cast<half>(x)"
    assert msl.bitcast("x", "int32") == "as_type<int>(x)"
    assert msl.vector_type("float16", 4) == "half4"
    assert msl.math("exp", "x") == "metal::precise::exp(x)" and msl.math("fabs", "x") == "metal::fabs(x)"
    assert msl.literal(float("-inf"), "float32") == "-HUGE_VALF" and msl.literal(0.25) == "0.25f"
    with pytest.raises(NotImplementedError, match="no erf"):
        msl.math("erf", "x")
