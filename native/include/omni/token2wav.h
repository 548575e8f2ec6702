// Token2Wav streaming: speech tokens in, 24 kHz audio out (docs/token2wav-streaming.md).
//
// Tokens are buffered behind 3 silence tokens (4218); every full window of 28 tokens (25 new +
// 3 look-ahead) goes through Token2Mel, then slides by 25. The fixed voice comes from
// prompt_cache.gguf (speaker vector and the encoder/estimator caches). How the attention caches
// evolve between windows, and how the final window is run, is the cache policy:
//  - LlamaCppOmni: the estimator cache stays the prompt's for the whole stream; each conformer
//    layer keeps the newest L frames of its cache (L = the prompt's length), so the prompt slides
//    out; the final window is padded to 28 tokens with 4218 and its mel cropped to 2 frames per
//    real token.
//  - Reference: the PyTorch streaming path (stepaudio2, minicpmo-utils 1.0.7): both caches keep
//    the prompt's frames plus the newest 100 mel frames (50 token frames for the token-rate
//    conformer layers, trimmed on their own scale); the final window runs its real tokens only.
// The HiFT vocoder is the same for both: it runs on the CPU with an 8-frame mel cache and a
// 3840-sample source cache; each chunk's first 3840 samples are cross-faded (Hamming, 7680) with
// the previous chunk's held-back tail and its own last 3840 samples are held back until the final
// push: 24000 samples per 25 tokens.
#pragma once

#include "omni/hift.h"
#include "omni/token2mel.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace omni {

enum class CachePolicy { LlamaCppOmni, Reference };

// "llama.cpp-omni" or "reference"; throws InvalidArgument for anything else.
CachePolicy parse_cache_policy(const std::string & name);
const char * cache_policy_name(CachePolicy p);

struct Token2WavOptions {
    std::string device = "cpu";   // Token2Mel device
    int steps = 5;                // CFM steps; must match the prompt cache
    int threads = 1;              // vocoder pool and CPU Token2Mel threads
    std::vector<int> cpus;        // vocoder workers' CPUs (empty: not pinned)
    float temperature = 1.0f;
    uint32_t seed = 42;           // noise generator seed (llama.cpp-omni: 42)
    CachePolicy cache_policy = CachePolicy::LlamaCppOmni;
    Engine engine = Engine::Auto;  // Token2Mel's compute on the CPU (omni/engine.h)
    bool bf16 = false;             // BF16 matmuls in the vocoder and the native Token2Mel engine
};

struct Token2WavTimings {
    double token2mel_ms = 0, vocoder_ms = 0;
    int windows = 0;
    size_t samples = 0;
};

class Token2Wav {
public:
    static constexpr int kWindow = 28, kHop = 25, kSilence = 4218, kMelCache = 8, kSourceCache = 3840;

    Token2Wav(const std::string & token2wav_dir, const Token2WavOptions & options);
    ~Token2Wav();

    // Appends tokens (0..6560) and returns the audio that became ready. final=true flushes the
    // rest (tokens may then be empty); after it only reset() is accepted.
    std::vector<float> push(const int32_t * tokens, int n, bool final);
    // Turns what the buffer holds into audio now, without ending the stream: windows of up to
    // 28 tokens (3 of them look-ahead) while at least 8 tokens wait, keeping the last 3 as the
    // next window's context (full duplex flushes every unit this way).
    std::vector<float> flush();
    // Back to the state right after loading (prompt caches, silence prefix, fresh noise seed).
    void reset();

    const Token2WavTimings & last_timings() const { return last_; }
    const Token2WavTimings & total_timings() const { return total_; }
    int steps() const { return t2m_->steps(); }
    int threads() const { return vocoder_->threads(); }
    bool finished() const { return finished_; }
    CachePolicy cache_policy() const { return opt_.cache_policy; }
    Engine engine() const { return t2m_->engine(); }
    bool bf16() const { return opt_.bf16; }

private:
    std::vector<float> window(const int32_t * tokens, int n, bool last);
    std::vector<float> token2mel(const int32_t * tokens, int n, bool last, int * frames);
    void update_conformer_cache();

    Token2WavOptions opt_;
    std::unique_ptr<Token2Mel> t2m_;
    std::unique_ptr<HiftVocoder> vocoder_;
    std::vector<float> spk_;
    Token2MelCache prompt_cache_, cache_;
    int conf_window_ = 0, est_window_ = 0;
    std::vector<int32_t> buffer_;
    std::vector<float> mel_cache_, source_cache_, tail_;  // mel_cache_: (80, kMelCache) channel-major
    bool finished_ = false;
    Token2WavTimings last_, total_;
};

}  // namespace omni
