// Convolution tiles for aarch64 Advanced SIMD (32 q registers): 8 output channels x 3 vectors of
// 4 columns, 24 accumulators; each step of K loads the panel's 8 weights as two vectors and 3
// column vectors, then 24 FMAs by lane (fmla v.4s, v.4s, v.s[l]): 5 loads per 24 FMAs, so the
// two FMA pipes of a Kunpeng 920 / Neoverse core set the pace. A tile of 48 columns is four
// column groups. Included by variant.cpp only, in the neon set.
#pragma once

#include "kernels.h"
#include "tile_args.h"

#include <arm_neon.h>

namespace omni::cpu {
namespace {

// A pass over 512 steps reads a column slab of 512 x 12 floats (24 KiB) and 16 KiB of weights:
// both stay in a 64 KiB L1 (Kunpeng 920, Neoverse N1).
constexpr int kKBlock = 512;
constexpr int kVecCols = 4;  // columns per vector

// R (1..8) channels x V (1..3) vectors; `last` columns valid in the last vector (1..4).
template <int R, int V>
void tile8x12(int last, const TileArgs & t) {
    float32x4_t acc[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v)
            acc[r][v] = t.load_part() ? vld1q_f32(t.part + r * kTileCols + 4 * v) : vdupq_n_f32(0.0f);
    for (int k = 0; k < t.K; ++k) {
        const float * bp = t.b + t.off[k];
        float32x4_t bv[V];
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v) bv[v] = vld1q_f32(bp + 4 * v);  // reads past `cols` land in the margin
        const float * ak = t.a + static_cast<size_t>(k) * kPanel;
        const float32x4_t w0 = vld1q_f32(ak), w1 = vld1q_f32(ak + 4);  // panels are padded to 8 channels
#define OMNI_ROW(r, w, lane)                                                                                        \
    if constexpr (R > r) {                                                                                          \
        _Pragma("GCC unroll 3") for (int v = 0; v < V; ++v) acc[r][v] = vfmaq_laneq_f32(acc[r][v], bv[v], w, lane); \
    }
        OMNI_ROW(0, w0, 0)
        OMNI_ROW(1, w0, 1)
        OMNI_ROW(2, w0, 2)
        OMNI_ROW(3, w0, 3)
        OMNI_ROW(4, w1, 0)
        OMNI_ROW(5, w1, 1)
        OMNI_ROW(6, w1, 2)
        OMNI_ROW(7, w1, 3)
#undef OMNI_ROW
    }
    if (t.store_part()) {  // whole vectors: the partial rows are kTileCols wide
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v) vst1q_f32(t.part + r * kTileCols + 4 * v, acc[r][v]);
        return;
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        const float32x4_t br = vdupq_n_f32(t.bias[r]);
        float * cr = t.c + static_cast<size_t>(r) * t.ldc;
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v) {
            float32x4_t val = vaddq_f32(acc[r][v], br);
            if (v < V - 1 || last == 4) {
                if (t.acc_mode) val = vaddq_f32(vld1q_f32(cr + 4 * v), val);
                vst1q_f32(cr + 4 * v, val);
            } else {
                float lanes[4];
                vst1q_f32(lanes, val);
                for (int j = 0; j < last; ++j) cr[4 * v + j] = t.acc_mode ? cr[4 * v + j] + lanes[j] : lanes[j];
            }
        }
    }
}

template <int R>
void tile_cols(int cols, const TileArgs & t) {
    const int V = (cols + 3) / 4, last = cols - 4 * (V - 1);
    with_count<3>(V, [&](auto v) { tile8x12<R, decltype(v)::value>(last, t); });
}

// One panel (up to 8 channels) x up to kTileCols columns, in column groups of 12.
void panel_tile(int R, int cols, const TileArgs & t) {
    for (int g = 0; g < cols; g += 12) {
        const int n = cols - g < 12 ? cols - g : 12;
        const TileArgs s = t.shifted(0, g);
        with_count<8>(R, [&](auto r) { tile_cols<decltype(r)::value>(n, s); });
    }
}

}  // namespace
}  // namespace omni::cpu
