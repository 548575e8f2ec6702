#include "omni/token2mel.h"

#include "omni/errors.h"
#include "omni/gguf_file.h"

#include <algorithm>
#include <cmath>

namespace omni {

namespace {

std::vector<float> read_exact(const GgufFile & g, const std::string & name, std::vector<int64_t> ne) {
    const GgufTensorInfo & t = g.tensor(name);
    if (t.ne != ne) throw ModelFileError(g.path(), "tensor '" + name + "' has an unexpected shape");
    return g.read_f32(name);
}

constexpr int kMel = Token2Mel::kMel, kSpk = Token2Mel::kSpk;

// Speaker: F.normalize (x / max(|x|, 1e-12)), then the affine layer: 80 values, all finite.
std::vector<float> speaker_embedding(const float * spk, const std::vector<float> & w, const std::vector<float> & b) {
    float norm = 0.0f;
    for (int i = 0; i < kSpk; ++i) norm += spk[i] * spk[i];
    norm = std::max(std::sqrt(norm), 1e-12f);
    std::vector<float> spk80(kMel);
    for (int o = 0; o < kMel; ++o) {
        float acc = b[o];
        for (int i = 0; i < kSpk; ++i) acc += w[static_cast<size_t>(o) * kSpk + i] * (spk[i] / norm);
        spk80[o] = acc;
    }
    if (!std::all_of(spk80.begin(), spk80.end(), [](float v) { return std::isfinite(v); })) {
        throw InvalidArgument("speaker embedding is not finite");
    }
    return spk80;
}

// mu = encoder_proj(h) of the encoder's T frames [T][d], channel-major (80, T).
std::vector<float> encoder_projection(const std::vector<float> & enc_h, int T, int d, const std::vector<float> & w,
                                      const std::vector<float> & b) {
    std::vector<float> mu(static_cast<size_t>(kMel) * T);
    for (int t = 0; t < T; ++t) {
        const float * h = enc_h.data() + static_cast<size_t>(t) * d;
        for (int o = 0; o < kMel; ++o) {
            float acc = b[o];
            const float * wo = w.data() + static_cast<size_t>(o) * d;
            for (int i = 0; i < d; ++i) acc += wo[i] * h[i];
            mu[static_cast<size_t>(o) * T + t] = acc;
        }
    }
    return mu;
}

// Initial noise (80, T): given, or N(0,1) * temperature filled frame by frame, channels fastest.
std::vector<float> initial_noise(const float * noise, float temperature, int T, std::mt19937 & rng) {
    std::vector<float> x(static_cast<size_t>(kMel) * T);
    if (noise) {
        for (size_t i = 0; i < x.size(); ++i) x[i] = noise[i] * temperature;
    } else {
        std::normal_distribution<float> dist(0.0f, 1.0f);
        for (int t = 0; t < T; ++t)
            for (int c = 0; c < kMel; ++c) x[static_cast<size_t>(c) * T + t] = temperature * dist(rng);
    }
    return x;
}

// Euler steps of the flow on x (80, T), one estimator cache per step, on the cosine schedule
// t_i = 1 - cos(i/N * pi/2) (in float as the reference computes it). Each step runs the CFG
// batch [conditional, unconditional (mu, spk, cond zeroed)].
void flow_steps(DitEstimator & dit, std::vector<float> & x, const std::vector<float> & mu,
                const std::vector<float> & spk80, const float * cond, int T, std::vector<DitCache> & caches) {
    const int n_steps = static_cast<int>(caches.size());
    const size_t plane = static_cast<size_t>(kMel) * T;
    std::vector<float> mu_in(2 * plane, 0.0f), cond_in(2 * plane, 0.0f), spk_in(2 * kMel, 0.0f), x_in(2 * plane);
    std::copy(mu.begin(), mu.end(), mu_in.begin());
    if (cond) std::copy_n(cond, plane, cond_in.begin());
    std::copy(spk80.begin(), spk80.end(), spk_in.begin());
    std::vector<float> span(n_steps + 1);
    for (int i = 0; i <= n_steps; ++i) {
        const float lin = static_cast<float>(i) / static_cast<float>(n_steps);
        span[i] = 1.0f - std::cos(lin * 0.5f * static_cast<float>(M_PI));
    }
    float t = span[0], dt = span[1] - span[0];
    for (int step = 1; step <= n_steps; ++step) {
        std::copy(x.begin(), x.end(), x_in.begin());
        std::copy(x.begin(), x.end(), x_in.begin() + plane);
        const float tt[2] = {t, t};
        std::vector<float> v =
            dit.forward_chunk(x_in.data(), mu_in.data(), tt, spk_in.data(), cond_in.data(), 2, T, caches[step - 1]);
        for (size_t i = 0; i < plane; ++i) {
            const float g = (1.0f + Token2Mel::kCfgRate) * v[i] - Token2Mel::kCfgRate * v[plane + i];
            x[i] = x[i] + dt * g;
        }
        t = t + dt;
        if (step < n_steps) dt = span[step + 1] - t;
    }
}

}  // namespace

Token2Mel::Token2Mel(const std::string & dir, const std::string & device, int threads, int n_steps,
                     Token2MelImpl token2mel, bool bf16)
    : n_steps_(n_steps) {
    if (n_steps < 1 || n_steps > 100) throw InvalidArgument("steps must be in 1..100, got " + std::to_string(n_steps));
    backend_ = std::make_shared<Backend>(device, threads);
    token2mel = resolve_token2mel_impl(token2mel, backend_->is_cpu());
    if (token2mel == Token2MelImpl::Native) pool_ = std::make_shared<ThreadPool>(std::max(1, threads));
    encoder_ =
        std::make_unique<ConformerEncoder>(dir + "/encoder.gguf", backend_, pool_, token2mel, bf16 && pool_ != nullptr);
    // BF16 applies where the CPU computes; an accelerator keeps its graphs as they are.
    dit_ = std::make_unique<DitEstimator>(dir + "/flow_matching.gguf", backend_, pool_, token2mel,
                                          bf16 && pool_ != nullptr);
    d_ = encoder_->dims().d;
    if (encoder_->dims().in != d_)
        throw ModelFileError(dir + "/encoder.gguf", "encoder input and output widths differ");
    GgufFile extra(dir + "/flow_extra.gguf");
    embedding_ = read_exact(extra, "input_embedding.weight", {d_, kVocab});
    spk_w_ = read_exact(extra, "spk_embed_affine_layer.weight", {kSpk, kMel});
    spk_b_ = read_exact(extra, "spk_embed_affine_layer.bias", {kMel});
    proj_w_ = read_exact(extra, "encoder_proj.weight", {d_, kMel});
    proj_b_ = read_exact(extra, "encoder_proj.bias", {kMel});
}

Token2Mel::~Token2Mel() = default;

size_t Token2MelCache::bytes() const {
    size_t n = (conformer_cnn.size() + conformer_att.size()) * sizeof(float) + sizeof(rng);
    for (const DitCache & c : estimator) n += c.bytes();
    return n;
}

size_t Token2Mel::weight_bytes() const {
    const size_t host = embedding_.size() + spk_w_.size() + spk_b_.size() + proj_w_.size() + proj_b_.size();
    return encoder_->weight_bytes() + dit_->weight_bytes() + host * sizeof(float);
}

void Token2Mel::caches_to_device(Token2MelCache & cache, int capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cache.estimator.size() != static_cast<size_t>(n_steps_)) cache.estimator.assign(n_steps_, DitCache{});
    for (DitCache & c : cache.estimator) dit_->to_device(c, 2, capacity);
}

std::vector<float> Token2Mel::chunk(const int32_t * tokens, int n, bool last_chunk, const float * spk,
                                    const float * cond, const float * noise, float temperature, Token2MelCache & cache,
                                    int * frames_out) {
    if (n < 1) throw InvalidArgument("empty token chunk");
    for (int i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= kVocab) {
            throw InvalidArgument("speech token " + std::to_string(tokens[i]) + " is outside 0.." +
                                  std::to_string(kVocab - 1));
        }
    }
    if (!std::isfinite(temperature) || temperature < 0.0f) throw InvalidArgument("temperature must be finite and >= 0");
    const std::vector<float> spk80 = speaker_embedding(spk, spk_w_, spk_b_);
    // The encoder and the CFM steps of one stream at a time (the host pieces around them are
    // per call); the rest of this function touches only `cache` and locals.
    std::lock_guard<std::mutex> lock(mutex_);
    // Encoder over the token embeddings.
    std::vector<float> xs(static_cast<size_t>(n) * d_);
    for (int i = 0; i < n; ++i)
        std::copy_n(embedding_.data() + static_cast<size_t>(tokens[i]) * d_, d_,
                    xs.data() + static_cast<size_t>(i) * d_);
    ConformerChunk enc =
        encoder_->forward_chunk(xs.data(), n, last_chunk, cache.empty() ? nullptr : cache.conformer_cnn.data(),
                                cache.empty() ? nullptr : cache.conformer_att.data(), cache.conformer_frames);
    const int T = enc.frames;
    const std::vector<float> mu = encoder_projection(enc.h, T, d_, proj_w_, proj_b_);
    std::vector<float> x = initial_noise(noise, temperature, T, cache.rng);
    if (cache.estimator.size() != static_cast<size_t>(n_steps_)) cache.estimator.assign(n_steps_, DitCache{});
    flow_steps(*dit_, x, mu, spk80, cond, T, cache.estimator);
    cache.conformer_cnn = std::move(enc.cnn_cache);
    cache.conformer_att = std::move(enc.att_cache);
    cache.conformer_frames = enc.att_frames;
    if (frames_out) *frames_out = T;
    return x;
}

}  // namespace omni
