// Unit tests of the CPU kernel sets, without Python or llama.cpp: every set this build has and
// this CPU runs (or the ones named on the command line) against plain double-precision loops.
// Built and run by tests/test_cpu_kernels.py natively, and cross-compiled for aarch64 and run
// under qemu-user, so a wrong NEON kernel fails on an x86 machine too.
//
//   kernel_tests [set...]      exit status 0 when every check passes
#include "kernels/kernels.h"
#include "omni/errors.h"
#include "omni/threadpool.h"
#include "packed_conv.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace omni;
using namespace omni::cpu;

int g_failures = 0;

void check(bool ok, const std::string & what) {
    if (!ok) {
        ++g_failures;
        std::printf("  FAIL %s\n", what.c_str());
    }
}

std::vector<float> randn(size_t n, std::mt19937 & rng, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float & x : v) x = d(rng);
    return v;
}

// y[o][t] = b[o] + sum w[o][i][kk] x[i][t + kk*dil - pad] (zeros outside [0, len)), in double,
// and the sum of |terms| per output (the scale of its rounding error).
void conv_reference(const std::vector<float> & w, const std::vector<float> & b, const std::vector<float> & x, int out,
                    int in, int k, int dil, int pad, int len, int n, std::vector<double> & y,
                    std::vector<double> & mag) {
    y.assign(static_cast<size_t>(out) * n, 0.0);
    mag.assign(y.size(), 0.0);
    for (int o = 0; o < out; ++o)
        for (int t = 0; t < n; ++t) {
            double s = b[o], m = std::fabs(b[o]);
            for (int i = 0; i < in; ++i)
                for (int kk = 0; kk < k; ++kk) {
                    const int src = t + kk * dil - pad;
                    if (src < 0 || src >= len) continue;
                    const double term = static_cast<double>(w[(static_cast<size_t>(o) * in + i) * k + kk]) *
                        x[static_cast<size_t>(i) * len + src];
                    s += term;
                    m += std::fabs(term);
                }
            y[static_cast<size_t>(o) * n + t] = s;
            mag[static_cast<size_t>(o) * n + t] = m;
        }
}

// Packed convolutions over odd shapes: channel counts that leave partial panels, column counts
// that leave partial vectors and tiles, taps with dilation and padding, sums split into passes,
// accumulation, several segments and thread counts.
void test_conv(std::mt19937 & rng) {
    struct Shape {
        int out, in, k, dil, n, segs;
    };
    const Shape shapes[] = {{1, 1, 1, 1, 1, 1},
                            {3, 5, 3, 1, 7, 1},
                            {8, 8, 1, 1, 48, 1},
                            {9, 4, 7, 3, 49, 2},
                            {18, 64, 7, 1, 100, 1},
                            {64, 32, 11, 5, 97, 1},
                            {70, 16, 3, 1, 13, 3},
                            {130, 12, 5, 2, 200, 1},
                            // sums longer than every set's pass (K = 700, 1100): partial sums between passes
                            {20, 100, 7, 1, 61, 2},
                            {17, 1100, 1, 1, 50, 1}};
    for (const Shape & s : shapes) {
        for (bool accumulate : {false, true}) {
            const int pad = s.dil * (s.k - 1) / 2;
            const auto w = randn(static_cast<size_t>(s.out) * s.in * s.k, rng, 0.3f);
            const auto bias = randn(s.out, rng);
            const PackedConv pc = pack_conv(w.data(), bias.data(), s.out, s.in, s.k, s.dil, pad);
            const int seg_len = s.n + pc.right_reach() + pad;  // each segment carries its own padding
            Rows x, y;
            x.shape(s.in, s.segs * seg_len, 64, 128);
            y.shape(s.out, s.segs * s.n, 0, 64);
            std::vector<std::vector<float>> xs(s.segs);
            for (int g = 0; g < s.segs; ++g) {
                xs[g] = randn(static_cast<size_t>(s.in) * s.n, rng);
                for (int i = 0; i < s.in; ++i)
                    for (int t = 0; t < s.n; ++t)
                        x.row(i)[g * seg_len + pad + t] = xs[g][static_cast<size_t>(i) * s.n + t];
            }
            const auto prior = randn(static_cast<size_t>(s.out) * s.segs * s.n, rng);
            for (int o = 0; o < s.out; ++o)
                for (int t = 0; t < s.segs * s.n; ++t) y.row(o)[t] = prior[static_cast<size_t>(o) * s.segs * s.n + t];
            for (int threads : {1, 3}) {
                ThreadPool pool(threads);
                Rows yy = y;
                ConvArgs a;
                a.x = x.data() + pad;
                a.x_ld = x.ld;
                a.y = yy.data();
                a.y_ld = yy.ld;
                a.n = s.n;
                a.segments = s.segs;
                a.x_seg = seg_len;
                a.y_seg = s.n;
                a.accumulate = accumulate;
                conv(pc, a, pool);
                double worst = 0.0;
                for (int g = 0; g < s.segs; ++g) {
                    std::vector<double> ref, mag;
                    conv_reference(w, bias, xs[g], s.out, s.in, s.k, s.dil, pad, s.n, s.n, ref, mag);
                    for (int o = 0; o < s.out; ++o)
                        for (int t = 0; t < s.n; ++t) {
                            const size_t i = static_cast<size_t>(o) * s.n + t;
                            const double want = ref[i] +
                                (accumulate ? prior[static_cast<size_t>(o) * s.segs * s.n + g * s.n + t] : 0.0);
                            const double got = yy.row(o)[g * s.n + t];
                            worst = std::fmax(worst, std::fabs(got - want) / (mag[i] + 1e-30));
                        }
                }
                char what[160];
                std::snprintf(what, sizeof what,
                              "conv out=%d in=%d k=%d dil=%d n=%d segs=%d acc=%d threads=%d: error %.2e x |terms|",
                              s.out, s.in, s.k, s.dil, s.n, s.segs, accumulate, threads, worst);
                check(worst < 2e-6, what);
            }
        }
    }
}

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double mish_ref(double x) { return x * std::tanh(std::log1p(std::exp(x))); }

void test_rows(std::mt19937 & rng) {
    const Kernels & k = kernels();
    for (int n : {1, 7, 16, 33, 1000}) {
        auto x = randn(n, rng, 4.0f);
        x[0] = n > 1 ? 90.0f : -90.0f;  // the clamped ends of exp
        double e_gelu = 0, e_silu = 0, e_mish = 0, e_snake = 0;
        std::vector<float> g = x, s = x, m(n), sn(n);
        k.gelu_tanh_row(g.data(), n);
        k.silu_row(s.data(), n);
        k.mish_affine_row(x.data(), 0.5f, 0.25f, m.data(), n);
        const float alpha = 1.7f;
        k.snake_row(x.data(), alpha, 1.0f / (alpha + 1e-9f), n, sn.data());
        for (int i = 0; i < n; ++i) {
            const double v = x[i];
            const double scale = 1.0 + std::fabs(v);
            e_gelu = std::fmax(e_gelu, std::fabs(g[i] - gelu_ref(v)) / scale);
            e_silu = std::fmax(e_silu, std::fabs(s[i] - v / (1.0 + std::exp(-v))) / scale);
            const double am = 0.5 * v + 0.25;
            e_mish = std::fmax(e_mish, std::fabs(m[i] - mish_ref(am)) / (1.0 + std::fabs(am)));
            const double sv = std::sin(alpha * v);
            e_snake = std::fmax(e_snake, std::fabs(sn[i] - (v + sv * sv / (alpha + 1e-9))) / scale);
        }
        char what[160];
        std::snprintf(what, sizeof what, "rows n=%d: gelu %.1e silu %.1e mish %.1e snake %.1e", n, e_gelu, e_silu,
                      e_mish, e_snake);
        check(e_gelu < 2e-6 && e_silu < 2e-6 && e_mish < 2e-6 && e_snake < 4e-6, what);
    }
    for (int rows : {1, 5, 64}) {
        for (int cols : {1, 3, 16, 50}) {
            auto sc = randn(static_cast<size_t>(rows) * cols, rng, 3.0f);
            std::vector<float> out = sc, tmp(2 * cols);
            k.softmax_columns(out.data(), rows, cols, tmp.data());
            double worst = 0;
            for (int c = 0; c < cols; ++c) {
                double mx = -1e300, sum = 0;
                for (int r = 0; r < rows; ++r) mx = std::fmax(mx, sc[static_cast<size_t>(r) * cols + c]);
                for (int r = 0; r < rows; ++r) sum += std::exp(sc[static_cast<size_t>(r) * cols + c] - mx);
                for (int r = 0; r < rows; ++r) {
                    const double want = std::exp(sc[static_cast<size_t>(r) * cols + c] - mx) / sum;
                    worst = std::fmax(worst, std::fabs(out[static_cast<size_t>(r) * cols + c] - want));
                }
            }
            char what[96];
            std::snprintf(what, sizeof what, "softmax %dx%d: error %.1e", rows, cols, worst);
            check(worst < 1e-6, what);
        }
    }
    for (int rows : {1, 7, 512}) {
        const size_t ld = kColBlock + 5;
        auto x = randn(static_cast<size_t>(rows) * ld, rng, 2.0f);
        for (float & v : x) v += 3.0f;  // a mean far from zero tests the two-pass variance
        float mean[kColBlock], inv[kColBlock];
        k.column_stats(x.data(), ld, rows, 1e-5f, mean, inv);
        double worst = 0;
        for (int j = 0; j < kColBlock; ++j) {
            double m = 0, v = 0;
            for (int r = 0; r < rows; ++r) m += x[r * ld + j];
            m /= rows;
            for (int r = 0; r < rows; ++r) v += (x[r * ld + j] - m) * (x[r * ld + j] - m);
            const double want_inv = 1.0 / std::sqrt(v / rows + 1e-5);
            worst =
                std::fmax(worst, std::fabs(mean[j] - m) / (1 + std::fabs(m)) + std::fabs(inv[j] - want_inv) / want_inv);
        }
        char what[96];
        std::snprintf(what, sizeof what, "column_stats rows=%d: error %.1e", rows, worst);
        check(worst < 2e-5, what);
    }
}

void test_selection() {
    bool threw = false;
    try {
        force_isa("no-such-set");
    } catch (const InvalidArgument &) {
        threw = true;
    }
    check(threw, "an unknown set name is refused");
#if defined(__x86_64__)
    const char * foreign = "neon";
#else
    const char * foreign = "avx2";
#endif
    threw = false;
    try {
        force_isa(foreign);
    } catch (const DeviceError &) {
        threw = true;
    }
    check(threw, std::string("the foreign set '") + foreign + "' is a DeviceError");
    force_isa("auto");
    check(available_isas().back() == isa_name(), "auto picks the best available set");
}

}  // namespace

int main(int argc, char ** argv) {
    std::vector<std::string> sets(argv + 1, argv + argc);
    if (sets.empty()) sets = available_isas();
    test_selection();
    for (const std::string & name : sets) {
        try {
            force_isa(name);
        } catch (const std::exception & e) {
            std::printf("set %s: FAIL cannot select: %s\n", name.c_str(), e.what());
            ++g_failures;
            continue;
        }
        const int before = g_failures;
        std::mt19937 rng(7);
        test_conv(rng);
        test_rows(rng);
        std::printf("set %s: %s\n", name.c_str(), g_failures == before ? "PASS" : "FAIL");
    }
    force_isa("auto");
    std::printf("%s\n", g_failures ? "FAILED" : "ALL PASSED");
    return g_failures ? 1 : 0;
}
