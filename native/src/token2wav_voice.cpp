// Token2Wav's voice prompt: the speaker vector and the encoder/estimator caches of
// prompt_cache.gguf, checked against the loaded Token2Mel and split per CFM step.
#include "token2wav_voice.h"

#include "omni/errors.h"
#include "omni/gguf_file.h"

#include <algorithm>
#include <cmath>

namespace omni {

namespace {

constexpr int kMaxEstimatorFrames = 600;  // llama.cpp-omni's TOKEN2WAV_FM_MAX_T_CACHE default

std::vector<float> finite_tensor(const GgufFile & g, const std::string & name, size_t expect) {
    std::vector<float> v = g.read_f32(name);
    if (v.size() != expect) throw ModelFileError(g.path(), "tensor '" + name + "' has an unexpected size");
    for (float x : v)
        if (!std::isfinite(x)) throw ModelFileError(g.path(), "tensor '" + name + "' contains NaN or infinity");
    return v;
}

}  // namespace

std::shared_ptr<const Token2Wav::Voice> Token2Wav::load_voice(const std::string & dir, const Token2WavOptions & options,
                                                              const Token2Mel & t2m) {
    auto voice = std::make_shared<Voice>();
    GgufFile pc(dir + "/prompt_cache.gguf");
    const int file_steps = static_cast<int>(pc.get_int("mtmd.prompt_cache.n_timesteps"));
    if (file_steps != options.steps) {
        throw ModelFileError(pc.path(),
                             "the prompt cache was built for " + std::to_string(file_steps) + " CFM steps, not " +
                                 std::to_string(options.steps) + "; use steps=" + std::to_string(file_steps) +
                                 " or regenerate the cache");
    }
    const ConformerDims & ed = t2m.encoder_dims();
    const DitDims & dd = t2m.estimator_dims();
    const GgufTensorInfo & ca = pc.tensor("prompt_cache.conformer_att_cache");
    const GgufTensorInfo & ea = pc.tensor("prompt_cache.estimator_att_cache");
    const int layers = ed.blocks + ed.up_blocks, T = static_cast<int>(ca.ne.size() == 4 ? ca.ne[1] : 0);
    if (ca.ne != std::vector<int64_t>{2 * ed.d_head, T, ed.heads, layers} || T <= 0 || T % 2) {
        throw ModelFileError(pc.path(), "conformer_att_cache does not match the encoder");
    }
    const int Te = static_cast<int>(ea.ne.size() == 4 ? ea.ne[1] : 0);
    const int per_step = dd.depth * dd.heads;
    if (ea.ne != std::vector<int64_t>{2 * dd.head_dim, Te, static_cast<int64_t>(options.steps) * per_step, 2} ||
        Te <= 0) {
        throw ModelFileError(pc.path(), "estimator_att_cache does not match the estimator and steps");
    }
    Token2MelCache & prompt = voice->prompt;
    voice->spk = finite_tensor(pc, "prompt_cache.spk_cb", Token2Mel::kSpk);
    prompt.conformer_cnn = finite_tensor(pc, "prompt_cache.conformer_cnn_cache", static_cast<size_t>(ed.d) * 6);
    prompt.conformer_att = finite_tensor(pc, "prompt_cache.conformer_att_cache",
                                         static_cast<size_t>(2 * ed.d_head) * T * ed.heads * layers);
    prompt.conformer_frames = T;
    const std::vector<float> ecnn = finite_tensor(
        pc, "prompt_cache.estimator_cnn_cache", static_cast<size_t>(2 * dd.hidden) * 2 * options.steps * dd.depth * 2);
    const std::vector<float> eatt =
        finite_tensor(pc, "prompt_cache.estimator_att_cache",
                      static_cast<size_t>(2 * dd.head_dim) * Te * options.steps * per_step * 2);
    // Split the step-major packing into one DiT cache per step (batch 2 outermost in both).
    const size_t cnn_block = static_cast<size_t>(2 * dd.hidden) * 2 * dd.depth;
    const size_t att_block = static_cast<size_t>(2 * dd.head_dim) * Te * per_step;
    prompt.estimator.assign(options.steps, DitCache{});
    for (int s = 0; s < options.steps; ++s) {
        DitCache & c = prompt.estimator[s];
        c.att_frames = Te;
        for (int b = 0; b < 2; ++b) {
            const float * cs = ecnn.data() + (static_cast<size_t>(b) * options.steps + s) * cnn_block;
            c.cnn.insert(c.cnn.end(), cs, cs + cnn_block);
            const float * as = eatt.data() + (static_cast<size_t>(b) * options.steps + s) * att_block;
            c.att.insert(c.att.end(), as, as + att_block);
        }
    }
    voice->conf_window = T;
    if (options.cache_policy == CachePolicy::LlamaCppOmni) {
        // The estimator cache stays the prompt's: of [chunk, prompt] only the prompt's Te frames
        // are kept. llama.cpp-omni attends over at most 600 frames; beyond that its rule changes.
        if (Te + 2 * kWindow > kMaxEstimatorFrames) {
            throw ModelFileError(pc.path(),
                                 "estimator_att_cache has " + std::to_string(Te) +
                                     " frames; the llama.cpp-omni cache policy supports at most " +
                                     std::to_string(kMaxEstimatorFrames - 2 * kWindow) +
                                     " (use cache_policy='reference')");
        }
        voice->est_window = Te;
        voice->est_capacity = Te + 2 * kWindow;  // the prompt's frames and the window's
    } else {
        voice->est_window = std::min(Te, kMaxEstimatorFrames - kRecentFrames);
        voice->est_capacity = voice->est_window + kRecentFrames + 2 * kWindow;
    }
    for (DitCache & c : prompt.estimator) {  // bounded inside the estimator call, on the device
        if (options.cache_policy == CachePolicy::LlamaCppOmni) {
            c.keep_head = 0;
            c.keep_tail = Te;
        } else {
            c.keep_head = voice->est_window;
            c.keep_tail = kRecentFrames;
        }
    }
    return voice;
}

}  // namespace omni
