// Convolution tiles for AVX2 + FMA (16 ymm registers): 4 output channels x 3 vectors of 8 columns,
// 12 accumulators, so each step of K is 3 column loads + 4 weight broadcasts for 12 FMAs (the
// FMA ports, not the load ports, set the pace on Haswell and Zen alike). A panel of 8 channels
// is two such row groups; a tile of 48 columns two column groups. Included by variant.cpp only,
// in the avx2 set.
#pragma once

#include "kernels.h"
#include "tile_args.h"

#include <immintrin.h>

namespace omni::cpu {
namespace {

// A pass over 256 steps reads a column slab of 256 x 24 floats (24 KiB): it stays in L1.
constexpr int kKBlock = 256;
constexpr int kVecCols = 8;  // columns per vector

// Lanes [0, n) of a vector of 8.
inline __m256i lane_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// R (1..4) channels x V (1..3) vectors; `last` columns valid in the last vector (1..8). The
// loops are fully unrolled, so the accumulators never need a home in memory (a store loop GCC
// leaves rolled makes it spill all of them on every step of K).
template <int R, int V>
void tile4x24(int last, const TileArgs & t) {
    __m256 acc[R][V];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v)
            acc[r][v] = t.load_part() ? _mm256_loadu_ps(t.part + r * kTileCols + 8 * v) : _mm256_setzero_ps();
    for (int k = 0; k < t.K; ++k) {
        const float * bp = t.b + t.off[k];
        _mm_prefetch(reinterpret_cast<const char *>(t.b + t.off[k + kOffPad]), _MM_HINT_T0);  // 8 rows ahead
        __m256 bv[V];
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v) bv[v] = _mm256_loadu_ps(bp + 8 * v);  // reads past `cols` land in the margin
        const float * ak = t.a + static_cast<size_t>(k) * kPanel;
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const __m256 w = _mm256_broadcast_ss(ak + r);
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(w, bv[v], acc[r][v]);
        }
    }
    if (t.store_part()) {  // whole vectors: the partial rows are kTileCols wide
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v) _mm256_storeu_ps(t.part + r * kTileCols + 8 * v, acc[r][v]);
        return;
    }
    const __m256i m = lane_mask(last);
    const bool full = last == 8;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        const __m256 br = _mm256_set1_ps(t.bias[r]);
        float * cr = t.c + static_cast<size_t>(r) * t.ldc;
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v) {
            __m256 val = _mm256_add_ps(acc[r][v], br);
            if (v < V - 1 || full) {
                if (t.acc_mode) val = _mm256_add_ps(_mm256_loadu_ps(cr + 8 * v), val);
                _mm256_storeu_ps(cr + 8 * v, val);
            } else {
                if (t.acc_mode) val = _mm256_add_ps(_mm256_maskload_ps(cr + 8 * v, m), val);
                _mm256_maskstore_ps(cr + 8 * v, m, val);
            }
        }
    }
}

// The last few columns of a tile (1..8): all R (1..8) channels of the panel at once, so 8
// independent FMA chains hide the FMA latency where 4 x 1 vector would leave it half idle.
template <int R>
void tile8x8(int last, const TileArgs & t) {
    __m256 acc[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = t.load_part() ? _mm256_loadu_ps(t.part + r * kTileCols) : _mm256_setzero_ps();
    for (int k = 0; k < t.K; ++k) {
        const __m256 bv = _mm256_loadu_ps(t.b + t.off[k]);
        const float * ak = t.a + static_cast<size_t>(k) * kPanel;
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(ak + r), bv, acc[r]);
    }
    if (t.store_part()) {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) _mm256_storeu_ps(t.part + r * kTileCols, acc[r]);
        return;
    }
    const __m256i m = lane_mask(last);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        float * cr = t.c + static_cast<size_t>(r) * t.ldc;
        __m256 val = _mm256_add_ps(acc[r], _mm256_set1_ps(t.bias[r]));
        if (t.acc_mode) val = _mm256_add_ps(_mm256_maskload_ps(cr, m), val);
        _mm256_maskstore_ps(cr, m, val);
    }
}

template <int R>
void tile_rows(int cols, const TileArgs & t) {
    const int V = (cols + 7) / 8, last = cols - 8 * (V - 1);
    with_count<3>(V, [&](auto v) { tile4x24<R, decltype(v)::value>(last, t); });
}

// One panel (up to 8 channels) x up to kTileCols columns: row groups of 4, one or two column
// groups of up to 24 with the vectors shared out evenly (5 vectors: 3 + 2, not 3 + 2 with a
// lone 1); a tile of one vector takes the whole panel at once.
void panel_tile(int R, int cols, const TileArgs & t) {
    const int vectors = (cols + 7) / 8;
    const int first = vectors <= 3 ? cols : (vectors + 1) / 2 * 8;
    for (int g = 0; g < cols; g += first) {
        const int n = cols - g < first ? cols - g : first;
        if (n <= 8) {
            const TileArgs s = t.shifted(0, g);
            with_count<8>(R, [&](auto r) { tile8x8<decltype(r)::value>(n, s); });
            continue;
        }
        for (int r0 = 0; r0 < R; r0 += 4) {
            const TileArgs s = t.shifted(r0, g);
            with_count<4>(R - r0, [&](auto r) { tile_rows<decltype(r)::value>(n, s); });
        }
    }
}

}  // namespace
}  // namespace omni::cpu
