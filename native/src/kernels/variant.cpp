// One kernel set, compiled once per ISA (cmake/kernels.cmake). OMNI_KERNEL_SET names the set
// (generic, avx2, avx512, neon) and OMNI_KERNEL_SET_<NAME> selects its tile header; the compiler
// flags of that compilation decide what the plain loops below vectorise to.
//
// Everything here has internal linkage except the one table getter: the sets are linked into one
// library, and a shared inline body compiled for AVX-512 must never serve a generic caller (the
// build checks the objects for such symbols: cmake/check_kernel_symbols.cmake).
#include "kernels.h"
#include "scalar_math.h"

#if !defined(OMNI_KERNEL_SET)
#error "variant.cpp is compiled once per kernel set, with OMNI_KERNEL_SET defined"
#endif

#if defined(OMNI_KERNEL_SET_AVX512)
#include "tile_avx512.h"
#define OMNI_ISA Isa::Avx512
#elif defined(OMNI_KERNEL_SET_AVX2)
#include "tile_avx2.h"
#define OMNI_ISA Isa::Avx2
#elif defined(OMNI_KERNEL_SET_NEON)
#include "tile_neon.h"
#define OMNI_ISA Isa::Neon
#else
#include "tile_portable.h"
#define OMNI_ISA Isa::Generic
#endif

#define OMNI_STR2(x) #x
#define OMNI_STR(x) OMNI_STR2(x)
#define OMNI_CAT2(a, b) a##b
#define OMNI_CAT(a, b) OMNI_CAT2(a, b)

namespace omni::cpu {
namespace {

// Columns in as few tiles of at most kTileCols as they need, of even width in whole vectors
// (50 columns: 32 + 18, not 48 + 2, whose lone 2 would cost a whole pass over K for little
// work); in each tile, the K steps in passes of kKBlock (the set's L1-sized slab), every panel
// of the block per pass, so a pass's slab of x is read from L1 by all of them.
void conv_block(const ConvBlock & b) {
    const int panels = (b.rows + kPanel - 1) / kPanel;
    const bool passes = b.K > kKBlock;
    const int tiles = (b.cols + kTileCols - 1) / kTileCols;
    const int even = ((b.cols + tiles - 1) / tiles + kVecCols - 1) / kVecCols * kVecCols;
    const int width = even < kTileCols ? even : kTileCols;
    float part[kPanel * kPanel * kTileCols];  // the block's partial sums between passes
    for (int t = 0; t < b.cols; t += width) {
        const int cols = b.cols - t < width ? b.cols - t : width;
        for (int k0 = 0; k0 < b.K; k0 += kKBlock) {
            TileArgs a;
            a.K = b.K - k0 < kKBlock ? b.K - k0 : kKBlock;
            a.b = b.x + t;
            a.off = b.off + k0;
            a.ldc = b.y_ld;
            a.acc_mode = b.accumulate;
            a.first = k0 == 0;
            a.last = k0 + a.K == b.K;
            for (int p = 0; p < panels; ++p) {
                const int R = b.rows - p * kPanel < kPanel ? b.rows - p * kPanel : kPanel;
                a.a = b.w + (static_cast<size_t>(p) * b.K + k0) * kPanel;
                a.c = b.y + static_cast<size_t>(p) * kPanel * b.y_ld + t;
                a.bias = b.bias + p * kPanel;
                a.part = passes ? part + static_cast<size_t>(p) * kPanel * kTileCols : nullptr;
                panel_tile(R, cols, a);
            }
        }
    }
}

void gelu_tanh_row(float * x, int n) {
    for (int i = 0; i < n; ++i) x[i] = gelu_tanh(x[i]);
}

void silu_row(float * x, int n) {
    for (int i = 0; i < n; ++i) x[i] = x[i] / (1.0f + exp_fast(-x[i]));
}

void mish_affine_row(const float * x, float w, float b, float * y, int n) {
    for (int i = 0; i < n; ++i) y[i] = mish(x[i] * w + b);
}

void softmax_columns(float * s, int rows, int cols, float * tmp) {
    float * mx = tmp;
    float * sum = tmp + cols;
    for (int c = 0; c < cols; ++c) {
        mx[c] = -__builtin_inff();
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

void snake_row(const float * x, float a, float inv, int n, float * y) {
    for (int t = 0; t < n; ++t) {
        const float s = sin_fast(a * x[t]);
        y[t] = x[t] + inv * s * s;
    }
}

// Two passes, as the references compute LayerNorm statistics.
void column_stats(const float * x, size_t ld, int rows, float eps, float * mean, float * inv_std) {
    float m[kColBlock], v[kColBlock];
    for (int j = 0; j < kColBlock; ++j) m[j] = v[j] = 0.0f;
    for (int r = 0; r < rows; ++r) {
        const float * row = x + static_cast<size_t>(r) * ld;
        for (int j = 0; j < kColBlock; ++j) m[j] += row[j];
    }
    for (int j = 0; j < kColBlock; ++j) m[j] /= static_cast<float>(rows);
    for (int r = 0; r < rows; ++r) {
        const float * row = x + static_cast<size_t>(r) * ld;
        for (int j = 0; j < kColBlock; ++j) {
            const float d = row[j] - m[j];
            v[j] += d * d;
        }
    }
    for (int j = 0; j < kColBlock; ++j) {
        mean[j] = m[j];
        inv_std[j] = 1.0f / __builtin_sqrtf(v[j] / static_cast<float>(rows) + eps);
    }
}

#if !defined(OMNI_CONV_BLOCK_BF16)
#define OMNI_CONV_BLOCK_BF16 nullptr
#endif

const Kernels kTable = {
    OMNI_ISA, OMNI_STR(OMNI_KERNEL_SET), OMNI_ISA == Isa::Generic, conv_block, OMNI_CONV_BLOCK_BF16, gelu_tanh_row,
    silu_row, mish_affine_row,           softmax_columns,          snake_row,  column_stats,
};

}  // namespace

// The one external symbol of a set: kernels_generic(), kernels_avx2(), ...
const Kernels & OMNI_CAT(kernels_, OMNI_KERNEL_SET)() { return kTable; }

}  // namespace omni::cpu
