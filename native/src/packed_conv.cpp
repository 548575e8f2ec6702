#include "packed_conv.h"

#include "omni/errors.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OMNI_X86 1
#define OMNI_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define OMNI_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
#endif

namespace omni::cpu {

namespace {

constexpr int kBlockPanels = 8;  // a task covers up to 64 output channels

// ---- ISA selection ----------------------------------------------------------------------

bool has_avx512() {
#if defined(OMNI_X86)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

std::atomic<int> g_isa{-1};  // -1: not chosen yet

// ---- generic kernel: plain loops the compiler vectorises for the build's ISA --------------

#if defined(OMNI_X86)
#define OMNI_GENERIC_CLONES __attribute__((target_clones("arch=haswell", "default")))
#else
#define OMNI_GENERIC_CLONES
#endif

// Sub-tiles of 16 columns keep R x 16 accumulators in registers on 256- and 128-bit ISAs.
template <int R>
__attribute__((always_inline)) inline void tile_generic(int K, const float * a, const float * b, const int * off, float * c,
                                                        int ldc, int cols, bool acc_mode, const float * bias) {
    for (int t0 = 0; t0 < cols; t0 += 16) {
        float acc[R][16];
        for (int r = 0; r < R; ++r)
            for (int t = 0; t < 16; ++t) acc[r][t] = 0.0f;
        for (int k = 0; k < K; ++k) {
            const float * bp = b + off[k] + t0;
            const float * ak = a + static_cast<size_t>(k) * kPanel;
            for (int r = 0; r < R; ++r)
                for (int t = 0; t < 16; ++t) acc[r][t] += ak[r] * bp[t];
        }
        const int n = std::min(16, cols - t0);
        for (int r = 0; r < R; ++r) {
            float * cr = c + static_cast<size_t>(r) * ldc + t0;
            for (int t = 0; t < n; ++t) cr[t] = (acc_mode ? cr[t] : 0.0f) + (acc[r][t] + bias[r]);
        }
    }
}

OMNI_GENERIC_CLONES
void run_tile_generic(int R, int K, const float * a, const float * b, const int * off, float * c, int ldc, int cols,
                      bool acc_mode, const float * bias) {
    switch (R) {
        case 8: return tile_generic<8>(K, a, b, off, c, ldc, cols, acc_mode, bias);
        case 7: return tile_generic<7>(K, a, b, off, c, ldc, cols, acc_mode, bias);
        case 6: return tile_generic<6>(K, a, b, off, c, ldc, cols, acc_mode, bias);
        case 5: return tile_generic<5>(K, a, b, off, c, ldc, cols, acc_mode, bias);
        case 4: return tile_generic<4>(K, a, b, off, c, ldc, cols, acc_mode, bias);
        case 3: return tile_generic<3>(K, a, b, off, c, ldc, cols, acc_mode, bias);
        case 2: return tile_generic<2>(K, a, b, off, c, ldc, cols, acc_mode, bias);
        default: return tile_generic<1>(K, a, b, off, c, ldc, cols, acc_mode, bias);
    }
}

#if defined(OMNI_X86)

// ---- AVX-512: R channels x V vectors of 16 columns, the last vector masked ----------------

// Bias, optional accumulation into C and the masked store, shared by the F32 and BF16 tiles.
template <int R, int V>
OMNI_AVX512 inline void store_tile(__m512 (&acc)[R][V], float * c, int ldc, __mmask16 last, bool acc_mode,
                                   const float * bias) {
    for (int r = 0; r < R; ++r) {
        const __m512 br = _mm512_set1_ps(bias[r]);
        float * cr = c + static_cast<size_t>(r) * ldc;
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
    OMNI_AVX512 static void tile(__mmask16 last, int K, const float * a, const float * b, const int * off, float * c,
                                 int ldc, bool acc_mode, const float * bias) {
        __m512 acc[R][V];
        for (int r = 0; r < R; ++r)
            for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
        for (int k = 0; k < K; ++k) {
            const float * bp = b + off[k];
            __m512 bv[V];
            for (int v = 0; v < V; ++v) bv[v] = _mm512_loadu_ps(bp + 16 * v);  // reads past `cols` are in the margin
            const float * ak = a + static_cast<size_t>(k) * kPanel;
            for (int r = 0; r < R; ++r) {
                const __m512 w = _mm512_set1_ps(ak[r]);
                for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(w, bv[v], acc[r][v]);
            }
        }
        store_tile<R, V>(acc, c, ldc, last, acc_mode, bias);
    }
};

// BF16: channel pairs, one vdpbf16ps per pair and vector.
struct Bf16Tile {
    template <int R, int V>
    OMNI_AVX512_BF16 static void tile(__mmask16 last, int K2, const uint32_t * a, const uint16_t * b, const int * off,
                                      float * c, int ldc, bool acc_mode, const float * bias) {
        __m512 acc[R][V];
        for (int r = 0; r < R; ++r)
            for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
        for (int k = 0; k < K2; ++k) {
            const uint16_t * bp = b + 2 * static_cast<ptrdiff_t>(off[k]);
            __m512bh bv[V];
            for (int v = 0; v < V; ++v) bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bp + 32 * v));
            const uint32_t * ak = a + static_cast<size_t>(k) * kPanel;
            for (int r = 0; r < R; ++r) {
                const __m512bh w = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(ak[r])));
                for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], w, bv[v]);
            }
        }
        store_tile<R, V>(acc, c, ldc, last, acc_mode, bias);
    }
};

// Picks the tile instance for R rows and cols columns (up to 3 vectors; the last one masked).
template <typename Kernel, int R, typename... Args>
void tile_cols(int cols, Args... args) {
    const int V = (cols + 15) / 16;
    const int rem = cols - 16 * (V - 1);
    const auto last = static_cast<__mmask16>(rem >= 16 ? 0xffff : ((1u << rem) - 1));
    if (V == 3) Kernel::template tile<R, 3>(last, args...);
    else if (V == 2) Kernel::template tile<R, 2>(last, args...);
    else Kernel::template tile<R, 1>(last, args...);
}

template <typename Kernel, typename... Args>
void run_tile(int R, int cols, Args... args) {
    switch (R) {
        case 8: return tile_cols<Kernel, 8>(cols, args...);
        case 7: return tile_cols<Kernel, 7>(cols, args...);
        case 6: return tile_cols<Kernel, 6>(cols, args...);
        case 5: return tile_cols<Kernel, 5>(cols, args...);
        case 4: return tile_cols<Kernel, 4>(cols, args...);
        case 3: return tile_cols<Kernel, 3>(cols, args...);
        case 2: return tile_cols<Kernel, 2>(cols, args...);
        default: return tile_cols<Kernel, 1>(cols, args...);
    }
}

#endif  // OMNI_X86

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

}  // namespace

Isa active_isa() {
    int v = g_isa.load(std::memory_order_relaxed);
    if (v < 0) {
        v = static_cast<int>(has_avx512() ? Isa::Avx512 : Isa::Generic);
        g_isa.store(v, std::memory_order_relaxed);
    }
    return static_cast<Isa>(v);
}

void force_isa(const std::string & name) {
    if (name == "auto") {
        g_isa.store(-1);
    } else if (name == "avx512") {
        if (!has_avx512()) throw DeviceError("this CPU has no AVX-512 (avx512f/bw/vl)");
        g_isa.store(static_cast<int>(Isa::Avx512));
    } else if (name == "generic") {
        g_isa.store(static_cast<int>(Isa::Generic));
    } else {
        throw InvalidArgument("isa must be 'auto', 'avx512' or 'generic', got '" + name + "'");
    }
}

bool cpu_has_bf16() {
#if defined(OMNI_X86)
    return has_avx512() && __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

const char * isa_name() { return active_isa() == Isa::Avx512 ? "avx512" : "generic"; }

PackedConv pack_conv(const float * w, const float * bias, int out, int in, int k, int dilation, int pad, bool bf16) {
    if (out < 1 || in < 1 || k < 1 || dilation < 1 || pad < 0) throw InvalidArgument("pack_conv: bad shape");
    // Every BF16 user (vocoder, native DiT and conformer) packs its weights here first: refusing
    // now keeps a CPU without the instructions from ever reaching the BF16 tiles.
    if (bf16 && !cpu_has_bf16())
        throw DeviceError(std::string("BF16 needs a CPU with AVX512_BF16 (this one has ") + isa_name() + " kernels only)");
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
    if (bf16) {
        if (in % 2) throw InvalidArgument("pack_conv: BF16 needs an even number of input channels");
        const int I2 = in / 2;
        p.w_bf16.assign(static_cast<size_t>(P) * I2 * k * kPanel * 2, 0);
        for (int o = 0; o < out; ++o)
            for (int i = 0; i < in; ++i)
                for (int kk = 0; kk < k; ++kk)
                    p.w_bf16[((((static_cast<size_t>(o / kPanel) * I2 + i / 2) * k + kk) * kPanel + o % kPanel) * 2) + i % 2] =
                        bf16_round(w[(static_cast<size_t>(o) * in + i) * k + kk]);
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
    if (bf16 && active_isa() != Isa::Avx512) throw DeviceError("BF16 kernels need AVX-512 BF16");
    // Row offsets of the K index into x: F32 K = i*k + kk; BF16 K2 = (i/2)*k + kk (pairs).
    const int K = bf16 ? w.k * (w.in / 2) : w.in * w.k;
    std::vector<int> off(K);
    for (int i = 0, idx = 0; !bf16 && i < w.in; ++i)
        for (int kk = 0; kk < w.k; ++kk) off[idx++] = i * a.x_ld + kk * w.dilation - w.pad;
    for (int i2 = 0, idx = 0; bf16 && i2 < w.in / 2; ++i2)
        for (int kk = 0; kk < w.k; ++kk) off[idx++] = i2 * a.x_ld + kk * w.dilation - w.pad;
    const int P = w.panels(), o_blocks = (P + kBlockPanels - 1) / kBlockPanels;
    const int cols_per_task = tiles_per_task(bf16 ? 2 * K : K) * kTileCols;
    const int t_blocks = (a.n + cols_per_task - 1) / cols_per_task;
    const Isa isa = active_isa();
    pool.parallel_for(a.segments * t_blocks * o_blocks, [&](int task, int) {
        const int ob = task % o_blocks, tb = (task / o_blocks) % t_blocks, seg = task / (o_blocks * t_blocks);
        const int t0 = tb * cols_per_task, t1 = std::min(a.n, t0 + cols_per_task);
        const int p0 = ob * kBlockPanels, p1 = std::min(P, p0 + kBlockPanels);
        for (int t = t0; t < t1; t += kTileCols) {
            const int cols = std::min(kTileCols, t1 - t);
            for (int p = p0; p < p1; ++p) {
                const int o = p * kPanel, R = std::min(kPanel, w.out - o);
                float * c = a.y + static_cast<ptrdiff_t>(seg) * a.y_seg + static_cast<size_t>(o) * a.y_ld + t;
                const float * bias = w.bias.data() + o;
#if defined(OMNI_X86)
                if (bf16) {
                    const auto * ap = reinterpret_cast<const uint32_t *>(w.w_bf16.data()) + static_cast<size_t>(p) * K * kPanel;
                    run_tile<Bf16Tile>(R, cols, K, ap, a.x_bf16 + 2 * (static_cast<ptrdiff_t>(seg) * a.x_seg + t),
                                       off.data(), c, a.y_ld, a.accumulate, bias);
                    continue;
                }
                if (isa == Isa::Avx512) {
                    run_tile<F32Tile>(R, cols, K, w.w.data() + static_cast<size_t>(p) * K * kPanel,
                                      a.x + static_cast<ptrdiff_t>(seg) * a.x_seg + t, off.data(), c, a.y_ld,
                                      a.accumulate, bias);
                    continue;
                }
#endif
                run_tile_generic(R, K, w.w.data() + static_cast<size_t>(p) * K * kPanel,
                                 a.x + static_cast<ptrdiff_t>(seg) * a.x_seg + t, off.data(), c, a.y_ld, cols, a.accumulate,
                                 bias);
            }
        }
        if (epilogue) epilogue(seg, p0 * kPanel, std::min(w.out, p1 * kPanel), t0, t1);
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
