#include "omni/token2wav.h"

#include "omni/errors.h"
#include "omni/gguf_file.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace omni {

namespace {

constexpr int kMaxEstimatorFrames = 600;  // llama.cpp-omni's TOKEN2WAV_FM_MAX_T_CACHE default
constexpr int kRecentFrames = 100;  // reference policy: mel frames kept beside the prompt's

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<float> finite_tensor(const GgufFile & g, const std::string & name, size_t expect) {
    std::vector<float> v = g.read_f32(name);
    if (v.size() != expect) throw ModelFileError(g.path(), "tensor '" + name + "' has an unexpected size");
    for (float x : v)
        if (!std::isfinite(x)) throw ModelFileError(g.path(), "tensor '" + name + "' contains NaN or infinity");
    return v;
}

// Reference policy, conformer cache (layers, heads, frames, row): keep the prompt's frames and the
// newest `recent` mel frames, each scale on its own. The first `token_layers` layers hold token-rate
// frames tiled [c, c] over the shared time axis: un-tile (first half), keep prompt/2 + recent/2
// token frames, tile again. The other layers keep prompt + recent mel frames.
std::vector<float> trim_per_scale(const std::vector<float> & v, int token_layers, int layers, int heads, int frames,
                                  int row, int prompt, int recent) {
    const int keep = prompt + recent, half = frames / 2, ph = prompt / 2, rh = recent / 2;
    std::vector<float> out(static_cast<size_t>(layers) * heads * keep * row);
    auto copy = [&](const float * src, int first, int n, float * dst) {
        std::copy_n(src + static_cast<size_t>(first) * row, static_cast<size_t>(n) * row, dst);
    };
    for (int l = 0; l < layers; ++l)
        for (int h = 0; h < heads; ++h) {
            const size_t slab = static_cast<size_t>(l) * heads + h;
            const float * src = v.data() + slab * frames * row;
            float * dst = out.data() + slab * keep * row;
            if (l < token_layers) {
                for (int rep = 0; rep < 2; ++rep) {
                    float * d = dst + static_cast<size_t>(rep) * (ph + rh) * row;
                    copy(src, 0, ph, d);
                    copy(src, half - rh, rh, d + static_cast<size_t>(ph) * row);
                }
            } else {
                copy(src, 0, prompt, dst);
                copy(src, frames - recent, recent, dst + static_cast<size_t>(prompt) * row);
            }
        }
    return out;
}

}  // namespace

CachePolicy parse_cache_policy(const std::string & name) {
    if (name == "llama.cpp-omni") return CachePolicy::LlamaCppOmni;
    if (name == "reference") return CachePolicy::Reference;
    throw InvalidArgument("cache_policy must be 'llama.cpp-omni' or 'reference', got '" + name + "'");
}

const char * cache_policy_name(CachePolicy p) {
    return p == CachePolicy::LlamaCppOmni ? "llama.cpp-omni" : "reference";
}

Token2Wav::Token2Wav(const std::string & dir, const Token2WavOptions & options) : opt_(options) {
    if (options.first_window_codes < kMinFirstWindow || options.first_window_codes > kHop) {
        throw InvalidArgument("first_window_codes must be in " + std::to_string(kMinFirstWindow) + ".." +
                              std::to_string(kHop) + ", got " + std::to_string(options.first_window_codes));
    }
    t2m_ =
        std::make_unique<Token2Mel>(dir, options.device, options.threads, options.steps, options.engine, options.bf16);
    vocoder_ = std::make_unique<HiftVocoder>(dir + "/hifigan2.gguf", options.threads, options.cpus, options.bf16);

    // The fixed voice: speaker vector and the caches computed on the voice prompt.
    GgufFile pc(dir + "/prompt_cache.gguf");
    const int file_steps = static_cast<int>(pc.get_int("mtmd.prompt_cache.n_timesteps"));
    if (file_steps != options.steps) {
        throw ModelFileError(pc.path(),
                             "the prompt cache was built for " + std::to_string(file_steps) + " CFM steps, not " +
                                 std::to_string(options.steps) + "; use steps=" + std::to_string(file_steps) +
                                 " or regenerate the cache");
    }
    const ConformerDims & ed = t2m_->encoder_dims();
    const DitDims & dd = t2m_->estimator_dims();
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
    spk_ = finite_tensor(pc, "prompt_cache.spk_cb", Token2Mel::kSpk);
    prompt_cache_.conformer_cnn = finite_tensor(pc, "prompt_cache.conformer_cnn_cache", static_cast<size_t>(ed.d) * 6);
    prompt_cache_.conformer_att = finite_tensor(pc, "prompt_cache.conformer_att_cache",
                                                static_cast<size_t>(2 * ed.d_head) * T * ed.heads * layers);
    prompt_cache_.conformer_frames = T;
    const std::vector<float> ecnn = finite_tensor(
        pc, "prompt_cache.estimator_cnn_cache", static_cast<size_t>(2 * dd.hidden) * 2 * options.steps * dd.depth * 2);
    const std::vector<float> eatt =
        finite_tensor(pc, "prompt_cache.estimator_att_cache",
                      static_cast<size_t>(2 * dd.head_dim) * Te * options.steps * per_step * 2);
    // Split the step-major packing into one DiT cache per step (batch 2 outermost in both).
    const size_t cnn_block = static_cast<size_t>(2 * dd.hidden) * 2 * dd.depth;
    const size_t att_block = static_cast<size_t>(2 * dd.head_dim) * Te * per_step;
    prompt_cache_.estimator.assign(options.steps, DitCache{});
    for (int s = 0; s < options.steps; ++s) {
        DitCache & c = prompt_cache_.estimator[s];
        c.att_frames = Te;
        for (int b = 0; b < 2; ++b) {
            const float * cs = ecnn.data() + (static_cast<size_t>(b) * options.steps + s) * cnn_block;
            c.cnn.insert(c.cnn.end(), cs, cs + cnn_block);
            const float * as = eatt.data() + (static_cast<size_t>(b) * options.steps + s) * att_block;
            c.att.insert(c.att.end(), as, as + att_block);
        }
    }
    conf_window_ = T;
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
        est_window_ = Te;
    } else {
        est_window_ = std::min(Te, kMaxEstimatorFrames - kRecentFrames);
    }
    for (DitCache & c : prompt_cache_.estimator) {  // bounded inside the estimator call, on the device
        if (options.cache_policy == CachePolicy::LlamaCppOmni) {
            c.keep_head = 0;
            c.keep_tail = Te;
        } else {
            c.keep_head = est_window_;
            c.keep_tail = kRecentFrames;
        }
    }
    reset();
}

Token2Wav::~Token2Wav() = default;

void Token2Wav::reset() {
    cache_ = prompt_cache_;
    // The estimator caches stay resident on the Token2Mel device from here on.
    t2m_->caches_to_device(cache_, est_window_ + kRecentFrames + 2 * kWindow);  // enough for either policy
    cache_.rng.seed(opt_.seed);
    buffer_.assign(3, kSilence);
    mel_cache_.clear();
    source_cache_.clear();
    tail_.clear();
    finished_ = false;
    next_vocode_ = next_mel_;  // windows of the stream before are refused from here on
    stream_windows_ = 0;
    last_ = total_ = Token2WavTimings{};
}

void Token2Wav::update_conformer_cache() {
    const ConformerDims & ed = t2m_->encoder_dims();
    const int layers = ed.blocks + ed.up_blocks, frames = cache_.conformer_frames;
    if (opt_.cache_policy == CachePolicy::LlamaCppOmni) {
        // Every layer keeps its newest L frames (L = the prompt's). On the tiled token-rate
        // layers this keeps [new tail, older] out of order; that is the rule being reproduced.
        if (frames > conf_window_) {
            cache_.conformer_att = keep_head_tail(cache_.conformer_att, static_cast<size_t>(layers) * ed.heads, frames,
                                                  2 * ed.d_head, 0, conf_window_);
            cache_.conformer_frames = conf_window_;
        }
    } else if (frames > conf_window_ + kRecentFrames) {
        cache_.conformer_att = trim_per_scale(cache_.conformer_att, ed.blocks, layers, ed.heads, frames, 2 * ed.d_head,
                                              conf_window_, kRecentFrames);
        cache_.conformer_frames = conf_window_ + kRecentFrames;
    }
}

std::vector<float> Token2Wav::token2mel(const int32_t * tokens, int n, bool last, bool as_is, int * frames) {
    if (opt_.cache_policy == CachePolicy::Reference || n == kWindow || as_is) {
        std::vector<float> mel =
            t2m_->chunk(tokens, n, last, spk_.data(), nullptr, nullptr, opt_.temperature, cache_, frames);
        update_conformer_cache();
        return mel;
    }
    // llama.cpp-omni runs a short (final) window as a full one, padded with silence tokens, and
    // keeps the first 2 mel frames per real token.
    std::vector<int32_t> padded(tokens, tokens + n);
    padded.resize(kWindow, kSilence);
    int T = 0;
    std::vector<float> mel =
        t2m_->chunk(padded.data(), kWindow, last, spk_.data(), nullptr, nullptr, opt_.temperature, cache_, &T);
    update_conformer_cache();
    const int keep = std::min(T, 2 * n);
    std::vector<float> out(static_cast<size_t>(Token2Mel::kMel) * keep);
    for (int c = 0; c < Token2Mel::kMel; ++c)
        std::copy_n(mel.data() + static_cast<size_t>(c) * T, keep, out.data() + static_cast<size_t>(c) * keep);
    *frames = keep;
    return out;
}

MelWindow Token2Wav::mel_window(const int32_t * tokens, int n, bool last, bool as_is) {
    const auto t0 = std::chrono::steady_clock::now();
    MelWindow w;
    w.last = last;
    w.seq = next_mel_++;
    ++stream_windows_;
    w.mel = token2mel(tokens, n, last, as_is, &w.frames);
    add_timing(&Token2WavTimings::token2mel_ms, ms_since(t0));
    return w;
}

void Token2Wav::add_timing(double Token2WavTimings::* field, double ms) {
    std::lock_guard<std::mutex> lock(timing_mutex_);
    last_.*field += ms;
    total_.*field += ms;
}

std::vector<float> Token2Wav::vocode_window(const MelWindow & w) {
    const auto t0 = std::chrono::steady_clock::now();
    const int frames = w.frames;
    if (frames < 1 || w.mel.size() != static_cast<size_t>(HiftVocoder::kMel) * frames) {
        throw InvalidArgument("vocode: not a mel window of this stream");
    }
    if (w.seq != next_vocode_) {
        throw InvalidArgument(
            "vocode: mel windows go to the vocoder once each, in the order they were made, "
            "and only those made since the last reset()");
    }
    // Vocoder input: 8 cached mel frames + this chunk's, channel-major.
    const int cached = mel_cache_.empty() ? 0 : kMelCache;
    const int total = cached + frames;
    std::vector<float> in(static_cast<size_t>(HiftVocoder::kMel) * total);
    for (int c = 0; c < HiftVocoder::kMel; ++c) {
        if (cached)
            std::copy_n(mel_cache_.data() + static_cast<size_t>(c) * kMelCache, kMelCache,
                        in.data() + static_cast<size_t>(c) * total);
        std::copy_n(w.mel.data() + static_cast<size_t>(c) * frames, frames,
                    in.data() + static_cast<size_t>(c) * total + cached);
    }
    std::vector<float> source;
    std::vector<float> speech = vocoder_->forward(in.data(), total, source_cache_, &source);
    // Carry the last 8 mel frames and 3840 source samples into the next chunk.
    mel_cache_.assign(static_cast<size_t>(HiftVocoder::kMel) * kMelCache, 0.0f);
    const int keep = std::min(kMelCache, total);
    for (int c = 0; c < HiftVocoder::kMel; ++c)
        std::copy_n(in.data() + static_cast<size_t>(c) * total + (total - keep), keep,
                    mel_cache_.data() + static_cast<size_t>(c) * kMelCache + (kMelCache - keep));
    source_cache_.assign(source.end() - std::min<size_t>(kSourceCache, source.size()), source.end());
    // Cross-fade the overlap with the previous chunk's held-back tail (symmetric Hamming 7680).
    const int overlap = std::min<int>(kSourceCache, static_cast<int>(speech.size()));
    if (!tail_.empty()) {
        const int n_win = 2 * kSourceCache;
        for (int i = 0; i < overlap; ++i) {
            const float w_in = 0.54f - 0.46f * std::cos(2.0f * static_cast<float>(M_PI) * i / (n_win - 1));
            const float w_out =
                0.54f - 0.46f * std::cos(2.0f * static_cast<float>(M_PI) * (i + kSourceCache) / (n_win - 1));
            speech[i] = speech[i] * w_in + tail_[tail_.size() - kSourceCache + i] * w_out;
        }
    }
    std::vector<float> out;
    if (w.last) {
        out = std::move(speech);
        tail_.clear();
    } else {
        const size_t emit = speech.size() > static_cast<size_t>(kSourceCache) ? speech.size() - kSourceCache : 0;
        tail_.assign(speech.end() - std::min<size_t>(kSourceCache, speech.size()), speech.end());
        out.assign(speech.begin(), speech.begin() + emit);
    }
    ++next_vocode_;
    add_timing(&Token2WavTimings::vocoder_ms, ms_since(t0));
    std::lock_guard<std::mutex> lock(timing_mutex_);
    last_.windows += 1;
    total_.windows += 1;
    last_.samples += out.size();
    total_.samples += out.size();
    return out;
}

std::vector<MelWindow> Token2Wav::push_mel(const int32_t * tokens, int n, bool final) {
    if (finished_) throw InvalidArgument("push after the final push: call reset() to start a new stream");
    if (n < 0 || (n == 0 && !final)) throw InvalidArgument("empty push: give tokens, or final=True to flush");
    for (int i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= Token2Mel::kVocab) {
            throw InvalidArgument("speech token " + std::to_string(tokens[i]) + " is outside 0.." +
                                  std::to_string(Token2Mel::kVocab - 1));
        }
    }
    clear_last(true, false);
    buffer_.insert(buffer_.end(), tokens, tokens + n);
    std::vector<MelWindow> out;
    for (;;) {
        // The first window: first_window_codes new tokens (the 3 silence tokens among them) and 3
        // of look-ahead, run as they are; every later one: 25 new + 3.
        const bool first = stream_windows_ == 0 && opt_.first_window_codes < kHop;
        const int hop = first ? opt_.first_window_codes : kHop;
        if (static_cast<int>(buffer_.size()) < hop + kLookahead) break;
        out.push_back(mel_window(buffer_.data(), hop + kLookahead, false, first));
        buffer_.erase(buffer_.begin(), buffer_.begin() + hop);
    }
    if (final) {
        out.push_back(mel_window(buffer_.data(), static_cast<int>(buffer_.size()), true));
        buffer_.clear();
        finished_ = true;
    }
    return out;
}

std::vector<MelWindow> Token2Wav::flush_mel() {
    if (finished_) throw InvalidArgument("flush after the final push: call reset() to start a new stream");
    constexpr int kMinFlush = 3 + 5;  // look-ahead plus the fewest tokens worth a window
    clear_last(true, false);
    std::vector<MelWindow> out;
    while (static_cast<int>(buffer_.size()) >= kMinFlush) {
        const int n = std::min<int>(kWindow, static_cast<int>(buffer_.size()));
        out.push_back(mel_window(buffer_.data(), n, false));
        buffer_.erase(buffer_.begin(), buffer_.begin() + std::min(kHop, n - 3));
    }
    return out;
}

std::vector<float> Token2Wav::vocode(const MelWindow & w) {
    clear_last(false, true);
    return vocode_window(w);
}

std::vector<float> Token2Wav::vocode_all(const std::vector<MelWindow> & windows) {
    std::vector<float> audio;
    for (const MelWindow & w : windows) {
        std::vector<float> a = vocode_window(w);
        audio.insert(audio.end(), a.begin(), a.end());
    }
    return audio;
}

void Token2Wav::clear_last(bool mel_half, bool vocoder_half) {
    std::lock_guard<std::mutex> lock(timing_mutex_);
    if (mel_half) last_.token2mel_ms = 0;
    if (vocoder_half) {
        last_.vocoder_ms = 0;
        last_.windows = 0;
        last_.samples = 0;
    }
}

std::vector<float> Token2Wav::push(const int32_t * tokens, int n, bool final) {
    std::vector<MelWindow> windows = push_mel(tokens, n, final);
    clear_last(false, true);
    return vocode_all(windows);
}

std::vector<float> Token2Wav::flush() {
    std::vector<MelWindow> windows = flush_mel();
    clear_last(false, true);
    return vocode_all(windows);
}

Token2WavTimings Token2Wav::last_timings() const {
    std::lock_guard<std::mutex> lock(timing_mutex_);
    return last_;
}

Token2WavTimings Token2Wav::total_timings() const {
    std::lock_guard<std::mutex> lock(timing_mutex_);
    return total_;
}

}  // namespace omni
