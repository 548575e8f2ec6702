#include "omni/hift.h"

#include "cpu_kernels.h"
#include "omni/errors.h"
#include "omni/gguf_file.h"

#include <ggml.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

namespace omni {

namespace {

constexpr int kNfft = 16, kHop = 4, kBins = kNfft / 2 + 1, kStftCh = 2 * kBins;
constexpr int kUpRates[3] = {8, 5, 3}, kUpKernels[3] = {16, 11, 7};
constexpr int kDownStride[3] = {15, 3, 1}, kDownKernel[3] = {30, 6, 1};
constexpr int kSourceKernels[3] = {7, 7, 11}, kResKernels[3] = {3, 7, 11}, kDilations[3] = {1, 3, 5};
constexpr int kHarmonics = 9;
constexpr float kPi = 3.14159265358979323846f;

using cpu::Conv1d;
using cpu::ConvTranspose1d;

std::vector<float> read_f32_exact(const GgufFile & g, const std::string & name, std::vector<int64_t> ne) {
    const GgufTensorInfo & t = g.tensor(name);
    if (t.type != GGML_TYPE_F32) {
        throw ModelFileError(g.path(), "tensor '" + name + "' is " + ggml_type_label(t.type) + ", the vocoder needs f32");
    }
    if (t.ne != ne) {
        std::string want, got;
        for (auto v : ne) want += (want.empty() ? "" : ",") + std::to_string(v);
        for (auto v : t.ne) got += (got.empty() ? "" : ",") + std::to_string(v);
        throw ModelFileError(g.path(), "tensor '" + name + "' has shape [" + got + "], expected [" + want + "]");
    }
    return g.read_f32(name);
}

Conv1d load_conv(const GgufFile & g, const std::string & p, int in, int out, int k, int stride, int pad, int dil = 1) {
    Conv1d c;
    c.in = in, c.out = out, c.k = k, c.stride = stride, c.pad = pad, c.dilation = dil;
    c.w = read_f32_exact(g, p + ".weight", {k, in, out});  // memory [out][in][k]
    c.b = read_f32_exact(g, p + ".bias", {out});
    return c;
}

struct ResBlock {
    Conv1d c1[3], c2[3];
    std::vector<float> a1[3], a2[3];
};

ResBlock load_resblock(const GgufFile & g, const std::string & p, int ch, int k) {
    ResBlock r;
    for (int j = 0; j < 3; ++j) {
        r.c1[j] = load_conv(g, p + ".convs1." + std::to_string(j), ch, ch, k, 1, kDilations[j] * (k - 1) / 2, kDilations[j]);
        r.c2[j] = load_conv(g, p + ".convs2." + std::to_string(j), ch, ch, k, 1, (k - 1) / 2);
        r.a1[j] = read_f32_exact(g, p + ".activations1." + std::to_string(j) + ".alpha", {ch});
        r.a2[j] = read_f32_exact(g, p + ".activations2." + std::to_string(j) + ".alpha", {ch});
    }
    return r;
}

}  // namespace

// Grows a reusable buffer to n floats (no zeroing, no shrinking) and returns it.
float * grow(std::vector<float> & v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

struct HiftVocoder::Impl {
    ThreadPool pool;
    cpu::Scratch scratch;
    std::mutex mutex;  // one call at a time: the buffers below are shared
    std::vector<float> rb_t1, rb_t2, b_x, b_y, b_tmp, b_si, b_sr, b_acc, b_out, b_post;
    int base = 0, f0_ch = 0, stage_ch[3] = {0, 0, 0};
    Conv1d conv_pre, conv_post, source_downs[3], f0_convs[5];
    ConvTranspose1d ups[3];
    ResBlock resblocks[9], source_resblocks[3];
    std::vector<float> f0_cls_w, lin_w;
    float f0_cls_b = 0, lin_b = 0;
    float window[kNfft];

    Impl(int threads, const std::vector<int> & cpus) : pool(threads, cpus) {
        for (int n = 0; n < kNfft; ++n) window[n] = 0.5f - 0.5f * std::cos(2.0f * kPi * n / kNfft);  // periodic Hann
    }

    // x [ch][len] -> mean over the blocks' outputs is done by the caller; this returns block(x).
    void resblock(const ResBlock & r, int ch, const float * x, int len, float * out) {
        const size_t n = static_cast<size_t>(ch) * len;
        float * t1 = grow(rb_t1, n);
        float * t2 = grow(rb_t2, n);
        std::memcpy(out, x, sizeof(float) * n);
        for (int j = 0; j < 3; ++j) {
            cpu::snake(out, r.a1[j].data(), ch, len, t1, pool);
            cpu::conv1d(r.c1[j], t1, len, t2, pool, scratch);
            cpu::snake(t2, r.a2[j].data(), ch, len, t2, pool);
            cpu::conv1d(r.c2[j], t2, len, t1, pool, scratch);
            for (size_t i = 0; i < n; ++i) out[i] += t1[i];
        }
    }

    std::vector<float> stft(const float * s, int n) const {
        if (n < kNfft / 2 + 1) throw InvalidArgument("source is too short for the STFT");
        const int frames = n / kHop + 1;
        std::vector<float> out(static_cast<size_t>(kStftCh) * frames);
        auto at = [&](int i) {  // reflect padding of n_fft/2 on both sides
            if (i < 0) i = -i;
            if (i >= n) i = 2 * (n - 1) - i;
            return s[i];
        };
        float cs[kBins][kNfft], sn[kBins][kNfft];
        for (int k = 0; k < kBins; ++k)
            for (int m = 0; m < kNfft; ++m) {
                cs[k][m] = std::cos(2.0f * kPi * k * m / kNfft);
                sn[k][m] = std::sin(2.0f * kPi * k * m / kNfft);
            }
        for (int f = 0; f < frames; ++f) {
            float buf[kNfft];
            for (int m = 0; m < kNfft; ++m) buf[m] = window[m] * at(f * kHop + m - kNfft / 2);
            for (int k = 0; k < kBins; ++k) {
                float re = 0, im = 0;
                for (int m = 0; m < kNfft; ++m) {
                    re += buf[m] * cs[k][m];
                    im -= buf[m] * sn[k][m];
                }
                out[static_cast<size_t>(k) * frames + f] = re;
                out[static_cast<size_t>(kBins + k) * frames + f] = im;
            }
        }
        return out;
    }

    std::vector<float> istft(const float * spec, int frames) const {
        const int full = kNfft + kHop * (frames - 1);
        std::vector<float> y(full, 0.0f), env(full, 0.0f);
        for (int f = 0; f < frames; ++f) {
            float re[kBins], im[kBins];
            for (int k = 0; k < kBins; ++k) {
                const float mag = std::min(std::exp(spec[static_cast<size_t>(k) * frames + f]), 100.0f);
                const float ph = std::sin(spec[static_cast<size_t>(kBins + k) * frames + f]);
                re[k] = mag * std::cos(ph);
                im[k] = mag * std::sin(ph);
            }
            for (int m = 0; m < kNfft; ++m) {
                // Inverse real DFT; the imaginary parts of DC and Nyquist do not contribute.
                float v = re[0] + ((m & 1) ? -re[kBins - 1] : re[kBins - 1]);
                for (int k = 1; k < kBins - 1; ++k) {
                    const float a = 2.0f * kPi * k * m / kNfft;
                    v += 2.0f * (re[k] * std::cos(a) - im[k] * std::sin(a));
                }
                y[f * kHop + m] += window[m] * v / kNfft;
                env[f * kHop + m] += window[m] * window[m];
            }
        }
        const int n = kHop * (frames - 1);
        std::vector<float> out(n);
        for (int t = 0; t < n; ++t) {
            const float e = env[t + kNfft / 2];
            const float v = e > 1e-11f ? y[t + kNfft / 2] / e : 0.0f;
            out[t] = std::clamp(v, -0.99f, 0.99f);
        }
        return out;
    }
};

HiftVocoder::HiftVocoder(const std::string & path, int threads, const std::vector<int> & cpus)
    : impl_(std::make_unique<Impl>(threads, cpus)) {
    GgufFile g(path);
    Impl & m = *impl_;
    const GgufTensorInfo & pre = g.tensor("conv_pre.weight");
    if (pre.ne.size() != 3 || pre.ne[0] != 7 || pre.ne[1] != kMel || pre.ne[2] < 8 || pre.ne[2] % 8) {
        throw ModelFileError(path, "conv_pre.weight must be [7, 80, C] with C a multiple of 8");
    }
    m.base = static_cast<int>(pre.ne[2]);
    m.f0_ch = static_cast<int>(g.tensor("f0_predictor.condnet.0.weight").ne.back());
    m.conv_pre = load_conv(g, "conv_pre", kMel, m.base, 7, 1, 3);
    int ch_in = m.base;
    for (int i = 0; i < 3; ++i) {
        const int ch = m.base >> (i + 1);
        m.stage_ch[i] = ch;
        ConvTranspose1d & u = m.ups[i];
        u.in = ch_in, u.out = ch, u.k = kUpKernels[i], u.stride = kUpRates[i], u.pad = (kUpKernels[i] - kUpRates[i]) / 2;
        u.w = read_f32_exact(g, "ups." + std::to_string(i) + ".weight", {u.k, ch, ch_in});  // memory [in][out][k]
        u.b = read_f32_exact(g, "ups." + std::to_string(i) + ".bias", {ch});
        m.source_downs[i] = load_conv(g, "source_downs." + std::to_string(i), kStftCh, ch, kDownKernel[i], kDownStride[i],
                                      kDownStride[i] / 2 * (kDownKernel[i] > 1 ? 1 : 0));
        m.source_resblocks[i] = load_resblock(g, "source_resblocks." + std::to_string(i), ch, kSourceKernels[i]);
        for (int r = 0; r < 3; ++r)
            m.resblocks[3 * i + r] = load_resblock(g, "resblocks." + std::to_string(3 * i + r), ch, kResKernels[r]);
        ch_in = ch;
    }
    m.conv_post = load_conv(g, "conv_post", m.stage_ch[2], kStftCh, 7, 1, 3);
    for (int i = 0; i < 5; ++i)
        m.f0_convs[i] = load_conv(g, "f0_predictor.condnet." + std::to_string(2 * i), i == 0 ? kMel : m.f0_ch, m.f0_ch, 3, 1, 1);
    m.f0_cls_w = read_f32_exact(g, "f0_predictor.classifier.weight", {m.f0_ch, 1});
    m.f0_cls_b = read_f32_exact(g, "f0_predictor.classifier.bias", {1})[0];
    m.lin_w = read_f32_exact(g, "m_source.l_linear.weight", {kHarmonics, 1});
    m.lin_b = read_f32_exact(g, "m_source.l_linear.bias", {1})[0];
}

HiftVocoder::~HiftVocoder() = default;

int HiftVocoder::threads() const { return impl_->pool.size(); }
int HiftVocoder::base_channels() const { return impl_->base; }

std::vector<float> HiftVocoder::f0(const float * mel, int frames) {
    if (frames <= 0) throw InvalidArgument("mel has no frames");
    Impl & m = *impl_;
    std::lock_guard<std::mutex> lock(m.mutex);
    std::vector<float> a(mel, mel + static_cast<size_t>(kMel) * frames), b(static_cast<size_t>(m.f0_ch) * frames);
    for (int i = 0; i < 5; ++i) {
        cpu::conv1d(m.f0_convs[i], a.data(), frames, b.data(), m.pool, m.scratch);
        for (float & v : b) v = v > 0.0f ? v : std::expm1(v);  // ELU
        a.swap(b);
        b.resize(static_cast<size_t>(m.f0_ch) * frames);
    }
    std::vector<float> out(frames);
    for (int t = 0; t < frames; ++t) {
        float acc = 0.0f;
        for (int c = 0; c < m.f0_ch; ++c) acc += m.f0_cls_w[c] * a[static_cast<size_t>(c) * frames + t];
        out[t] = std::fabs(acc + m.f0_cls_b);
    }
    return out;
}

std::vector<float> HiftVocoder::source(const std::vector<float> & f0) {
    // SineGen2 + SourceModuleHnNSF2 with zero noise and zero initial phase, float arithmetic
    // ordered as the reference computes it so that the large phases round the same way.
    const int frames = static_cast<int>(f0.size());
    if (frames == 0) throw InvalidArgument("f0 is empty");
    const int n = frames * kSamplesPerFrame;
    const Impl & m = *impl_;
    const float scale = static_cast<float>(1.0 / kSamplesPerFrame);
    std::vector<float> merged(n, m.lin_b);
    std::vector<float> phase(frames);
    for (int h = 0; h < kHarmonics; ++h) {
        double cum = 0.0;  // the reference's cumsum accumulates in double
        for (int j = 0; j < frames; ++j) {
            const float fn = f0[j] * static_cast<float>(h + 1);
            float rad = std::fmod(fn / static_cast<float>(kSampleRate), 1.0f);
            cum += rad;
            phase[j] = static_cast<float>(cum) * 2.0f * static_cast<float>(M_PI) * static_cast<float>(kSamplesPerFrame);
        }
        const float w = m.lin_w[h];
        for (int t = 0; t < n; ++t) {
            float src = scale * (static_cast<float>(t) + 0.5f) - 0.5f;
            if (src < 0.0f) src = 0.0f;
            const int i0 = static_cast<int>(src);
            const int i1 = i0 + (i0 < frames - 1 ? 1 : 0);
            const float l1 = src - static_cast<float>(i0), l0 = 1.0f - l1;
            const float ph = l0 * phase[i0] + l1 * phase[i1];
            const int fi = std::min(frames - 1, static_cast<int>(std::floor(static_cast<float>(t) * scale)));
            const float uv = f0[fi] > 10.0f ? 1.0f : 0.0f;
            merged[t] += w * (std::sin(ph) * 0.1f * uv);
        }
    }
    for (float & v : merged) v = std::tanh(v);
    return merged;
}

std::vector<float> HiftVocoder::decode(const float * mel, int frames, const float * src) {
    if (frames <= 0) throw InvalidArgument("mel has no frames");
    Impl & m = *impl_;
    std::lock_guard<std::mutex> lock(m.mutex);
    const int n_src = frames * kSamplesPerFrame;
    std::vector<float> spec = m.stft(src, n_src);
    const int stft_frames = n_src / kHop + 1;

    float * x = grow(m.b_x, static_cast<size_t>(m.base) * frames);
    cpu::conv1d(m.conv_pre, mel, frames, x, m.pool, m.scratch);
    int len = frames, ch_in = m.base;
    for (int i = 0; i < 3; ++i) {
        const int ch = m.stage_ch[i];
        cpu::leaky_relu(x, static_cast<size_t>(ch_in) * len, 0.1f, m.pool);
        const int up_len = m.ups[i].out_len(len);
        const int pad = i == 2 ? 1 : 0;  // ReflectionPad1d((1, 0)) after the last upsampling
        const size_t n = static_cast<size_t>(ch) * (up_len + pad);
        float * y = grow(m.b_y, n);
        if (pad) {
            float * tmp = grow(m.b_tmp, static_cast<size_t>(ch) * up_len);
            cpu::conv_transpose1d(m.ups[i], x, len, tmp, m.pool, m.scratch);
            for (int c = 0; c < ch; ++c) {
                float * dst = y + static_cast<size_t>(c) * (up_len + 1);
                const float * s = tmp + static_cast<size_t>(c) * up_len;
                dst[0] = s[1];
                std::memcpy(dst + 1, s, sizeof(float) * up_len);
            }
        } else {
            cpu::conv_transpose1d(m.ups[i], x, len, y, m.pool, m.scratch);
        }
        len = up_len + pad;
        const int s_len = m.source_downs[i].out_len(stft_frames);
        if (s_len != len) {
            throw InvalidArgument("source length does not match the mel (" + std::to_string(s_len) + " vs " +
                                  std::to_string(len) + ")");
        }
        float * si = grow(m.b_si, n);
        float * sr = grow(m.b_sr, n);
        cpu::conv1d(m.source_downs[i], spec.data(), stft_frames, si, m.pool, m.scratch);
        m.resblock(m.source_resblocks[i], ch, si, len, sr);
        for (size_t k = 0; k < n; ++k) y[k] += sr[k];
        float * acc = grow(m.b_acc, n);
        float * out = grow(m.b_out, n);
        std::fill_n(acc, n, 0.0f);
        for (int r = 0; r < 3; ++r) {
            m.resblock(m.resblocks[3 * i + r], ch, y, len, out);
            for (size_t k = 0; k < n; ++k) acc[k] += out[k];
        }
        x = grow(m.b_x, n);
        for (size_t k = 0; k < n; ++k) x[k] = acc[k] / 3.0f;
        ch_in = ch;
    }
    cpu::leaky_relu(x, static_cast<size_t>(ch_in) * len, 0.01f, m.pool);
    float * post = grow(m.b_post, static_cast<size_t>(kStftCh) * len);
    cpu::conv1d(m.conv_post, x, len, post, m.pool, m.scratch);
    return m.istft(post, len);
}

std::vector<float> HiftVocoder::forward(const float * mel, int frames, const std::vector<float> & cache_source,
                                        std::vector<float> * source_out) {
    std::vector<float> s = source(f0(mel, frames));
    if (cache_source.size() > s.size()) throw InvalidArgument("cache_source is longer than the chunk's source");
    std::copy(cache_source.begin(), cache_source.end(), s.begin());
    std::vector<float> audio = decode(mel, frames, s.data());
    if (source_out) *source_out = std::move(s);
    return audio;
}

}  // namespace omni
