// Token2Wav streaming: speech tokens in, 24 kHz audio out (docs/token2wav-streaming.md).
//
// Tokens are buffered behind 3 silence tokens (4218); every full window of 28 tokens (25 new +
// 3 look-ahead) goes through Token2Mel, then slides by 25. The stream's first window may be
// shorter (first_window_codes + 3 tokens, sliding by first_window_codes): earlier first audio. The fixed voice comes from
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
//
// Streams: new_stream() makes another stream over the same loaded weights (Token2Mel, vocoder,
// their thread pools and backend, the voice prompt); each stream has its own buffers, caches,
// noise generator and counters. Streams may push from different threads at once: Token2Mel and
// the vocoder take one window at a time each, so windows of different streams take turns
// (docs/token2wav-streaming.md, "Many streams over one Token2Wav"). One stream is still driven
// by one caller (or, with the split halves, one mel thread and one vocoder thread).
#pragma once

#include "omni/hift.h"
#include "omni/token2mel.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace omni {

enum class CachePolicy { LlamaCppOmni, Reference };

// "llama.cpp-omni" or "reference"; throws InvalidArgument for anything else.
CachePolicy parse_cache_policy(const std::string & name);
const char * cache_policy_name(CachePolicy p);

// Defaults are the Python Token2WavConfig's where both have the field; a test keeps them equal.
struct Token2WavOptions {
    std::string device = "cpu";  // Token2Mel device
    int steps = 5;  // CFM steps; must match the prompt cache
    int threads = 1;  // vocoder pool and CPU Token2Mel threads
    std::vector<int> cpus;  // vocoder workers' CPUs (empty: not pinned)
    float temperature = 1.0f;
    uint32_t seed = 42;  // noise generator seed (llama.cpp-omni: 42)
    CachePolicy cache_policy = CachePolicy::LlamaCppOmni;
    Token2MelImpl token2mel = Token2MelImpl::Auto;  // Token2Mel's compute on the CPU (omni/token2mel_impl.h)
    bool bf16 = false;  // BF16 matmuls in the vocoder and the native Token2Mel
    // Speech codes the stream's first window waits for (kMinFirstWindow..kHop): fewer make the
    // first audio sooner; that window runs as it is (no padding) and slides by this many.
    int first_window_codes = 25;
};

struct Token2WavTimings {
    double token2mel_ms = 0, vocoder_ms = 0;
    int windows = 0;
    size_t samples = 0;
};

// One window's mel on its way from Token2Mel to the vocoder (the two halves of a stream).
struct MelWindow {
    std::vector<float> mel;  // (80, frames) channel-major
    int frames = 0;
    bool last = false;  // the stream's final window (the vocoder then emits its held-back tail)
    uint64_t seq = 0;  // order of making; vocode takes each window once, in this order
    uint64_t stream = 0;  // the stream that made it (vocode refuses another stream's windows)
};

class Token2Wav {
public:
    static constexpr int kWindow = 28, kHop = 25, kSilence = 4218, kMelCache = 8, kSourceCache = 3840;
    static constexpr int kLookahead = 3, kMinFirstWindow = 5;

    Token2Wav(const std::string & token2wav_dir, const Token2WavOptions & options);
    ~Token2Wav();
    Token2Wav(const Token2Wav &) = delete;
    Token2Wav & operator=(const Token2Wav &) = delete;

    // A new stream over this one's weights, pools, backend and voice prompt (nothing is read
    // from disk), with the same options and its own state, as right after reset(). The weights
    // live as long as any stream over them.
    std::unique_ptr<Token2Wav> new_stream() const;
    // Bytes held once for all streams (Token2Mel and vocoder weights, the voice prompt), and
    // bytes of this stream's own state (attention and conv caches, on the host and on the
    // Token2Mel device; buffers) as of its last window or reset. Safe to read from any thread.
    size_t weight_bytes() const;
    size_t stream_bytes() const { return stream_bytes_.load(std::memory_order_relaxed); }

    // Appends tokens (0..6560) and returns the audio that became ready. final=true flushes the
    // rest (tokens may then be empty); after it only reset() is accepted.
    std::vector<float> push(const int32_t * tokens, int n, bool final);
    // Turns what the buffer holds into audio now, without ending the stream: windows of up to
    // 28 tokens (3 of them look-ahead) while at least 8 tokens wait, keeping the last 3 as the
    // next window's context (full duplex flushes every unit this way).
    std::vector<float> flush();
    // Back to the state right after loading (prompt caches, silence prefix, fresh noise seed).
    void reset();

    // The two halves of push/flush, for running them as two pipeline stages: push_mel/flush_mel
    // run Token2Mel on the windows that became ready, vocode turns one window into audio. One
    // thread may call the mel half while another vocodes earlier windows, in order; the audio is
    // that of push/flush. push(...) == concatenated vocode(w) for w in push_mel(...). vocode
    // throws for a window out of order, vocoded twice, or made before the last reset(); reset()
    // needs both halves idle.
    std::vector<MelWindow> push_mel(const int32_t * tokens, int n, bool final);
    std::vector<MelWindow> flush_mel();
    std::vector<float> vocode(const MelWindow & window);

    // Of the last push/flush (or, for the split calls, of the last call of each half).
    Token2WavTimings last_timings() const;
    Token2WavTimings total_timings() const;
    int steps() const { return t2m_->steps(); }
    int threads() const { return vocoder_->threads(); }
    bool finished() const { return finished_; }
    CachePolicy cache_policy() const { return opt_.cache_policy; }
    Token2MelImpl token2mel() const { return t2m_->token2mel(); }
    bool bf16() const { return opt_.bf16; }

private:
    struct Voice;  // the voice prompt: speaker vector and caches (read-only, shared)

    Token2Wav(std::shared_ptr<Token2Mel> t2m, std::shared_ptr<HiftVocoder> vocoder, std::shared_ptr<const Voice> voice,
              const Token2WavOptions & options);
    static std::shared_ptr<const Voice> load_voice(const std::string & dir, const Token2WavOptions & options,
                                                   const Token2Mel & t2m);
    void update_stream_bytes();
    MelWindow mel_window(const int32_t * tokens, int n, bool last, bool as_is = false);
    std::vector<float> vocode_window(const MelWindow & w);
    std::vector<float> vocode_all(const std::vector<MelWindow> & windows);
    void add_timing(double Token2WavTimings::* field, double ms);
    void clear_last(bool mel_half, bool vocoder_half);
    std::vector<float> token2mel(const int32_t * tokens, int n, bool last, bool as_is, int * frames);
    void update_conformer_cache();

    Token2WavOptions opt_;
    std::shared_ptr<Token2Mel> t2m_;  // shared by the streams; thread-safe
    std::shared_ptr<HiftVocoder> vocoder_;  // shared by the streams; thread-safe
    std::shared_ptr<const Voice> voice_;
    const uint64_t id_;  // MelWindow::stream of this stream's windows
    Token2MelCache cache_;
    std::vector<int32_t> buffer_;
    std::vector<float> mel_cache_, source_cache_, tail_;  // mel_cache_: (80, kMelCache) channel-major
    bool finished_ = false;
    uint64_t next_mel_ = 0, next_vocode_ = 0;  // MelWindow::seq of the next window made / vocoded
    int stream_windows_ = 0;  // windows made since the last reset()
    mutable std::mutex timing_mutex_;  // the two halves may run on two threads
    Token2WavTimings last_, total_;
    std::atomic<size_t> stream_bytes_{0};
};

}  // namespace omni
