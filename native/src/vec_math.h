// Branch-free float math for the CPU engines: written so that loops over arrays vectorise
// (libm's expf is a call per element; the DiT's GELU, Mish and softmax take tens of millions
// of them per window). The build compiles with -fno-trapping-math, without which GCC keeps the
// clamps as branches and vectorises nothing.
#pragma once

// Compiled for AVX-512, AVX2 and the baseline; the loader picks one per CPU.
#if defined(__x86_64__) && defined(__GNUC__)
#define OMNI_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OMNI_MULTIVERSION
#endif

#include <cstdint>
#include <cstring>

namespace omni::cpu {

// e^x, relative error below 2e-7 on [-87, 88]; inputs are clamped to that range (so e^-inf
// gives ~1e-38, not 0).
inline float exp_fast(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23)
    float r = x - n * 0.693359375f;  // ln 2 in two parts, the first exact in float
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;      // Cephes expf polynomial
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n, n in [-126, 127]
    float scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    return y * scale;
}

inline float sigmoid_fast(float x) { return 1.0f / (1.0f + exp_fast(-x)); }

// GELU, tanh form, as the graphs compute it: x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)).
inline float gelu_tanh(float x) {
    const float x3 = x * x * x;
    return x * sigmoid_fast((x + x3 * 0.044715f) * (2.0f * 0.7978845608028654f));
}

// Mish as the graphs compute it: x * n / (n + 2), n = e^x (e^x + 2), e^x clamped at x = 20.
inline float mish(float x) {
    const float e = exp_fast(x < 20.0f ? x : 20.0f);
    const float n = e * (e + 2.0f);
    return x * (n / (n + 2.0f));
}

// Row operations over n contiguous floats, vectorised for the CPU at hand (vec_rows.cpp).
void gelu_tanh_row(float * x, int n);                         // in place
void silu_row(float * x, int n);                              // in place: x * sigmoid(x)
void mish_affine_row(const float * x, float w, float b, float * y, int n);  // y = mish(x * w + b)
// Softmax down each column of s [rows][cols] (dense), in place; tmp holds 2 * cols floats.
void softmax_columns(float * s, int rows, int cols, float * tmp);

}  // namespace omni::cpu
