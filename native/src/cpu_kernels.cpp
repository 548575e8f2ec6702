#include "cpu_kernels.h"

#include "omni/errors.h"
#include "blas.h"
#include "kernels/kernels.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>

namespace omni::cpu {

// The wheel's OpenBLAS is private to this extension, so the setting is ours.
void single_threaded_blas() {
#if defined(OMNI_BLAS_SET_THREADS)
    static std::once_flag once;
    std::call_once(once, [] { OMNI_BLAS_SET_THREADS(1); });
#endif
}

namespace {

// Work split of one convolution: column tiles of up to 512 outputs, and when that leaves fewer
// than 4 tasks, output-channel blocks as well (multiples of 16 rows). Larger tiles mean fewer
// sgemm calls, so OpenBLAS packs the weights fewer times. The split depends on the shapes only,
// never on the thread count, so the output is bit-identical for any number of threads.
struct Split {
    int tile, n_tiles, m_block, m_blocks;
};

Split split_work(int m, int n) {
    Split s;
    s.tile = std::min(n, 512);
    s.n_tiles = (n + s.tile - 1) / s.tile;
    s.m_blocks = 1;
    if (s.n_tiles < 4 && m >= 64) s.m_blocks = std::min(m / 32, (4 + s.n_tiles - 1) / s.n_tiles);
    s.m_block = ((m + s.m_blocks - 1) / s.m_blocks + 15) / 16 * 16;
    s.m_blocks = (m + s.m_block - 1) / s.m_block;
    return s;
}

constexpr int kChannelsPerTask = 8;  // conv_transpose1d and elementwise ops split channels in 8s

}  // namespace

float * Scratch::get(int worker, size_t n) {
    auto & b = bufs_.at(static_cast<size_t>(worker));
    if (b.size() < n) b.resize(n);
    return b.data();
}

void conv1d(const Conv1d & c, const float * x, int len, float * y, ThreadPool & pool, Scratch & scratch, int x_ld,
            int y_ld) {
    const int out_len = c.out_len(len);
    if (x_ld <= 0) x_ld = len;
    if (y_ld <= 0) y_ld = out_len;
    if (out_len <= 0) throw InvalidArgument("conv1d: input of " + std::to_string(len) + " frames is too short");
    const int rows = c.in * c.k;
    scratch.reserve_workers(pool.size());
    const bool direct = c.k == 1 && c.stride == 1 && c.pad == 0;
    const Split sp = split_work(c.out, out_len);
    pool.parallel_for(sp.n_tiles * sp.m_blocks, [&](int task, int worker) {
        single_threaded_blas();
        const int tile_i = task / sp.m_blocks, mb = task % sp.m_blocks;
        const int t0 = tile_i * sp.tile, n = std::min(sp.tile, out_len - t0);
        const int o0 = mb * sp.m_block, m = std::min(sp.m_block, c.out - o0);
        for (int o = o0; o < o0 + m; ++o) std::fill_n(y + static_cast<size_t>(o) * y_ld + t0, n, c.b[o]);
        const float * cols;
        int ldb;
        if (direct) {
            cols = x + t0;
            ldb = x_ld;
        } else {
            float * col = scratch.get(worker, static_cast<size_t>(rows) * n);
            for (int i = 0; i < c.in; ++i) {
                const float * xi = x + static_cast<size_t>(i) * x_ld;
                for (int kk = 0; kk < c.k; ++kk) {
                    float * dst = col + (static_cast<size_t>(i) * c.k + kk) * n;
                    const int off = kk * c.dilation - c.pad;
                    if (c.stride == 1) {
                        // Contiguous run [t0+off, t0+off+n) clipped to the input, zeros outside.
                        const int s0 = t0 + off;
                        const int lo = std::max(0, -s0), hi = std::min(n, len - s0);
                        if (lo > 0) std::fill_n(dst, std::min(lo, n), 0.0f);
                        if (hi > lo) std::memcpy(dst + lo, xi + s0 + lo, sizeof(float) * (hi - lo));
                        if (hi < n) std::fill_n(dst + std::max(hi, 0), n - std::max(hi, 0), 0.0f);
                    } else {
                        for (int j = 0; j < n; ++j) {
                            const int s = (t0 + j) * c.stride + off;
                            dst[j] = (s >= 0 && s < len) ? xi[s] : 0.0f;
                        }
                    }
                }
            }
            cols = col;
            ldb = n;
        }
        OMNI_SGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, rows, 1.0f,
                   c.w.data() + static_cast<size_t>(o0) * rows, rows, cols, ldb, 1.0f,
                   y + static_cast<size_t>(o0) * y_ld + t0, y_ld);
    });
}

void conv_transpose1d(const ConvTranspose1d & c, const float * x, int len, float * y, ThreadPool & pool,
                      Scratch & scratch, int x_ld, int y_ld) {
    const int out_len = c.out_len(len);
    if (out_len <= 0) throw InvalidArgument("conv_transpose1d: input is too short");
    if (x_ld <= 0) x_ld = len;
    if (y_ld <= 0) y_ld = out_len;
    scratch.reserve_workers(pool.size());
    // Split output channels between workers: each owns its rows of y, so overlap-add never races.
    const int per = kChannelsPerTask;
    const int groups = (c.out + per - 1) / per;
    pool.parallel_for(groups, [&](int task, int worker) {
        single_threaded_blas();
        const int o0 = task * per, o1 = std::min(c.out, o0 + per);
        if (o0 >= o1) return;
        const int m = (o1 - o0) * c.k;
        float * z = scratch.get(worker, static_cast<size_t>(m) * len);
        // z[(o,kk)][s] = sum_i w[i][o][kk] * x[i][s]: w viewed as (in x out*k), transposed.
        OMNI_SGEMM(CblasRowMajor, CblasTrans, CblasNoTrans, m, len, c.in, 1.0f,
                   c.w.data() + static_cast<size_t>(o0) * c.k, c.out * c.k, x, x_ld, 0.0f, z, len);
        for (int o = o0; o < o1; ++o) {
            float * yo = y + static_cast<size_t>(o) * y_ld;
            std::fill_n(yo, out_len, c.b[o]);
            for (int kk = 0; kk < c.k; ++kk) {
                const float * zr = z + (static_cast<size_t>(o - o0) * c.k + kk) * len;
                for (int s = 0; s < len; ++s) {
                    const int t = s * c.stride + kk - c.pad;
                    if (t >= 0 && t < out_len) yo[t] += zr[s];
                }
            }
        }
    });
}

void snake_row(const float * x, float alpha, int len, float * y) {
    kernels().snake_row(x, alpha, 1.0f / (alpha + 1e-9f), len, y);
}

void snake(const float * x, const float * alpha, int channels, int len, float * y, ThreadPool & pool, int x_ld,
           int y_ld) {
    if (x_ld <= 0) x_ld = len;
    if (y_ld <= 0) y_ld = len;
    const int per = kChannelsPerTask;
    const int groups = (channels + per - 1) / per;
    pool.parallel_for(groups, [&](int task, int) {
        for (int ch = task * per; ch < std::min(channels, (task + 1) * per); ++ch)
            snake_row(x + static_cast<size_t>(ch) * x_ld, alpha[ch], len, y + static_cast<size_t>(ch) * y_ld);
    });
}

double sgemm_gflops(ThreadPool & pool, int m, int n, int k, int reps) {
    if (m <= 0 || n <= 0 || k <= 0 || reps <= 0) throw InvalidArgument("sgemm_gflops: sizes must be positive");
    const int w = pool.size();
    std::vector<std::vector<float>> a(w), b(w), c(w);
    for (int i = 0; i < w; ++i) {
        a[i].assign(static_cast<size_t>(m) * k, 0.5f);
        b[i].assign(static_cast<size_t>(k) * n, 0.25f);
        c[i].assign(static_cast<size_t>(m) * n, 0.0f);
    }
    auto run = [&](int task, int) {
        single_threaded_blas();
        OMNI_SGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a[task].data(), k, b[task].data(), n, 0.0f,
                   c[task].data(), n);
    };
    pool.parallel_for(w, run);  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) pool.parallel_for(w, run);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return 2.0 * m * n * k * static_cast<double>(w) * reps / s / 1e9;
}

const char * blas_description() {
#if defined(OMNI_BLAS_CORENAME)
    static const std::string d = std::string("scipy-openblas (") + OMNI_BLAS_CORENAME() + ")";
    return d.c_str();
#else
    return "system cblas";
#endif
}

}  // namespace omni::cpu
