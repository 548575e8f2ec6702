#include "omni/llm.h"

#include "graph_check.h"

#include "omni/backend.h"
#include "omni/errors.h"
#include "omni/log.h"

#include <llama.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace omni {

Llm::Llm(std::shared_ptr<LlmModel> model, const LlmOptions & o) : model_(std::move(model)) {
    if (o.n_ctx < 16 || o.n_ctx > (1 << 20))
        throw InvalidArgument("n_ctx must be in 16..1048576, got " + std::to_string(o.n_ctx));
    if (o.n_batch < 1) throw InvalidArgument("n_batch must be positive");
    if (o.threads > Backend::kMaxThreads) {
        throw InvalidArgument("threads must be at most " + std::to_string(Backend::kMaxThreads) + ", got " +
                              std::to_string(o.threads));
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(o.n_ctx);
    cp.n_batch = static_cast<uint32_t>(std::min(o.n_batch, o.n_ctx));
    cp.n_ubatch = cp.n_batch;
    cp.n_seq_max = 1;
    cp.embeddings = true;  // final-norm hidden states for the TTS, alongside the logits
    cp.pooling_type = LLAMA_POOLING_TYPE_NONE;
    if (o.threads > 0) cp.n_threads = cp.n_threads_batch = o.threads;
    if (o.kv_f32) cp.type_k = cp.type_v = GGML_TYPE_F32;
    // On the CPU, flash attention splits a decode step's keys across threads and combines the
    // partial sums, so results depend on the thread count; plain attention does not (and with an
    // F32 cache it is also the exact path). Accelerators keep libllama's choice.
    if (o.kv_f32 || model_->info().device == "cpu") cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (o.flash_attn >= 0)
        cp.flash_attn_type = o.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (o.record_graph) {
        cp.cb_eval = &Llm::observe_node;
        cp.cb_eval_user_data = this;
    }
    clear_recent_log_problems();
    ctx_ = llama_init_from_model(model_->get(), cp);
    if (!ctx_) throw DeviceError("libllama could not create a context" + log_problem_suffix());
    n_ctx_ = static_cast<int>(llama_n_ctx(ctx_));
    n_batch_ = static_cast<int>(cp.n_batch);
    set_sampling(SamplingOptions{});
}

bool Llm::observe_node(ggml_tensor * t, bool ask, void * self) {
    if (ask) static_cast<Llm *>(self)->observed_.push_back(describe_node(t));
    return false;  // never ask for the data: the scheduler keeps computing whole splits
}

Llm::~Llm() {
    if (sampler_) llama_sampler_free(sampler_);
    if (ctx_) llama_free(ctx_);
}

void Llm::eval(const int32_t * tokens, const float * embd, int n, bool all_outputs) {
    if (n < 1) throw InvalidArgument("nothing to evaluate");
    if (n_past_ + n > n_ctx_) {
        throw InvalidArgument("the context is full: " + std::to_string(n_past_) + " + " + std::to_string(n) +
                              " > n_ctx " + std::to_string(n_ctx_));
    }
    const int n_embd = model_->info().n_embd_inp;
    const int n_vocab = model_->info().n_vocab;
    if (tokens) {
        for (int i = 0; i < n; ++i)
            if (tokens[i] < 0 || tokens[i] >= n_vocab)
                throw InvalidArgument("token id " + std::to_string(tokens[i]) + " is outside the vocabulary");
    }
    n_outputs_ = 0;
    for (int start = 0; start < n; start += n_batch_) {
        const int m = std::min(n_batch_, n - start);
        llama_batch b = llama_batch_init(m, embd ? n_embd : 0, 1);
        b.n_tokens = m;
        for (int j = 0; j < m; ++j) {
            if (tokens) b.token[j] = tokens[start + j];
            b.pos[j] = n_past_ + start + j;
            b.n_seq_id[j] = 1;
            b.seq_id[j][0] = 0;
            const bool last = start + j == n - 1;
            b.logits[j] = (all_outputs || last) ? 1 : 0;
        }
        if (embd)
            std::memcpy(b.embd, embd + static_cast<size_t>(start) * n_embd,
                        sizeof(float) * static_cast<size_t>(m) * n_embd);
        clear_recent_log_problems();
        observed_.clear();
        const int rc = llama_decode(ctx_, b);
        llama_batch_free(b);
        if (rc != 0) throw DeviceError("llama_decode failed (" + std::to_string(rc) + ")" + log_problem_suffix());
        if (!observed_.empty())
            record_graph_nodes("llm", m > 1 ? "prefill" : "decode", model_->info().device,
                               std::exchange(observed_, {}));
        // Outputs of earlier sub-batches are overwritten: only the last sub-batch's are readable.
        n_outputs_ = all_outputs ? m : 1;
    }
    n_past_ += n;
}

void Llm::eval_tokens(const std::vector<int32_t> & tokens, bool all_outputs) {
    if (all_outputs && static_cast<int>(tokens.size()) > n_batch_)
        throw InvalidArgument("all_outputs needs n <= n_batch");
    eval(tokens.data(), nullptr, static_cast<int>(tokens.size()), all_outputs);
}

void Llm::eval_embeddings(const float * rows, int n, bool all_outputs) {
    if (all_outputs && n > n_batch_) throw InvalidArgument("all_outputs needs n <= n_batch");
    eval(nullptr, rows, n, all_outputs);
}

std::vector<float> Llm::logits(int i) const {
    if (n_outputs_ == 0) throw InvalidArgument("no outputs: evaluate something first");
    if (i < -1 || i >= n_outputs_) throw InvalidArgument("output index out of range");
    const float * p = llama_get_logits_ith(ctx_, i);
    if (!p) throw Error("libllama returned no logits");
    return {p, p + model_->info().n_vocab};
}

std::vector<float> Llm::hidden(int i) const {
    if (n_outputs_ == 0) throw InvalidArgument("no outputs: evaluate something first");
    if (i < -1 || i >= n_outputs_) throw InvalidArgument("output index out of range");
    const float * p = llama_get_embeddings_ith(ctx_, i);
    if (!p) throw Error("libllama returned no hidden state");
    return {p, p + model_->info().n_embd};
}

void Llm::set_sampling(const SamplingOptions & o) {
    if (o.repeat_penalty <= 0.0f) throw InvalidArgument("repeat_penalty must be > 0");
    llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    const int n_vocab = model_->info().n_vocab;
    if (o.repeat_penalty != 1.0f && o.repeat_last_n != 0) {
        llama_sampler_chain_add(chain,
                                llama_sampler_init_penalties(n_vocab, o.repeat_last_n, o.repeat_penalty, 0.0f, 0.0f));
    }
    if (o.temperature <= 0.0f) {
        llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    } else {
        if (o.top_k > 0) llama_sampler_chain_add(chain, llama_sampler_init_top_k(o.top_k));
        if (o.top_p < 1.0f) llama_sampler_chain_add(chain, llama_sampler_init_top_p(o.top_p, 1));
        if (o.min_p > 0.0f) llama_sampler_chain_add(chain, llama_sampler_init_min_p(o.min_p, 1));
        llama_sampler_chain_add(chain, llama_sampler_init_temp(o.temperature));
        llama_sampler_chain_add(chain, llama_sampler_init_dist(o.seed));
    }
    if (sampler_) llama_sampler_free(sampler_);
    sampler_ = chain;
}

int32_t Llm::sample() {
    if (n_outputs_ == 0) throw InvalidArgument("no logits to sample from: evaluate something first");
    return llama_sampler_sample(sampler_, ctx_, -1);  // also accepts the token
}

int32_t Llm::decode_step(int32_t token, std::vector<float> * hidden_out) {
    eval(&token, nullptr, 1, false);
    if (hidden_out) *hidden_out = hidden(-1);
    return sample();
}

void Llm::keep(int n_keep) {
    if (n_keep < 0 || n_keep > n_past_) throw InvalidArgument("keep must be in 0..n_past");
    llama_memory_seq_rm(llama_get_memory(ctx_), 0, n_keep, -1);
    n_past_ = n_keep;
    n_outputs_ = 0;
}

void Llm::slide(int n_keep, int n_discard) {
    if (n_keep < 0 || n_discard < 1 || n_keep + n_discard > n_past_) {
        throw InvalidArgument("slide needs 0 <= n_keep and n_keep + n_discard <= n_past");
    }
    llama_memory_t mem = llama_get_memory(ctx_);
    llama_memory_seq_rm(mem, 0, n_keep, n_keep + n_discard);
    llama_memory_seq_add(mem, 0, n_keep + n_discard, n_past_, -n_discard);
    n_past_ -= n_discard;
    n_outputs_ = 0;
}

}  // namespace omni
