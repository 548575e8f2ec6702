// Branch-free float math for the kernel sets: written so that loops over arrays vectorise (libm's
// expf is a call per element; the DiT's GELU, Mish and softmax take tens of millions of them per
// window). The build compiles with -fno-trapping-math, without which GCC keeps the clamps as
// branches and vectorises nothing.
//
// Internal linkage on purpose: every kernel set compiles these for its own ISA, and a shared
// (inline, external) copy could let the linker hand an AVX-512 body to a generic caller.
#pragma once

#include <cstdint>
#include <cstring>

namespace omni::cpu {
namespace {

// e^x, relative error below 2e-7 on [-87, 88]; inputs are clamped to that range (so e^-inf
// gives ~1e-38, not 0).
inline float exp_fast(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23)
    float r = x - n * 0.693359375f;  // ln 2 in two parts, the first exact in float
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;  // Cephes expf polynomial
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

// sin(x) for the Snake activation: Cody-Waite reduction by pi in three parts, then the Taylor
// polynomial to x^11 on [-pi/2, pi/2] (truncation error < 6e-8, below one float ulp of 1).
// Branch-free so the loop vectorises; std::sin was half the vocoder's time.
inline float sin_fast(float x) {
    const float k = static_cast<float>(static_cast<int>(x * 0.318309886f + (x >= 0.0f ? 0.5f : -0.5f)));
    float r = x - k * 3.140625f;  // pi = 3.140625 + 9.6765358e-4 + 5.1265658e-12, each part
    r -= k * 9.67653584667e-4f;  // exactly representable, so k * part is (nearly) exact
    r -= k * 5.12656584e-12f;
    const float r2 = r * r;
    float p = 2.50521084e-8f;
    p = p * r2 - 2.75573192e-6f;
    p = p * r2 + 1.98412698e-4f;
    p = p * r2 - 8.33333333e-3f;
    p = p * r2 + 1.66666667e-1f;
    const float v = r - r * r2 * p;
    return (static_cast<int>(k) & 1) ? -v : v;
}

}  // namespace
}  // namespace omni::cpu
