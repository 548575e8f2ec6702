#include "omni/hift.h"

#include "cpu_kernels.h"
#include "packed_conv.h"
#include "omni/errors.h"
#include "omni/gguf_file.h"

#include <ggml.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
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
using cpu::PackedConv;
using cpu::Rows;

std::vector<float> read_f32_exact(const GgufFile & g, const std::string & name, std::vector<int64_t> ne) {
    const GgufTensorInfo & t = g.tensor(name);
    if (t.type != GGML_TYPE_F32) {
        throw ModelFileError(g.path(),
                             "tensor '" + name + "' is " + ggml_type_label(t.type) + ", the vocoder needs f32");
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

PackedConv load_packed(const GgufFile & g, const std::string & p, int in, int out, int k, int pad, int dil, bool bf16) {
    const Conv1d c = load_conv(g, p, in, out, k, 1, pad, dil);
    return cpu::pack_conv(c.w.data(), c.b.data(), out, in, k, dil, pad, bf16);
}

struct ResBlock {
    PackedConv c1[3], c2[3];
    std::vector<float> a1[3], a2[3];
};

ResBlock load_resblock(const GgufFile & g, const std::string & p, int ch, int k, bool bf16) {
    ResBlock r;
    for (int j = 0; j < 3; ++j) {
        r.c1[j] = load_packed(g, p + ".convs1." + std::to_string(j), ch, ch, k, kDilations[j] * (k - 1) / 2,
                              kDilations[j], bf16);
        r.c2[j] = load_packed(g, p + ".convs2." + std::to_string(j), ch, ch, k, (k - 1) / 2, 1, bf16);
        r.a1[j] = read_f32_exact(g, p + ".activations1." + std::to_string(j) + ".alpha", {ch});
        r.a2[j] = read_f32_exact(g, p + ".activations2." + std::to_string(j) + ".alpha", {ch});
    }
    return r;
}

// fn(o) for the channels [o0, o1) of a finished block.
template <class Fn>
void each_row(int o0, int o1, Fn fn) {
    for (int o = o0; o < o1; ++o) fn(o);
}

float leaky(float v, float slope) { return v > 0.0f ? v : v * slope; }

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
    cpu::Precision precision = cpu::Precision::F32;
    // Per stage: the upsampled input y, the source branch si, the resblock temporaries t1/t2 and
    // output out, the running sum acc; x[i] is stage i's input (x[3] feeds conv_post).
    struct StageRows {
        Rows y, si, t1, t2, out, acc;
    } st[3];
    Rows x[4], mel_rows, f0_a, f0_b;
    std::vector<uint16_t> pairs;  // BF16 copy of a conv input
    std::vector<float> b_tmp, b_post;
    int base = 0, f0_ch = 0, stage_ch[3] = {0, 0, 0};
    PackedConv conv_pre, conv_post, f0_convs[5];
    Conv1d source_downs[3];
    ConvTranspose1d ups[3];
    ResBlock resblocks[9], source_resblocks[3];
    std::vector<float> f0_cls_w, lin_w;
    float f0_cls_b = 0, lin_b = 0;
    float window[kNfft];

    Impl(int threads, const std::vector<int> & cpus) : pool(threads, cpus) {
        for (int n = 0; n < kNfft; ++n) window[n] = 0.5f - 0.5f * std::cos(2.0f * kPi * n / kNfft);  // periodic Hann
    }

    // y = conv(x) over n columns, then epilogue(o0, o1, t0, t1) per finished block.
    void conv(const PackedConv & c, Rows & in, Rows & out, int n, const std::function<void(int, int, int, int)> & ep,
              bool accumulate = false) {
        cpu::ConvArgs a = cpu::rows_conv_args(c, in, out, n, precision, pairs, pool);
        a.accumulate = accumulate;
        cpu::BlockFn block;
        if (ep) block = [&](int, int o0, int o1, int t0, int t1) { ep(o0, o1, t0, t1); };
        cpu::conv(c, a, pool, block);
    }

    // One resblock on `in` (ch x len); `done(o0, o1, t0, t1)` consumes finished blocks of its
    // output (in s.out) after the last conv. Snake runs in the conv epilogues.
    void resblock(const ResBlock & r, StageRows & s, Rows & in, int len,
                  const std::function<void(int, int, int, int)> & done) {
        cpu::snake(in.data(), r.a1[0].data(), in.channels, len, s.t1.data(), pool, in.ld, s.t1.ld);
        for (int j = 0; j < 3; ++j) {
            conv(r.c1[j], s.t1, s.t2, len, [&](int o0, int o1, int t0, int t1) {
                each_row(o0, o1,
                         [&](int o) { cpu::snake_row(s.t2.row(o) + t0, r.a2[j][o], t1 - t0, s.t2.row(o) + t0); });
            });
            conv(
                r.c2[j], s.t2, s.out, len,
                [&](int o0, int o1, int t0, int t1) {
                    each_row(o0, o1, [&](int o) {
                        float * out = s.out.row(o);
                        if (j == 0) {  // the residual: x + conv
                            const float * x = in.row(o);
                            for (int t = t0; t < t1; ++t) out[t] += x[t];
                        }
                        if (j < 2) cpu::snake_row(out + t0, r.a1[j + 1][o], t1 - t0, s.t1.row(o) + t0);
                    });
                    if (j == 2) done(o0, o1, t0, t1);
                },
                j > 0);
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

    int upsample(int i, int len);
    void stage_resblocks(int i, int len);
};

HiftVocoder::HiftVocoder(const std::string & path, int threads, const std::vector<int> & cpus, bool bf16)
    : impl_(std::make_unique<Impl>(threads, cpus)) {
    if (bf16 && !cpu::cpu_has_bf16()) {
        throw DeviceError("the BF16 vocoder needs a CPU with AVX512_BF16 (this one has " +
                          std::string(cpu::isa_name()) + " kernels only)");
    }
    GgufFile g(path);
    Impl & m = *impl_;
    m.precision = bf16 ? cpu::Precision::BF16 : cpu::Precision::F32;
    const GgufTensorInfo & pre = g.tensor("conv_pre.weight");
    if (pre.ne.size() != 3 || pre.ne[0] != 7 || pre.ne[1] != kMel || pre.ne[2] < 8 || pre.ne[2] % 8) {
        throw ModelFileError(path, "conv_pre.weight must be [7, 80, C] with C a multiple of 8");
    }
    m.base = static_cast<int>(pre.ne[2]);
    m.f0_ch = static_cast<int>(g.tensor("f0_predictor.condnet.0.weight").ne.back());
    if (bf16 && m.f0_ch % 2) throw ModelFileError(path, "the BF16 vocoder needs an even f0 predictor width");
    m.conv_pre = load_packed(g, "conv_pre", kMel, m.base, 7, 3, 1, bf16);
    int ch_in = m.base;
    for (int i = 0; i < 3; ++i) {
        const int ch = m.base >> (i + 1);
        m.stage_ch[i] = ch;
        ConvTranspose1d & u = m.ups[i];
        u.in = ch_in, u.out = ch, u.k = kUpKernels[i], u.stride = kUpRates[i],
        u.pad = (kUpKernels[i] - kUpRates[i]) / 2;
        u.w = read_f32_exact(g, "ups." + std::to_string(i) + ".weight", {u.k, ch, ch_in});  // memory [in][out][k]
        u.b = read_f32_exact(g, "ups." + std::to_string(i) + ".bias", {ch});
        m.source_downs[i] = load_conv(g, "source_downs." + std::to_string(i), kStftCh, ch, kDownKernel[i],
                                      kDownStride[i], kDownStride[i] / 2 * (kDownKernel[i] > 1 ? 1 : 0));
        m.source_resblocks[i] = load_resblock(g, "source_resblocks." + std::to_string(i), ch, kSourceKernels[i], bf16);
        for (int r = 0; r < 3; ++r)
            m.resblocks[3 * i + r] =
                load_resblock(g, "resblocks." + std::to_string(3 * i + r), ch, kResKernels[r], bf16);
        ch_in = ch;
    }
    m.conv_post = load_packed(g, "conv_post", m.stage_ch[2], kStftCh, 7, 3, 1, bf16);
    for (int i = 0; i < 5; ++i)
        m.f0_convs[i] = load_packed(g, "f0_predictor.condnet." + std::to_string(2 * i), i == 0 ? kMel : m.f0_ch,
                                    m.f0_ch, 3, 1, 1, bf16);
    m.f0_cls_w = read_f32_exact(g, "f0_predictor.classifier.weight", {m.f0_ch, 1});
    m.f0_cls_b = read_f32_exact(g, "f0_predictor.classifier.bias", {1})[0];
    m.lin_w = read_f32_exact(g, "m_source.l_linear.weight", {kHarmonics, 1});
    m.lin_b = read_f32_exact(g, "m_source.l_linear.bias", {1})[0];
}

HiftVocoder::~HiftVocoder() = default;

int HiftVocoder::threads() const { return impl_->pool.size(); }
int HiftVocoder::base_channels() const { return impl_->base; }
bool HiftVocoder::bf16() const { return impl_->precision == cpu::Precision::BF16; }

size_t HiftVocoder::weight_bytes() const {
    using cpu::bytes_of;
    const Impl & m = *impl_;
    size_t n = m.conv_pre.bytes() + m.conv_post.bytes() + bytes_of(m.f0_cls_w) + bytes_of(m.lin_w);
    for (const PackedConv & c : m.f0_convs) n += c.bytes();
    for (int i = 0; i < 3; ++i)
        n +=
            bytes_of(m.source_downs[i].w) + bytes_of(m.source_downs[i].b) + bytes_of(m.ups[i].w) + bytes_of(m.ups[i].b);
    auto resblock_bytes = [](const ResBlock & r) {
        size_t b = 0;
        for (int j = 0; j < 3; ++j) b += r.c1[j].bytes() + r.c2[j].bytes() + bytes_of(r.a1[j]) + bytes_of(r.a2[j]);
        return b;
    };
    for (const ResBlock & r : m.resblocks) n += resblock_bytes(r);
    for (const ResBlock & r : m.source_resblocks) n += resblock_bytes(r);
    return n;
}

std::vector<float> HiftVocoder::f0(const float * mel, int frames) {
    if (frames <= 0) throw InvalidArgument("mel has no frames");
    Impl & m = *impl_;
    std::lock_guard<std::mutex> lock(m.mutex);
    m.mel_rows.shape(kMel, frames);
    for (int c = 0; c < kMel; ++c) std::copy_n(mel + static_cast<size_t>(c) * frames, frames, m.mel_rows.row(c));
    m.f0_a.shape(m.f0_ch, frames);
    m.f0_b.shape(m.f0_ch, frames);
    Rows * in = &m.mel_rows;
    Rows * out = &m.f0_a;
    for (int i = 0; i < 5; ++i) {
        m.conv(m.f0_convs[i], *in, *out, frames, [&](int o0, int o1, int t0, int t1) {
            each_row(o0, o1, [&](int o) {
                float * r = out->row(o);
                for (int t = t0; t < t1; ++t) r[t] = r[t] > 0.0f ? r[t] : std::expm1(r[t]);  // ELU
            });
        });
        in = out;
        out = out == &m.f0_a ? &m.f0_b : &m.f0_a;
    }
    std::vector<float> res(frames);
    for (int t = 0; t < frames; ++t) {
        float acc = 0.0f;
        for (int c = 0; c < m.f0_ch; ++c) acc += m.f0_cls_w[c] * in->row(c)[t];
        res[t] = std::fabs(acc + m.f0_cls_b);
    }
    return res;
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

// Stage i's transposed conv of x[i] (len frames) into st[i].y, with the ReflectionPad1d((1, 0))
// after the last one; shapes the stage's rows and x[i + 1]. Returns the stage's frames.
int HiftVocoder::Impl::upsample(int i, int len) {
    const int ch = stage_ch[i];
    StageRows & s = st[i];
    const int up_len = ups[i].out_len(len);
    const int pad = i == 2 ? 1 : 0;  // ReflectionPad1d((1, 0)) after the last upsampling
    const int n = up_len + pad;
    for (Rows * r : {&s.y, &s.si, &s.t1, &s.t2, &s.out, &s.acc}) r->shape(ch, n);
    x[i + 1].shape(ch, n);
    if (pad) {
        float * tmp = grow(b_tmp, static_cast<size_t>(ch) * up_len);
        cpu::conv_transpose1d(ups[i], x[i].data(), len, tmp, pool, scratch, x[i].ld, up_len);
        for (int c = 0; c < ch; ++c) {
            float * dst = s.y.row(c);
            const float * t = tmp + static_cast<size_t>(c) * up_len;
            dst[0] = t[1];
            std::memcpy(dst + 1, t, sizeof(float) * up_len);
        }
    } else {
        cpu::conv_transpose1d(ups[i], x[i].data(), len, s.y.data(), pool, scratch, x[i].ld, s.y.ld);
    }
    return n;
}

// Stage i's resblocks on len frames: y += source resblock(si), then x[i + 1] = leaky(mean of
// the three resblocks on y), with the next stage's slope (conv_post's after the last).
void HiftVocoder::Impl::stage_resblocks(int i, int len) {
    StageRows & s = st[i];
    resblock(source_resblocks[i], s, s.si, len, [&](int o0, int o1, int t0, int t1) {
        each_row(o0, o1, [&](int o) {
            float * y = s.y.row(o);
            const float * r = s.out.row(o);
            for (int t = t0; t < t1; ++t) y[t] += r[t];
        });
    });
    const float slope = i == 2 ? 0.01f : 0.1f;  // the next stage's leaky ReLU, or conv_post's
    for (int r = 0; r < 3; ++r) {
        resblock(resblocks[3 * i + r], s, s.y, len, [&](int o0, int o1, int t0, int t1) {
            each_row(o0, o1, [&](int o) {
                float * acc = s.acc.row(o);
                const float * out = s.out.row(o);
                if (r == 0) {
                    std::copy(out + t0, out + t1, acc + t0);
                } else if (r == 1) {
                    for (int t = t0; t < t1; ++t) acc[t] += out[t];
                } else {
                    float * xr = x[i + 1].row(o);
                    for (int t = t0; t < t1; ++t) xr[t] = leaky((acc[t] + out[t]) / 3.0f, slope);
                }
            });
        });
    }
}

std::vector<float> HiftVocoder::decode(const float * mel, int frames, const float * src) {
    if (frames <= 0) throw InvalidArgument("mel has no frames");
    Impl & m = *impl_;
    std::lock_guard<std::mutex> lock(m.mutex);
    const int n_src = frames * kSamplesPerFrame;
    std::vector<float> spec = m.stft(src, n_src);
    const int stft_frames = n_src / kHop + 1;

    m.mel_rows.shape(kMel, frames);
    for (int c = 0; c < kMel; ++c) std::copy_n(mel + static_cast<size_t>(c) * frames, frames, m.mel_rows.row(c));
    m.x[0].shape(m.base, frames);
    m.conv(m.conv_pre, m.mel_rows, m.x[0], frames, [&](int o0, int o1, int t0, int t1) {
        each_row(o0, o1, [&](int o) {  // stage 0 starts with leaky ReLU 0.1
            float * r = m.x[0].row(o);
            for (int t = t0; t < t1; ++t) r[t] = leaky(r[t], 0.1f);
        });
    });
    int len = frames;
    for (int i = 0; i < 3; ++i) {
        len = m.upsample(i, len);
        const int s_len = m.source_downs[i].out_len(stft_frames);
        if (s_len != len) {
            throw InvalidArgument("source length does not match the mel (" + std::to_string(s_len) + " vs " +
                                  std::to_string(len) + ")");
        }
        Impl::StageRows & s = m.st[i];
        cpu::conv1d(m.source_downs[i], spec.data(), stft_frames, s.si.data(), m.pool, m.scratch, 0, s.si.ld);
        m.stage_resblocks(i, len);
    }
    Rows post;
    post.shape(kStftCh, len, 0, 0);
    m.conv(m.conv_post, m.x[3], post, len, nullptr);
    return m.istft(post.buf.data(), len);
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
