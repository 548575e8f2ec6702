// Column-wise helpers for activations stored as rows [channels][columns] (cpu::Rows): norms
// over the channels of each column and softmax down a column, vectorised across 16 columns.
#pragma once

#include "omni/threadpool.h"
#include "packed_conv.h"
#include "vec_math.h"

#include <algorithm>
#include <cmath>

namespace omni::cpu {

// Runs fn(b, c0, c1) for blocks of up to 16 columns of each of B segments of T columns.
template <class Fn>
void for_column_blocks(ThreadPool & pool, int B, int T, Fn fn) {
    const int nb = (T + kColBlock - 1) / kColBlock;
    pool.parallel_for(B * nb, [&](int task, int) {
        const int b = task / nb, j = task % nb;
        fn(b, j * kColBlock, std::min(T, (j + 1) * kColBlock));
    });
}

// Mean and 1/sqrt(variance + eps) over rows [r0, r0 + C) of kColBlock columns from c.
inline void column_stats(const Rows & x, int r0, int C, int c, float eps, float * mean, float * inv_std) {
    kernels().column_stats(x.row(r0) + c, static_cast<size_t>(x.ld), C, eps, mean, inv_std);
}

// LayerNorm without affine over rows [r0, r0 + C) of columns [c0, c1): calls
// out(r - r0, column, (x - mean) / sqrt(var + eps)) for every element (in place is fine: each
// element is read before it is written). Reads up to 15 columns past c1 (the rows' margin).
template <class Out>
void norm_columns_rows(const Rows & x, int r0, int C, int c0, int c1, float eps, Out out) {
    for (int cc = c0; cc < c1; cc += kColBlock) {
        const int n = std::min(kColBlock, c1 - cc);
        float mean[kColBlock], var[kColBlock];
        column_stats(x, r0, C, cc, eps, mean, var);
        for (int r = 0; r < C; ++r) {
            const float * row = x.row(r0 + r) + cc;
            for (int j = 0; j < n; ++j) out(r, cc + j, (row[j] - mean[j]) * var[j]);
        }
    }
}

template <class Out>
void norm_columns(const Rows & x, int C, int c0, int c1, float eps, Out out) {
    norm_columns_rows(x, 0, C, c0, c1, eps, out);
}

// As norm_columns_rows for at most 16 columns, handing each row's normalised values over at
// once: row_out(r - r0, values, n) with `values` in tmp (16 floats).
template <class RowOut>
void norm_column_rows(const Rows & x, int r0, int C, int c0, int c1, float eps, float * tmp, RowOut row_out) {
    const int n = c1 - c0;
    float mean[kColBlock], var[kColBlock];
    column_stats(x, r0, C, c0, eps, mean, var);
    for (int r = 0; r < C; ++r) {
        const float * row = x.row(r0 + r) + c0;
        for (int j = 0; j < kColBlock; ++j) tmp[j] = (row[j] - mean[j]) * var[j];
        row_out(r, tmp, n);
    }
}

}  // namespace omni::cpu
