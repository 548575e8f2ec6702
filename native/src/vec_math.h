// Row operations of the CPU engines, run by the active kernel set (kernels/kernels.h), which
// compiles them for the CPU at hand.
#pragma once

#include "kernels/kernels.h"

namespace omni::cpu {

inline void gelu_tanh_row(float * x, int n) { kernels().gelu_tanh_row(x, n); }  // in place
inline void silu_row(float * x, int n) { kernels().silu_row(x, n); }  // in place: x * sigmoid(x)
// y = mish(x * w + b)
inline void mish_affine_row(const float * x, float w, float b, float * y, int n) {
    kernels().mish_affine_row(x, w, b, y, n);
}
// Softmax down each column of s [rows][cols] (dense), in place; tmp holds 2 * cols floats.
inline void softmax_columns(float * s, int rows, int cols, float * tmp) {
    kernels().softmax_columns(s, rows, cols, tmp);
}

}  // namespace omni::cpu
