// The LLM stage over libllama: one context on the model's device, prefill from tokens or from
// embeddings (rows of n_embd_inp floats) at explicit positions, decode steps that return the
// sampled token and its final-norm hidden state, KV management and libllama's sampler chain.
//
// A context serves n_seq sequences (an engine's session slots, docs/slots.md): each has its own
// KV stream of n_ctx positions (libllama's non-unified cache), position counter, sampler and
// copy of its last output row, so evaluating one sequence never disturbs another's state.
// decode_many() evaluates one token of several sequences in one llama_decode. The context is not
// thread-safe: callers serialize every call (the Python scheduler does).
#pragma once

#include "omni/graph_record.h"
#include "omni/llm_model.h"

#include <cstdint>
#include <memory>
#include <vector>

struct ggml_tensor;
struct llama_context;
struct llama_sampler;

namespace omni {

struct LlmOptions {
    int n_ctx = 4096;
    int n_batch = 512;
    int threads = 0;  // <= 0: libllama's default
    int n_seq = 1;  // sequences (session slots), each with n_ctx positions of its own
    bool kv_f32 = false;  // F32 KV cache (exact, 2x memory); default F16 as llama.cpp
    int flash_attn = -1;  // -1: ours (off on the CPU, libllama's auto on accelerators); 0 off; 1 on
    // Report every node libllama's scheduler evaluates to the graph recorder (graph_record.h), as
    // graphs "prefill" (several rows) and "decode" (one row). Observing only: nothing is copied.
    bool record_graph = false;
};

// Defaults are the Python LlmSampling's (MiniCPM-o's speech defaults); a test keeps them equal.
struct SamplingOptions {
    float temperature = 0.7f;  // <= 0: greedy
    int top_k = 20;  // <= 0: off
    float top_p = 0.95f;  // >= 1: off
    float min_p = 0.0f;  // <= 0: off
    float repeat_penalty = 1.0f;
    int repeat_last_n = 64;
    uint32_t seed = 0;
};

class Llm {
public:
    Llm(std::shared_ptr<LlmModel> model, const LlmOptions & options);
    ~Llm();
    Llm(const Llm &) = delete;
    Llm & operator=(const Llm &) = delete;

    const LlmModel & model() const { return *model_; }
    int n_past(int seq = 0) const { return state(seq).n_past; }
    int n_ctx() const { return n_ctx_; }  // positions per sequence
    int n_seq() const { return static_cast<int>(seqs_.size()); }
    // Bytes of the KV cache of one sequence (the per-slot share of the context's memory).
    size_t kv_bytes_per_seq() const { return kv_bytes_per_seq_; }

    // Evaluates tokens / embedding rows of sequence `seq` at its positions n_past, n_past+1, ...;
    // outputs (logits and hidden states) for the last row only, or for every row when all_outputs.
    void eval_tokens(const std::vector<int32_t> & tokens, bool all_outputs = false, int seq = 0);
    void eval_embeddings(const float * rows, int n_rows, bool all_outputs = false, int seq = 0);
    // One token for each of the distinct `seqs` in one llama_decode; afterwards logits(-1, s),
    // hidden(-1, s) and sample(s) read each sequence's row.
    void decode_many(const std::vector<int> & seqs, const std::vector<int32_t> & tokens);

    // Outputs of `seq`'s last evaluation: i = -1 its last row (kept until `seq` is evaluated
    // again); i >= 0 a row of an all_outputs evaluation, readable until anything is evaluated.
    std::vector<float> logits(int i = -1, int seq = 0) const;
    std::vector<float> hidden(int i = -1, int seq = 0) const;

    void set_sampling(const SamplingOptions & options, int seq = 0);
    // Samples from `seq`'s last row's logits and records the token in its sampler's history.
    int32_t sample(int seq = 0);
    // Evaluates `token` and returns the next sampled token; *hidden_out gets the hidden state
    // of `token` (the LLM's view that produced the sample).
    int32_t decode_step(int32_t token, std::vector<float> * hidden_out, int seq = 0);

    // Drops positions [n_keep, n_past) from `seq`'s KV cache (0: everything).
    void keep(int n_keep, int seq = 0);
    // Context shift: drops [n_keep, n_keep + n_discard) and moves the later positions down by
    // n_discard (RoPE re-rotated by libllama), so generation can continue near n_ctx while the
    // system prompt (the first n_keep positions) stays.
    void slide(int n_keep, int n_discard, int seq = 0);
    // Makes `dst` a copy of `src` (beam search): its KV cache and position; `dst` has no output
    // row until it is evaluated. Each sequence has a stream of its own, and libllama copies a
    // stream whole (all n_ctx positions of every layer), on the device, at the start of the next
    // llama_decode, in the order the copies were asked for.
    void copy_seq(int src, int dst);

private:
    struct Seq {
        int n_past = 0;
        llama_sampler * sampler = nullptr;
        bool has_output = false;
        std::vector<float> logits, hidden;  // its last output row, copied out of the context
    };

    void eval(const int32_t * tokens, const float * embd, int n, bool all_outputs, int seq);
    Seq & state(int seq);
    const Seq & state(int seq) const;
    void keep_outputs(int seq, int row);

    static bool observe_node(ggml_tensor * t, bool ask, void * self);

    std::shared_ptr<LlmModel> model_;
    std::vector<GraphNode> observed_;
    llama_context * ctx_ = nullptr;
    std::vector<Seq> seqs_;
    int n_ctx_ = 0, n_batch_ = 0;
    size_t kv_bytes_per_seq_ = 0;
    // Rows of the last evaluation with outputs, and its sequence (for logits(i >= 0)).
    int n_outputs_ = 0, outputs_seq_ = -1;
};

}  // namespace omni
