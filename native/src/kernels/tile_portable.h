// Convolution tiles for any CPU: written for 128-bit vectors with the compiler's vector extension
// (SSE2 on a baseline x86-64 build, Advanced SIMD on aarch64, scalar code elsewhere), 4 output
// channels x 2 vectors of 4 columns: 8 accumulators, the registers a multiply and a separate add
// need on 16-register ISAs. Included by variant.cpp only, in the generic set. (Where the BLAS is
// there, the generic set runs convolutions through sgemm instead: Kernels::blas_convs.)
#pragma once

#include "kernels.h"
#include "tile_args.h"

#include <cstring>

namespace omni::cpu {
namespace {

constexpr int kKBlock = 256;
constexpr int kVecCols = 4;  // columns per vector

typedef float vec4 __attribute__((vector_size(16)));

inline vec4 load4(const float * p) {
    vec4 v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

inline void store4(float * p, vec4 v) { std::memcpy(p, &v, sizeof(v)); }

// R (1..4) channels x V (1..2) vectors; `last` columns valid in the last vector (1..4).
template <int R, int V>
void tile4x8(int last, const TileArgs & t) {
    vec4 acc[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v)
            acc[r][v] = t.load_part() ? load4(t.part + r * kTileCols + 4 * v) : vec4{0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = 0; k < t.K; ++k) {
        const float * bp = t.b + t.off[k];
        vec4 bv[V];
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v) bv[v] = load4(bp + 4 * v);  // reads past `cols` land in the margin
        const float * ak = t.a + static_cast<size_t>(k) * kPanel;
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const vec4 w = vec4{0.0f, 0.0f, 0.0f, 0.0f} + ak[r];
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v) acc[r][v] += w * bv[v];
        }
    }
    if (t.store_part()) {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v) store4(t.part + r * kTileCols + 4 * v, acc[r][v]);
        return;
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        float * cr = t.c + static_cast<size_t>(r) * t.ldc;
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v) {
            float lanes[4];
            store4(lanes, acc[r][v] + t.bias[r]);
            const int n = v == V - 1 ? last : 4;
            for (int j = 0; j < n; ++j) cr[4 * v + j] = t.acc_mode ? cr[4 * v + j] + lanes[j] : lanes[j];
        }
    }
}

template <int R>
void tile_cols(int cols, const TileArgs & t) {
    with_count<2>((cols + 3) / 4,
                  [&](auto v) { tile4x8<R, decltype(v)::value>(cols - 4 * (decltype(v)::value - 1), t); });
}

// One panel (up to 8 channels) x up to kTileCols columns: row groups of 4, column groups of 8.
void panel_tile(int R, int cols, const TileArgs & t) {
    for (int g = 0; g < cols; g += 8) {
        const int n = cols - g < 8 ? cols - g : 8;
        for (int r0 = 0; r0 < R; r0 += 4) {
            const TileArgs s = t.shifted(r0, g);
            with_count<4>(R - r0, [&](auto r) { tile_cols<decltype(r)::value>(n, s); });
        }
    }
}

}  // namespace
}  // namespace omni::cpu
