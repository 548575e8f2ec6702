// Token2Mel (docs/model-files.md): speech tokens -> 80-bin mel at 50 Hz, streaming.
// Token embedding -> conformer encoder -> encoder_proj (mu) -> CFM: cosine schedule, Euler
// steps, classifier-free guidance 0.7 by batch doubling, one DiT call per step with its own
// caches. The encoder and DiT run on the session's device; the small host-side pieces
// (embedding lookup, speaker affine, encoder_proj, the Euler update) are exact float code.
#pragma once

#include "omni/backend.h"
#include "omni/conformer.h"
#include "omni/dit.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace omni {

struct Token2MelCache {
    std::vector<float> conformer_cnn;  // (6, d)
    std::vector<float> conformer_att;  // (layers, heads, frames, 2*d_head)
    int conformer_frames = 0;
    std::vector<DitCache> estimator;  // one per CFM step, batch 2 (conditional, unconditional)
    // The stream's noise generator: llama.cpp-omni seeds one mt19937 with 42 (per process there;
    // per stream here, so sessions do not perturb each other).
    std::mt19937 rng{42};
    bool empty() const { return conformer_frames == 0; }
    size_t bytes() const;  // host vectors plus the estimator caches resident on the device
};

class Token2Mel {
public:
    static constexpr int kMel = 80, kSpk = 192, kVocab = 6561, kLookahead = 3;
    static constexpr float kCfgRate = 0.7f;

    // token2wav_dir holds encoder.gguf, flow_matching.gguf and flow_extra.gguf. token2mel: graph
    // or native CPU compute (omni/token2mel_impl.h); bf16: the native code's matmuls in BF16.
    Token2Mel(const std::string & token2wav_dir, const std::string & device, int threads, int n_steps,
              Token2MelImpl token2mel = Token2MelImpl::Auto, bool bf16 = false);
    ~Token2Mel();

    int steps() const { return n_steps_; }
    const DeviceInfo & device() const { return backend_->device(); }
    Token2MelImpl token2mel() const { return dit_->token2mel(); }
    const ConformerDims & encoder_dims() const { return encoder_->dims(); }
    const DitDims & estimator_dims() const { return dit_->dims(); }
    // Bytes of the weights (encoder, estimator and the host-side tables).
    size_t weight_bytes() const;

    // One streaming chunk. tokens: n ids in 0..6560 incl. 3 look-ahead tokens (unless last);
    // spk: 192-d speaker vector (normalised here); cond: (80, frames) prompt mel or null (zeros);
    // noise: (80, frames) initial noise or null (drawn from cache.rng as llama.cpp-omni does:
    // N(0,1) in channel-fastest order). Returns the mel (80, frames); updates `cache`.
    // Thread-safe: streams of a Token2Wav share one Token2Mel, each with its own cache; their
    // chunks take turns (one backend, one native thread pool, one graph allocator).
    std::vector<float> chunk(const int32_t * tokens, int n, bool last_chunk, const float * spk, const float * cond,
                             const float * noise, float temperature, Token2MelCache & cache, int * frames_out);

    // Moves the cache's estimator parts onto the device (see DitEstimator::to_device).
    void caches_to_device(Token2MelCache & cache, int capacity_frames);

private:
    std::mutex mutex_;  // one chunk (or cache upload) at a time: the backend is not reentrant
    std::shared_ptr<Backend> backend_;
    std::shared_ptr<ThreadPool> pool_;  // the native code's workers (null for graphs)
    std::unique_ptr<ConformerEncoder> encoder_;
    std::unique_ptr<DitEstimator> dit_;
    int n_steps_;
    int d_ = 0;
    std::vector<float> embedding_;  // (6561, d)
    std::vector<float> spk_w_, spk_b_;  // (80, 192), (80)
    std::vector<float> proj_w_, proj_b_;  // (80, d), (80)
};

}  // namespace omni
