// Force-included before every MSL source the executor compiles (g++ -include): the scheduler,
// the Metal standard library shim, then MSL's address-space and function qualifiers as empty
// macros. `threadgroup` declarations are rewritten before compiling (see msl.py); what is left
// of the keyword qualifies pointers and references, where it means nothing here.
#pragma once
#include "mcpu_runtime.h"
#include "mcpu_sync.h"
#include "mcpu_simdgroup_matrix.h"

namespace mcpu {
// A thread-position attribute converted to the type its kernel parameter declares.
template <class T> inline T attr(u3 v) {
  if constexpr (is_veclike<T>) {
    if constexpr (count_of<T> == 2) return T(v.x, v.y);
    else return T(v.x, v.y, v.z);
  } else {
    return T(v.x);
  }
}
template <class T> inline T attr(uint32_t v) { return T(v); }
}  // namespace mcpu

#define kernel
#define vertex
#define fragment
#define device
#define constant
#define thread
#define threadgroup
#define threadgroup_imageblock
#define METAL_FUNC inline
