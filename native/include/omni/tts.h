// MiniCPM-o TTS (docs/speech-path.md): projector + a LLaMA backbone (our own ggml graph over the
// TTS GGUF, which stock libllama rejects) + the audio-code head and emb_code feedback, with its
// own KV cache on the session's device. The head runs in the same graph as the backbone, so a
// step returns the 6562 logits directly.
//
// Slots (docs/slots.md#tts): the weights live once, shared by every Tts made with new_slot();
// each slot owns only its KV cache and position. Slots decoding at the same time from different
// threads have their one-row code steps evaluated together in one graph; its sums may run in
// another order than a lone step's. With batch_invariant every slot gets exactly its lone
// logits: on the CPU the batched graph keeps per-column dot products, elsewhere each step is a
// graph of its own.
#pragma once

#include "omni/backend.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace omni {

class TtsSampler;

struct TtsDims {
    int hidden = 0, layers = 0, heads = 0, head_dim = 0, ff = 0, text_vocab = 0, audio_tokens = 0, llm_embd = 0;
    float rope_theta = 10000.0f, rms_eps = 1e-6f;
    int audio_bos = 0, text_eos = 0;  // emb_text rows
};

class Tts {
public:
    // projector_gguf may be empty: then projector_semantic.* from the TTS file is used.
    // exact: widen F16 weights to F32 (exact arithmetic, twice the memory); else they stay F16.
    // batch_invariant: each slot's steps give exactly its lone logits (see above).
    Tts(const std::string & tts_gguf, const std::string & projector_gguf, const std::string & device, int threads,
        int n_ctx = 4096, bool exact = false, bool batch_invariant = false);
    ~Tts();
    Tts(const Tts &) = delete;
    Tts & operator=(const Tts &) = delete;

    // A new slot over the same weights, with an empty KV cache of n_ctx positions.
    std::unique_ptr<Tts> new_slot(int n_ctx) const;
    size_t weight_bytes() const;  // the shared weights on the device (once for all slots)
    size_t kv_bytes() const;  // this slot's KV cache on the device
    bool batch_invariant() const;
    // Code steps evaluated by all slots of these weights so far: (graphs, rows). rows > graphs
    // means steps of several slots shared a graph.
    std::pair<int64_t, int64_t> step_batches() const;
    // Fault injection for tests: the next graph holding the steps of two or more slots throws
    // DeviceError (in every slot that took part).
    void fail_next_batch();

    const TtsDims & dims() const;
    int n_past() const;
    void clear();  // new turn: empties the KV cache

    // Condition rows for n text tokens and their LLM hidden states (n x llm_embd):
    // emb_text[token] + L2-normalised projector(hidden), then [text_eos] and audio_bos rows.
    std::vector<float> conditions(const int32_t * tokens, const float * hidden, int n, bool with_text_eos);
    // emb_code row of an audio code (0..audio_tokens-1).
    std::vector<float> code_embedding(int code) const;
    // Evaluates n rows (hidden wide) at positions n_past..; returns the head logits of the last.
    std::vector<float> forward(const float * rows, int n);

    // The decode loop of one text chunk, without leaving C++: evaluates the condition rows, then
    // samples codes with `sampler` and feeds each back through emb_code until the end code
    // (audio_tokens - 1), `limit` codes, or `on_group` returning false. Every `group` codes (and
    // once more for a shorter rest, when the loop ends) `on_group(codes, n)` receives the codes
    // of that group. The end code cannot be drawn before `min_codes` codes. Returns every code
    // generated (the end code excluded).
    std::vector<int32_t> generate(const float * rows, int n, TtsSampler & sampler, int limit, int group,
                                  const std::function<bool(const int32_t *, int)> & on_group, int min_codes = 0);

    // Milliseconds per audio token of the head alone, median of `reps`: as llama.cpp-omni runs it
    // (6562 scalar dot products in plain C++ on one thread) and as we do (a ggml matmul on the
    // session device). For benchmarks.
    std::pair<double, double> head_cost_ms(int reps);

    struct Impl;  // per slot: the shared weights, the KV cache, n_past (native/src/tts_shared.h)

private:
    explicit Tts(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// llama.cpp-omni's simplex TTS sampler: repetition penalty on codes seen in the last `window`
// generated codes (not on the first), divided by temperature, multinomial over all codes.
// Defaults are the Python TtsSampling's; a test keeps them equal.
struct TtsSamplerOptions {
    float temperature = 0.8f;  // <= 0: argmax
    float repetition_penalty = 1.05f;
    int window = 8;
    int top_k = 0;  // duplex mode: 25
    float top_p = 1.0f;  // duplex mode: 0.85
    bool count_penalty = false;  // penalty^count over the window instead of once per distinct code
    // Nucleus over the whole distribution, then the top-k of what it kept (the reference's order);
    // else the nucleus is taken within the top-k (llama.cpp-omni's sampler chain).
    bool top_p_first = false;
    uint32_t seed = 0;
};

class TtsSampler {
public:
    explicit TtsSampler(const TtsSamplerOptions & o);
    int sample(std::vector<float> logits);
    void reset();  // new turn: forgets the history
    const std::vector<int> & history() const { return history_; }

private:
    TtsSamplerOptions o_;
    std::mt19937 rng_;
    std::vector<int> history_;
};

}  // namespace omni
