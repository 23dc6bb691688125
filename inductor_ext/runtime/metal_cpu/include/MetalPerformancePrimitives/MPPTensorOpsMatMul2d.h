// MetalPerformancePrimitives: the matmul2d subset in mcpu_tensor.h.
#pragma once
#include "../mcpu_tensor.h"
