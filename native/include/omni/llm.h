// The LLM stage over libllama: one context on the model's device, prefill from tokens or from
// embeddings (rows of n_embd_inp floats) at explicit positions, decode steps that return the
// sampled token and its final-norm hidden state, KV management and libllama's sampler chain.
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
    int n_past() const { return n_past_; }
    int n_ctx() const { return n_ctx_; }

    // Evaluates tokens / embedding rows at positions n_past, n_past+1, ...; outputs (logits and
    // hidden states) for the last row only, or for every row when all_outputs.
    void eval_tokens(const std::vector<int32_t> & tokens, bool all_outputs = false);
    void eval_embeddings(const float * rows, int n_rows, bool all_outputs = false);

    // Outputs of the last evaluation; i indexes the rows that produced outputs (-1: the last).
    std::vector<float> logits(int i = -1) const;
    std::vector<float> hidden(int i = -1) const;

    void set_sampling(const SamplingOptions & options);
    // Samples from the last row's logits and records the token in the sampler's history.
    int32_t sample();
    // Evaluates `token` and returns the next sampled token; *hidden_out gets the hidden state
    // of `token` (the LLM's view that produced the sample).
    int32_t decode_step(int32_t token, std::vector<float> * hidden_out);

    // Drops positions [n_keep, n_past) from the KV cache (0: everything).
    void keep(int n_keep);
    // Context shift: drops [n_keep, n_keep + n_discard) and moves the later positions down by
    // n_discard (RoPE re-rotated by libllama), so generation can continue near n_ctx while the
    // system prompt (the first n_keep positions) stays.
    void slide(int n_keep, int n_discard);

private:
    void eval(const int32_t * tokens, const float * embd, int n, bool all_outputs);

    static bool observe_node(ggml_tensor * t, bool ask, void * self);

    std::shared_ptr<LlmModel> model_;
    std::vector<GraphNode> observed_;
    llama_context * ctx_ = nullptr;
    llama_sampler * sampler_ = nullptr;
    int n_ctx_ = 0, n_batch_ = 0, n_past_ = 0, n_outputs_ = 0;
};

}  // namespace omni
