// Convolution tiles for AVX-512 (32 zmm registers): 8 output channels x up to 3 vectors of 16
// columns (24 accumulators), the last vector masked; BF16 pairs through vdpbf16ps where the CPU
// has AVX512_BF16. Included by variant.cpp only, in the avx512 set.
#pragma once

#include "kernels.h"
#include "tile_args.h"

#include <immintrin.h>

#if defined(__GNUC__) && (__GNUC__ >= 10 || defined(__clang__))
#define OMNI_HAVE_AVX512_BF16 1
#define OMNI_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
#endif

namespace omni::cpu {
namespace {

// A pass over 128 steps reads a column slab of 128 x 48 floats (24 KiB): it stays in L1.
constexpr int kKBlock = 128;
constexpr int kVecCols = 16;  // columns per vector

// Bias, optional accumulation into C and the masked store, shared by the F32 and BF16 tiles.
template <int R, int V>
inline void store_tile(__m512 (&acc)[R][V], float * c, int ldc, __mmask16 last, bool acc_mode, const float * bias) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        const __m512 br = _mm512_set1_ps(bias[r]);
        float * cr = c + static_cast<size_t>(r) * ldc;
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v) {
            const __mmask16 m = v == V - 1 ? last : static_cast<__mmask16>(0xffff);
            __m512 val = _mm512_add_ps(acc[r][v], br);
            if (acc_mode) val = _mm512_add_ps(_mm512_maskz_loadu_ps(m, cr + 16 * v), val);
            _mm512_mask_storeu_ps(cr + 16 * v, m, val);
        }
    }
}

struct F32Tile {
    template <int R, int V>
    static void tile(__mmask16 last, const TileArgs & t) {
        __m512 acc[R][V];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v)
                acc[r][v] = t.load_part() ? _mm512_loadu_ps(t.part + r * kTileCols + 16 * v) : _mm512_setzero_ps();
        for (int k = 0; k < t.K; ++k) {
            const float * bp = t.b + t.off[k];
            __m512 bv[V];
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v) bv[v] = _mm512_loadu_ps(bp + 16 * v);  // reads past `cols` land in the margin
            const float * ak = t.a + static_cast<size_t>(k) * kPanel;
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const __m512 w = _mm512_set1_ps(ak[r]);
#pragma GCC unroll 3
                for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(w, bv[v], acc[r][v]);
            }
        }
        if (t.store_part()) {  // whole vectors: the partial rows are kTileCols wide
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
                for (int v = 0; v < V; ++v) _mm512_storeu_ps(t.part + r * kTileCols + 16 * v, acc[r][v]);
            return;
        }
        store_tile<R, V>(acc, t.c, t.ldc, last, t.acc_mode, t.bias);
    }
};

#if defined(OMNI_HAVE_AVX512_BF16)
// BF16: channel pairs, one vdpbf16ps per pair and vector.
struct Bf16Tile {
    template <int R, int V>
    OMNI_TARGET_BF16 static void tile(__mmask16 last, int K2, const uint32_t * a, const uint16_t * b, const int * off,
                                      float * c, int ldc, bool acc_mode, const float * bias) {
        __m512 acc[R][V];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
        for (int k = 0; k < K2; ++k) {
            const uint16_t * bp = b + 2 * static_cast<ptrdiff_t>(off[k]);
            __m512bh bv[V];
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v) bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bp + 32 * v));
            const uint32_t * ak = a + static_cast<size_t>(k) * kPanel;
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const __m512bh w = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(ak[r])));
#pragma GCC unroll 3
                for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], w, bv[v]);
            }
        }
        store_tile<R, V>(acc, c, ldc, last, acc_mode, bias);
    }
};
#endif

// The tile instance for R rows and `cols` columns (up to 3 vectors; the last one masked).
template <typename Tile, typename... Args>
void run_tile(int R, int cols, const Args &... args) {
    const int V = (cols + 15) / 16;
    const int rem = cols - 16 * (V - 1);
    const auto last = static_cast<__mmask16>(rem >= 16 ? 0xffff : ((1u << rem) - 1));
    with_count<8>(R, [&](auto r) {
        with_count<3>(V, [&](auto v) { Tile::template tile<decltype(r)::value, decltype(v)::value>(last, args...); });
    });
}

// One panel (up to 8 channels) x up to kTileCols columns.
void panel_tile(int R, int cols, const TileArgs & t) { run_tile<F32Tile>(R, cols, t); }

#if defined(OMNI_HAVE_AVX512_BF16)
void conv_block_bf16(const ConvBlock & b) {
    const int panels = (b.rows + kPanel - 1) / kPanel;
    for (int t = 0; t < b.cols; t += kTileCols) {
        const int cols = b.cols - t < kTileCols ? b.cols - t : kTileCols;
        for (int p = 0; p < panels; ++p) {
            const int R = b.rows - p * kPanel < kPanel ? b.rows - p * kPanel : kPanel;
            run_tile<Bf16Tile>(R, cols, b.K, b.w_bf16 + static_cast<size_t>(p) * b.K * kPanel, b.x_bf16 + 2 * t, b.off,
                               b.y + static_cast<size_t>(p) * kPanel * b.y_ld + t, b.y_ld, b.accumulate,
                               b.bias + p * kPanel);
        }
    }
}
#define OMNI_CONV_BLOCK_BF16 conv_block_bf16
#endif

}  // namespace
}  // namespace omni::cpu
