#include "omni/resample.h"

#include "omni/errors.h"

#include <cmath>
#include <numeric>

namespace omni {

namespace {

// One low-pass biquad (RBJ cookbook form, coefficients normalised by a0 and rounded to float),
// run in transposed direct form II in float arithmetic.
struct Biquad {
    float b0, b1, b2, a1, a2, r1 = 0, r2 = 0;

    Biquad(double fs, double fc, double q) {
        const double w = 2 * M_PI * fc / fs, c = std::cos(w), a = std::sin(w) / (2 * q), a0 = 1 + a;
        b0 = static_cast<float>((1 - c) / 2 / a0);
        b1 = static_cast<float>((1 - c) / a0);
        b2 = b0;
        a1 = static_cast<float>(-2 * c / a0);
        a2 = static_cast<float>((1 - a) / a0);
    }

    float operator()(float x) {
        const float y = b0 * x + r1;
        r1 = b1 * x - a1 * y + r2;
        r2 = b2 * x - a2 * y;
        return y;
    }
};

// 4th-order Butterworth: two sections with Q = 1 / (2 cos((2i + 1) pi / 8)).
struct LowPass {
    Biquad s0, s1;
    LowPass(double fs, double fc)
        : s0(fs, fc, 1 / (2 * std::cos(M_PI / 8))), s1(fs, fc, 1 / (2 * std::cos(3 * M_PI / 8))) {}
    float operator()(float x) { return s1(s0(x)); }
};

}  // namespace

int64_t resampled_length(int64_t n, int rate_in, int rate_out) {
    if (n <= 0) return 0;
    if (rate_in == rate_out) return n;
    const uint64_t in = static_cast<uint64_t>(rate_in), out = static_cast<uint64_t>(rate_out);
    uint64_t frames = static_cast<uint64_t>(n) * out / in;
    // The decoder's estimate adds one frame when this (rate-unreduced) input count fits in n.
    const uint64_t need = frames * (in % out) + frames * (in / out) / out;
    if (need <= static_cast<uint64_t>(n)) ++frames;
    return static_cast<int64_t>(frames);
}

std::vector<float> resample_linear(const float * x, int64_t n, int rate_in, int rate_out) {
    if (rate_in <= 0 || rate_out <= 0) throw InvalidArgument("sample rates must be positive");
    if (rate_in == rate_out) return std::vector<float>(x, x + n);
    const int g = std::gcd(rate_in, rate_out);
    const uint32_t in = static_cast<uint32_t>(rate_in / g), out = static_cast<uint32_t>(rate_out / g);
    const bool down = in > out;
    LowPass lpf(std::max(in, out), std::min(in, out) * 0.5);
    std::vector<float> y(static_cast<size_t>(resampled_length(n, rate_in, rate_out)), 0.0f);
    float x0 = 0, x1 = 0;
    uint64_t t_int = 1, t_frac = 0;  // one input frame is loaded before the first output
    int64_t used = 0;
    for (float & o : y) {
        for (; t_int > 0 && used < n; --t_int) {
            x0 = x1;
            x1 = down ? lpf(x[used]) : x[used];
            ++used;
        }
        if (t_int > 0) break;  // the input ran out: the rest stays zero
        const float a = static_cast<float>(t_frac) / static_cast<float>(out);
        o = x0 + (x1 - x0) * a;
        if (!down) o = lpf(o);
        t_int += in / out;
        t_frac += in % out;
        if (t_frac >= out) {
            t_frac -= out;
            ++t_int;
        }
    }
    return y;
}

}  // namespace omni
