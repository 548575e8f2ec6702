// Direct convolution on the CPU with weights packed once at load: the CPU compute core of the
// vocoder and of the native Token2Mel (docs/performance.md, "Direct convolution").
//
// Activations are rows [channels][ld] with the time (or frame) axis contiguous. A stride-1
// convolution y[o][t] = b[o] + sum_{i,kk} w[o][i][kk] x[i][t + kk*dilation - pad] is computed
// in register tiles straight from x (no im2col) by the active kernel set (kernels/kernels.h); a
// linear layer is the case k = 1. Each output element is summed in one fixed order whatever the tile
// or thread split, so results are bit-identical across thread counts.
//
// Reads: x must be readable from column -pad to n - 1 + (k-1)*dilation - pad + kTileCols of
// every row (give buffers margins); the columns outside [0, n) that a convolution's padding
// reaches must hold zeros.
#pragma once

#include "kernels/kernels.h"
#include "omni/threadpool.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace omni::cpu {

enum class Precision { F32, BF16 };

template <class T>
size_t bytes_of(const std::vector<T> & v) {
    return v.size() * sizeof(T);
}

struct PackedConv {
    int out = 0, in = 0, k = 1, dilation = 1, pad = 0;
    std::vector<float> w;  // F32: [panels][in*k][kPanel], K index = i*k + kk
    std::vector<uint16_t> w_bf16;  // BF16: [panels][in/2][k][kPanel][2] (only when packed for it)
    std::vector<float> w_rows;  // [out][in*k] as given: kept when the kernel set in use at packing
    // runs convolutions through sgemm (Kernels::blas_convs)
    std::vector<float> bias;  // [out]
    int panels() const { return (out + kPanel - 1) / kPanel; }
    bool has_bf16() const { return !w_bf16.empty(); }
    // How far x must extend right of column n - 1 for this conv (padding reach + tile overrun).
    int right_reach() const { return (k - 1) * dilation - pad + kTileCols; }
    size_t bytes() const { return bytes_of(w) + bytes_of(w_bf16) + bytes_of(w_rows) + bytes_of(bias); }
};

// w: [out][in][k] (PyTorch Conv1d), bias: [out] or null. bf16: also pack the BF16 copy (needs
// an even `in`). keep_rows: also keep w as given for the sgemm route (default: when the active
// kernel set routes convolutions through sgemm).
PackedConv pack_conv(const float * w, const float * bias, int out, int in, int k, int dilation, int pad,
                     bool bf16 = false, bool keep_rows = false);
// w: [out][in] (a linear layer).
PackedConv pack_linear(const float * w, const float * bias, int out, int in, bool bf16 = false);

// One convolution call. Columns are in `segments` runs of n outputs each (a batch whose items
// carry their own padding): segment s reads x + s*x_seg and writes y + s*y_seg.
struct ConvArgs {
    const float * x = nullptr;
    int x_ld = 0;
    float * y = nullptr;
    int y_ld = 0;
    int n = 0;
    int segments = 1, x_seg = 0, y_seg = 0;
    bool accumulate = false;  // y += conv + bias instead of y = conv + bias
    Precision precision = Precision::F32;
    // BF16 only: x as channel pairs, [in/2][x_ld][2] bf16 (see to_bf16_pairs); x is unused.
    const uint16_t * x_bf16 = nullptr;
    // F32: the active kernel set's tiles, or im2col + sgemm (needs w_rows). Auto: as the set says.
    enum class Route { Auto, Tiles, Sgemm } route = Route::Auto;
};

// Called once per finished block of outputs: channels [o0, o1), columns [t0, t1) of segment
// `seg` (column offsets within the segment), right after they were written: the place for
// fused activations and residuals while the block is in cache.
using BlockFn = std::function<void(int seg, int o0, int o1, int t0, int t1)>;

void conv(const PackedConv & w, const ConvArgs & a, ThreadPool & pool, const BlockFn & epilogue = nullptr);

// Rows of x (channels [0, in), columns [c0, c1)) as channel pairs in BF16, round to nearest
// even: out[(i/2)*ld + t][i%2]. Channel count must be even.
void to_bf16_pairs(const float * x, int x_ld, int in, int c0, int c1, uint16_t * out, int out_ld, ThreadPool & pool);

// Rows with zero margins: [channels][margin + len + right] floats, row(c) points at column 0.
struct Rows {
    std::vector<float> buf;
    int channels = 0, len = 0, ld = 0, margin = 0;
    // Reshapes (zeroing everything when the shape changes; margins are never written).
    void shape(int channels, int len, int margin = 64, int right = 128);
    float * row(int c) { return buf.data() + static_cast<size_t>(c) * ld + margin; }
    const float * row(int c) const { return buf.data() + static_cast<size_t>(c) * ld + margin; }
    float * data() { return row(0); }
};

// The arguments of out[:, y_col + t] = w(in[:, x_col + t]) for t < n. With BF16 the rows of `in`,
// margins included (their zeros stay zeros), are first converted into `pairs` (grown as needed).
ConvArgs rows_conv_args(const PackedConv & w, Rows & in, Rows & out, int n, Precision precision,
                        std::vector<uint16_t> & pairs, ThreadPool & pool, int x_col = 0, int y_col = 0);

}  // namespace omni::cpu
