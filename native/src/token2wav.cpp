#include "omni/token2wav.h"

#include "omni/errors.h"
#include "token2wav_voice.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace omni {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t next_stream_id() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
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

Token2Wav::Token2Wav(const std::string & dir, const Token2WavOptions & options) : opt_(options), id_(next_stream_id()) {
    if (options.first_window_codes < kMinFirstWindow || options.first_window_codes > kHop) {
        throw InvalidArgument("first_window_codes must be in " + std::to_string(kMinFirstWindow) + ".." +
                              std::to_string(kHop) + ", got " + std::to_string(options.first_window_codes));
    }
    t2m_ = std::make_shared<Token2Mel>(dir, options.device, options.threads, options.steps, options.token2mel,
                                       options.bf16);
    vocoder_ = std::make_shared<HiftVocoder>(dir + "/hifigan2.gguf", options.threads, options.cpus, options.bf16);
    voice_ = load_voice(dir, options, *t2m_);
    reset();
}

Token2Wav::Token2Wav(std::shared_ptr<Token2Mel> t2m, std::shared_ptr<HiftVocoder> vocoder,
                     std::shared_ptr<const Voice> voice, const Token2WavOptions & options)
    : opt_(options),
      t2m_(std::move(t2m)),
      vocoder_(std::move(vocoder)),
      voice_(std::move(voice)),
      id_(next_stream_id()) {
    reset();
}

std::unique_ptr<Token2Wav> Token2Wav::new_stream() const {
    return std::unique_ptr<Token2Wav>(new Token2Wav(t2m_, vocoder_, voice_, opt_));
}

size_t Token2Wav::weight_bytes() const { return t2m_->weight_bytes() + vocoder_->weight_bytes() + voice_->bytes(); }

// Called by the mel half only: the vocoder half's caches are counted at their fixed sizes, not
// read (the other thread may be writing them).
void Token2Wav::update_stream_bytes() {
    constexpr size_t vocoder_side = (HiftVocoder::kMel * kMelCache + 2 * kSourceCache) * sizeof(float);
    const size_t buffered = buffer_.size() * sizeof(int32_t);
    stream_bytes_.store(sizeof(*this) + cache_.bytes() + buffered + vocoder_side, std::memory_order_relaxed);
}

Token2Wav::~Token2Wav() = default;

void Token2Wav::reset() {
    cache_ = voice_->prompt;
    // The estimator caches stay resident on the Token2Mel device from here on.
    t2m_->caches_to_device(cache_, voice_->est_capacity);
    cache_.rng.seed(opt_.seed);
    buffer_.assign(3, kSilence);
    mel_cache_.clear();
    source_cache_.clear();
    tail_.clear();
    finished_ = false;
    next_vocode_ = next_mel_;  // windows of the stream before are refused from here on
    stream_windows_ = 0;
    last_ = total_ = Token2WavTimings{};
    update_stream_bytes();
}

void Token2Wav::update_conformer_cache() {
    const ConformerDims & ed = t2m_->encoder_dims();
    const int layers = ed.blocks + ed.up_blocks, frames = cache_.conformer_frames;
    if (opt_.cache_policy == CachePolicy::LlamaCppOmni) {
        // Every layer keeps its newest L frames (L = the prompt's). On the tiled token-rate
        // layers this keeps [new tail, older] out of order; that is the rule being reproduced.
        if (frames > voice_->conf_window) {
            cache_.conformer_att = keep_head_tail(cache_.conformer_att, static_cast<size_t>(layers) * ed.heads, frames,
                                                  2 * ed.d_head, 0, voice_->conf_window);
            cache_.conformer_frames = voice_->conf_window;
        }
    } else if (frames > voice_->conf_window + kRecentFrames) {
        cache_.conformer_att = trim_per_scale(cache_.conformer_att, ed.blocks, layers, ed.heads, frames, 2 * ed.d_head,
                                              voice_->conf_window, kRecentFrames);
        cache_.conformer_frames = voice_->conf_window + kRecentFrames;
    }
}

std::vector<float> Token2Wav::token2mel(const int32_t * tokens, int n, bool last, bool as_is, int * frames) {
    if (opt_.cache_policy == CachePolicy::Reference || n == kWindow || as_is) {
        std::vector<float> mel =
            t2m_->chunk(tokens, n, last, voice_->spk.data(), nullptr, nullptr, opt_.temperature, cache_, frames);
        update_conformer_cache();
        return mel;
    }
    // llama.cpp-omni runs a short (final) window as a full one, padded with silence tokens, and
    // keeps the first 2 mel frames per real token.
    std::vector<int32_t> padded(tokens, tokens + n);
    padded.resize(kWindow, kSilence);
    int T = 0;
    std::vector<float> mel =
        t2m_->chunk(padded.data(), kWindow, last, voice_->spk.data(), nullptr, nullptr, opt_.temperature, cache_, &T);
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
    w.stream = id_;
    ++stream_windows_;
    w.mel = token2mel(tokens, n, last, as_is, &w.frames);
    update_stream_bytes();
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
    if (w.stream != id_ || frames < 1 || w.mel.size() != static_cast<size_t>(HiftVocoder::kMel) * frames) {
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
