#include "vec_math.h"

#include <algorithm>
#include <cmath>

namespace omni::cpu {

OMNI_MULTIVERSION
void gelu_tanh_row(float * x, int n) {
    for (int i = 0; i < n; ++i) x[i] = gelu_tanh(x[i]);
}

OMNI_MULTIVERSION
void silu_row(float * x, int n) {
    for (int i = 0; i < n; ++i) x[i] = x[i] / (1.0f + exp_fast(-x[i]));
}

OMNI_MULTIVERSION
void mish_affine_row(const float * x, float w, float b, float * y, int n) {
    for (int i = 0; i < n; ++i) y[i] = mish(x[i] * w + b);
}

OMNI_MULTIVERSION
void softmax_columns(float * s, int rows, int cols, float * tmp) {
    float * mx = tmp;
    float * sum = tmp + cols;
    for (int c = 0; c < cols; ++c) {
        mx[c] = -INFINITY;
        sum[c] = 0.0f;
    }
    for (int r = 0; r < rows; ++r) {
        const float * row = s + static_cast<size_t>(r) * cols;
        for (int c = 0; c < cols; ++c) mx[c] = mx[c] > row[c] ? mx[c] : row[c];
    }
    for (int r = 0; r < rows; ++r) {
        float * row = s + static_cast<size_t>(r) * cols;
        for (int c = 0; c < cols; ++c) {
            row[c] = exp_fast(row[c] - mx[c]);
            sum[c] += row[c];
        }
    }
    for (int c = 0; c < cols; ++c) sum[c] = 1.0f / sum[c];
    for (int r = 0; r < rows; ++r) {
        float * row = s + static_cast<size_t>(r) * cols;
        for (int c = 0; c < cols; ++c) row[c] *= sum[c];
    }
}

}  // namespace omni::cpu
