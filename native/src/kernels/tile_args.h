// What one register tile needs: included by the tile headers of every kernel set.
//
// Long sums are split into passes of at most kKBlock steps (each set picks the length that keeps
// its column slab of x in the L1 cache); between passes the accumulators rest in `part`, a
// [rows][kTileCols] buffer, and the next pass starts from them, so every output is still one
// chain of fused multiply-adds over k = 0..K-1, and the bias comes last.
#pragma once

#include "kernels.h"

#include <type_traits>

namespace omni::cpu {
namespace {

struct TileArgs {
    int K = 0;  // steps of this pass
    const float * a = nullptr;  // packed weights of the first row, at this pass's first step
    const float * b = nullptr;  // x at the tile's first column
    const int * off = nullptr;  // x offsets, at this pass's first step
    float * c = nullptr;  // output of the first row
    int ldc = 0;
    const float * bias = nullptr;  // bias of the first row
    bool acc_mode = false;  // y += sum + bias
    float * part = nullptr;  // partial sums of the first row (null: a single pass)
    bool first = true, last = true;

    bool load_part() const { return part && !first; }
    bool store_part() const { return part && !last; }
    // The same tile `r0` rows and `t` columns further on.
    TileArgs shifted(int r0, int t) const {
        TileArgs s = *this;
        s.a += r0;
        s.b += t;
        s.c += static_cast<size_t>(r0) * ldc + t;
        s.bias += r0;
        if (part) s.part += static_cast<size_t>(r0) * kTileCols + t;
        return s;
    }
};

// fn(std::integral_constant<int, k>{}) for k = n clamped to 1..N: a run-time count (rows of a
// panel, vectors of a column group) as the compile-time one a register tile is written for.
template <int N, class Fn>
inline void with_count(int n, Fn && fn) {
    if constexpr (N > 1) {
        if (n >= N) return fn(std::integral_constant<int, N>{});
        return with_count<N - 1>(n, static_cast<Fn &&>(fn));
    } else {
        return fn(std::integral_constant<int, 1>{});
    }
}

}  // namespace
}  // namespace omni::cpu
