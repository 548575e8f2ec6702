#include "packed_conv.h"

#include "omni/errors.h"
#if !defined(OMNI_NO_BLAS)
#include "blas.h"
#endif

#include <algorithm>
#include <cstring>

namespace omni::cpu {

namespace {

constexpr int kBlockPanels = 8;  // a task covers up to 64 output channels

// Round to nearest even, as vcvtne2ps2bf16 does (NaN is not expected in activations).
uint16_t bf16_round(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

// Tiles per task along the columns: enough work per task (~3 MFLOP) to amortise the hand-out,
// small enough that a descheduled worker holds up little.
int tiles_per_task(int K) {
    const double per_tile = 2.0 * kBlockPanels * kPanel * K * kTileCols;
    return std::clamp(static_cast<int>(3e6 / per_tile + 0.5), 1, 8);
}

#if !defined(OMNI_NO_BLAS)
// A block of outputs through im2col + sgemm: y[o0+r][t0+j] (+)= bias + W[o0+r] . cols[:, j].
void blas_block(const PackedConv & w, const ConvArgs & a, int seg, int o0, int o1, int t0, int t1) {
    single_threaded_blas();
    const int K = w.in * w.k, n = t1 - t0, m = o1 - o0;
    const float * x = a.x + static_cast<ptrdiff_t>(seg) * a.x_seg + t0;
    float * y = a.y + static_cast<ptrdiff_t>(seg) * a.y_seg + static_cast<size_t>(o0) * a.y_ld + t0;
    for (int r = 0; r < m; ++r) {
        float * yr = y + static_cast<size_t>(r) * a.y_ld;
        const float b = w.bias[o0 + r];
        for (int j = 0; j < n; ++j) yr[j] = (a.accumulate ? yr[j] : 0.0f) + b;
    }
    const float * cols = x;
    int ldb = a.x_ld;
    if (!(w.k == 1 && w.pad == 0)) {  // rows of the im2col matrix: (i, kk) -> x[i][t + kk*dil - pad]
        thread_local std::vector<float> buf;
        if (buf.size() < static_cast<size_t>(K) * n) buf.resize(static_cast<size_t>(K) * n);
        for (int i = 0; i < w.in; ++i)
            for (int kk = 0; kk < w.k; ++kk)
                std::memcpy(buf.data() + (static_cast<size_t>(i) * w.k + kk) * n,
                            x + static_cast<ptrdiff_t>(i) * a.x_ld + kk * w.dilation - w.pad, sizeof(float) * n);
        cols = buf.data();
        ldb = n;
    }
    OMNI_SGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, K, 1.0f, w.w_rows.data() + static_cast<size_t>(o0) * K,
               K, cols, ldb, 1.0f, y, a.y_ld);
}
#endif

}  // namespace

PackedConv pack_conv(const float * w, const float * bias, int out, int in, int k, int dilation, int pad, bool bf16,
                     bool keep_rows) {
    if (out < 1 || in < 1 || k < 1 || dilation < 1 || pad < 0) throw InvalidArgument("pack_conv: bad shape");
    // Every BF16 user (vocoder, native DiT and conformer) packs its weights here first: refusing
    // now keeps a CPU without the instructions from ever reaching the BF16 tiles.
    if (bf16 && !cpu_has_bf16())
        throw DeviceError(std::string("BF16 needs a CPU with AVX512_BF16 (this one has ") + isa_name() +
                          " kernels only)");
    PackedConv p;
    p.out = out, p.in = in, p.k = k, p.dilation = dilation, p.pad = pad;
    const int K = in * k, P = p.panels();
    p.w.assign(static_cast<size_t>(P) * K * kPanel, 0.0f);
    for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i)
            for (int kk = 0; kk < k; ++kk)
                p.w[(static_cast<size_t>(o / kPanel) * K + i * k + kk) * kPanel + o % kPanel] =
                    w[(static_cast<size_t>(o) * in + i) * k + kk];
    p.bias.assign(out, 0.0f);
    if (bias) std::copy_n(bias, out, p.bias.begin());
#if !defined(OMNI_NO_BLAS)
    if (keep_rows || kernels().blas_convs) p.w_rows.assign(w, w + static_cast<size_t>(out) * K);
#endif
    if (bf16) {
        if (in % 2) throw InvalidArgument("pack_conv: BF16 needs an even number of input channels");
        const int I2 = in / 2;
        p.w_bf16.assign(static_cast<size_t>(P) * I2 * k * kPanel * 2, 0);
        for (int o = 0; o < out; ++o)
            for (int i = 0; i < in; ++i)
                for (int kk = 0; kk < k; ++kk)
                    p.w_bf16[((((static_cast<size_t>(o / kPanel) * I2 + i / 2) * k + kk) * kPanel + o % kPanel) * 2) +
                             i % 2] = bf16_round(w[(static_cast<size_t>(o) * in + i) * k + kk]);
    }
    return p;
}

PackedConv pack_linear(const float * w, const float * bias, int out, int in, bool bf16) {
    return pack_conv(w, bias, out, in, 1, 1, 0, bf16);
}

ConvArgs rows_conv_args(const PackedConv & w, Rows & in, Rows & out, int n, Precision precision,
                        std::vector<uint16_t> & pairs, ThreadPool & pool, int x_col, int y_col) {
    ConvArgs a;
    a.x = in.data() + x_col;
    a.x_ld = in.ld;
    a.y = out.data() + y_col;
    a.y_ld = out.ld;
    a.n = n;
    if (precision == Precision::BF16) {
        const size_t need = static_cast<size_t>(w.in / 2) * in.ld * 2;
        if (pairs.size() < need) pairs.resize(need);
        to_bf16_pairs(in.buf.data(), in.ld, w.in, 0, in.ld, pairs.data(), in.ld, pool);
        a.precision = Precision::BF16;
        a.x_bf16 = pairs.data() + 2 * (static_cast<size_t>(in.margin) + x_col);
    }
    return a;
}

void conv(const PackedConv & w, const ConvArgs & a, ThreadPool & pool, const BlockFn & epilogue) {
    if (a.n <= 0 || a.segments <= 0) return;
    const bool bf16 = a.precision == Precision::BF16;
    if (bf16 && (!w.has_bf16() || !a.x_bf16)) throw InvalidArgument("conv: BF16 needs BF16 weights and paired input");
    const Kernels & kern = kernels();
    if (bf16 && !kern.conv_block_bf16)
        throw DeviceError(std::string("BF16 kernels need AVX512_BF16; the active set is ") + kern.name);
    // Row offsets of the K index into x: F32 K = i*k + kk; BF16 K2 = (i/2)*k + kk (pairs).
    const int K = bf16 ? w.k * (w.in / 2) : w.in * w.k;
    // kOffPad more entries (repeating the last) let a tile prefetch ahead without a bounds test.
    std::vector<int> off(K + kOffPad);
    for (int i = 0, idx = 0; !bf16 && i < w.in; ++i)
        for (int kk = 0; kk < w.k; ++kk) off[idx++] = i * a.x_ld + kk * w.dilation - w.pad;
    for (int i2 = 0, idx = 0; bf16 && i2 < w.in / 2; ++i2)
        for (int kk = 0; kk < w.k; ++kk) off[idx++] = i2 * a.x_ld + kk * w.dilation - w.pad;
    std::fill(off.begin() + K, off.end(), off[K - 1]);
    const int P = w.panels(), o_blocks = (P + kBlockPanels - 1) / kBlockPanels;
    // Column blocks of about tiles_per_task tiles, of even width in whole 8-column steps (50
    // columns: 32 + 24, not 48 + 2): a block's tiles are then as full as the columns allow.
    const int most = tiles_per_task(bf16 ? 2 * K : K) * kTileCols;
    const int t_blocks = (a.n + most - 1) / most;
    const int cols_per_task = ((a.n + t_blocks - 1) / t_blocks + 7) / 8 * 8;
    const bool sgemm = !bf16 &&
        (a.route == ConvArgs::Route::Sgemm ||
         (a.route == ConvArgs::Route::Auto && kern.blas_convs && !w.w_rows.empty()));
#if defined(OMNI_NO_BLAS)
    if (sgemm) throw InvalidArgument("conv: this build has no sgemm route");
#endif
    if (sgemm && w.w_rows.empty()) throw InvalidArgument("conv: the sgemm route needs weights packed with keep_rows");
    pool.parallel_for(a.segments * t_blocks * o_blocks, [&](int task, int) {
        const int ob = task % o_blocks, tb = (task / o_blocks) % t_blocks, seg = task / (o_blocks * t_blocks);
        const int t0 = tb * cols_per_task, t1 = std::min(a.n, t0 + cols_per_task);  // never empty: width <= most
        const int p0 = ob * kBlockPanels, p1 = std::min(P, p0 + kBlockPanels);
        const int o0 = p0 * kPanel, o1 = std::min(w.out, p1 * kPanel);
        ConvBlock b;
        b.K = K;
        b.off = off.data();
        b.y = a.y + static_cast<ptrdiff_t>(seg) * a.y_seg + static_cast<size_t>(o0) * a.y_ld + t0;
        b.y_ld = a.y_ld;
        b.bias = w.bias.data() + o0;
        b.rows = o1 - o0;
        b.cols = t1 - t0;
        b.accumulate = a.accumulate;
        if (sgemm) {
#if !defined(OMNI_NO_BLAS)
            blas_block(w, a, seg, o0, o1, t0, t1);
#endif
        } else if (bf16) {
            b.w_bf16 = reinterpret_cast<const uint32_t *>(w.w_bf16.data()) + static_cast<size_t>(p0) * K * kPanel;
            b.x_bf16 = a.x_bf16 + 2 * (static_cast<ptrdiff_t>(seg) * a.x_seg + t0);
            kern.conv_block_bf16(b);
        } else {
            b.w = w.w.data() + static_cast<size_t>(p0) * K * kPanel;
            b.x = a.x + static_cast<ptrdiff_t>(seg) * a.x_seg + t0;
            kern.conv_block(b);
        }
        if (epilogue) epilogue(seg, o0, o1, t0, t1);
    });
}

void to_bf16_pairs(const float * x, int x_ld, int in, int c0, int c1, uint16_t * out, int out_ld, ThreadPool & pool) {
    if (in % 2) throw InvalidArgument("to_bf16_pairs: odd channel count");
    const int pairs = in / 2;
    pool.parallel_for(pairs, [&](int i2, int) {
        const float * r0 = x + static_cast<size_t>(2 * i2) * x_ld;
        const float * r1 = r0 + x_ld;
        uint16_t * o = out + 2 * static_cast<size_t>(i2) * out_ld;
        for (int t = c0; t < c1; ++t) {
            o[2 * static_cast<ptrdiff_t>(t)] = bf16_round(r0[t]);
            o[2 * static_cast<ptrdiff_t>(t) + 1] = bf16_round(r1[t]);
        }
    });
}

void Rows::shape(int ch, int n, int left, int right) {
    const int new_ld = left + n + right;
    if (ch == channels && n == len && left == margin && new_ld == ld) return;
    channels = ch, len = n, margin = left, ld = new_ld;
    buf.assign(static_cast<size_t>(ch) * ld, 0.0f);
}

}  // namespace omni::cpu
