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
    if (o.n_seq < 1 || o.n_seq > 256) throw InvalidArgument("n_seq must be in 1..256, got " + std::to_string(o.n_seq));
    // Every sequence gets a KV stream of its own (non-unified cache): its attention reads only
    // its positions, as a lone context's would, and one sequence cannot fill another's room.
    cp.n_ctx = static_cast<uint32_t>(o.n_ctx) * static_cast<uint32_t>(o.n_seq);
    cp.n_seq_max = static_cast<uint32_t>(o.n_seq);
    cp.kv_unified = false;
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
    n_ctx_ = static_cast<int>(llama_n_ctx(ctx_)) / o.n_seq;
    n_batch_ = static_cast<int>(cp.n_batch);
    const LlmModelInfo & mi = model_->info();
    const size_t kv_row = static_cast<size_t>(mi.n_head_kv) * (mi.n_embd / std::max(mi.n_head, 1));
    kv_bytes_per_seq_ = 2 * kv_row * mi.n_layer * static_cast<size_t>(n_ctx_) * (o.kv_f32 ? 4 : 2);
    seqs_.resize(static_cast<size_t>(o.n_seq));
    for (int s = 0; s < o.n_seq; ++s) set_sampling(SamplingOptions{}, s);
}

bool Llm::observe_node(ggml_tensor * t, bool ask, void * self) {
    if (ask) static_cast<Llm *>(self)->observed_.push_back(describe_node(t));
    return false;  // never ask for the data: the scheduler keeps computing whole splits
}

Llm::~Llm() {
    for (Seq & s : seqs_)
        if (s.sampler) llama_sampler_free(s.sampler);
    if (ctx_) llama_free(ctx_);
}

Llm::Seq & Llm::state(int seq) {
    if (seq < 0 || seq >= static_cast<int>(seqs_.size()))
        throw InvalidArgument("sequence " + std::to_string(seq) + " is outside 0.." + std::to_string(seqs_.size() - 1));
    return seqs_[static_cast<size_t>(seq)];
}

const Llm::Seq & Llm::state(int seq) const { return const_cast<Llm *>(this)->state(seq); }

void Llm::keep_outputs(int seq, int row) {
    Seq & s = state(seq);
    const float * lg = llama_get_logits_ith(ctx_, row);
    const float * hd = llama_get_embeddings_ith(ctx_, row);
    if (!lg || !hd) throw Error("libllama returned no outputs for sequence " + std::to_string(seq));
    s.logits.assign(lg, lg + model_->info().n_vocab);
    s.hidden.assign(hd, hd + model_->info().n_embd);
    s.has_output = true;
}

void Llm::eval(const int32_t * tokens, const float * embd, int n, bool all_outputs, int seq) {
    Seq & st = state(seq);
    if (n < 1) throw InvalidArgument("nothing to evaluate");
    if (st.n_past + n > n_ctx_) {
        throw InvalidArgument("the context is full: " + std::to_string(st.n_past) + " + " + std::to_string(n) +
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
    outputs_seq_ = -1;
    st.has_output = false;
    for (int start = 0; start < n; start += n_batch_) {
        const int m = std::min(n_batch_, n - start);
        llama_batch b = llama_batch_init(m, embd ? n_embd : 0, 1);
        b.n_tokens = m;
        for (int j = 0; j < m; ++j) {
            if (tokens) b.token[j] = tokens[start + j];
            b.pos[j] = st.n_past + start + j;
            b.n_seq_id[j] = 1;
            b.seq_id[j][0] = seq;
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
    st.n_past += n;
    outputs_seq_ = seq;
    keep_outputs(seq, -1);
}

void Llm::decode_many(const std::vector<int> & seqs, const std::vector<int32_t> & tokens) {
    const int n = static_cast<int>(seqs.size());
    if (n < 1 || tokens.size() != seqs.size()) throw InvalidArgument("decode_many needs one token per sequence");
    if (n > n_batch_) throw InvalidArgument("decode_many: more sequences than n_batch");
    std::vector<bool> seen(seqs_.size(), false);
    for (int i = 0; i < n; ++i) {
        Seq & st = state(seqs[i]);
        if (seen[static_cast<size_t>(seqs[i])]) throw InvalidArgument("decode_many: a sequence appears twice");
        seen[static_cast<size_t>(seqs[i])] = true;
        if (tokens[i] < 0 || tokens[i] >= model_->info().n_vocab)
            throw InvalidArgument("token id " + std::to_string(tokens[i]) + " is outside the vocabulary");
        if (st.n_past + 1 > n_ctx_)
            throw InvalidArgument("the context of sequence " + std::to_string(seqs[i]) + " is full (n_ctx " +
                                  std::to_string(n_ctx_) + ")");
    }
    n_outputs_ = 0;
    outputs_seq_ = -1;
    llama_batch b = llama_batch_init(n, 0, 1);
    b.n_tokens = n;
    for (int i = 0; i < n; ++i) {
        Seq & st = state(seqs[i]);
        st.has_output = false;
        b.token[i] = tokens[i];
        b.pos[i] = st.n_past;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = seqs[i];
        b.logits[i] = 1;
    }
    clear_recent_log_problems();
    observed_.clear();
    const int rc = llama_decode(ctx_, b);
    llama_batch_free(b);
    if (rc != 0) throw DeviceError("llama_decode failed (" + std::to_string(rc) + ")" + log_problem_suffix());
    if (!observed_.empty()) record_graph_nodes("llm", "decode", model_->info().device, std::exchange(observed_, {}));
    for (int i = 0; i < n; ++i) {
        ++state(seqs[i]).n_past;
        keep_outputs(seqs[i], i);
    }
}

void Llm::eval_tokens(const std::vector<int32_t> & tokens, bool all_outputs, int seq) {
    if (all_outputs && static_cast<int>(tokens.size()) > n_batch_)
        throw InvalidArgument("all_outputs needs n <= n_batch");
    eval(tokens.data(), nullptr, static_cast<int>(tokens.size()), all_outputs, seq);
}

void Llm::eval_embeddings(const float * rows, int n, bool all_outputs, int seq) {
    if (all_outputs && n > n_batch_) throw InvalidArgument("all_outputs needs n <= n_batch");
    eval(nullptr, rows, n, all_outputs, seq);
}

std::vector<float> Llm::logits(int i, int seq) const {
    const Seq & st = state(seq);
    if (i == -1) {
        if (!st.has_output) throw InvalidArgument("no outputs: evaluate something first");
        return st.logits;
    }
    if (outputs_seq_ != seq || i < 0 || i >= n_outputs_) throw InvalidArgument("output index out of range");
    const float * p = llama_get_logits_ith(ctx_, i);
    if (!p) throw Error("libllama returned no logits");
    return {p, p + model_->info().n_vocab};
}

std::vector<float> Llm::hidden(int i, int seq) const {
    const Seq & st = state(seq);
    if (i == -1) {
        if (!st.has_output) throw InvalidArgument("no outputs: evaluate something first");
        return st.hidden;
    }
    if (outputs_seq_ != seq || i < 0 || i >= n_outputs_) throw InvalidArgument("output index out of range");
    const float * p = llama_get_embeddings_ith(ctx_, i);
    if (!p) throw Error("libllama returned no hidden state");
    return {p, p + model_->info().n_embd};
}

void Llm::set_sampling(const SamplingOptions & o, int seq) {
    Seq & st = state(seq);
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
    if (st.sampler) llama_sampler_free(st.sampler);
    st.sampler = chain;
}

int32_t Llm::sample(int seq) {
    Seq & st = state(seq);
    if (!st.has_output) throw InvalidArgument("no logits to sample from: evaluate something first");
    // What llama_sampler_sample does with a context's row, on this sequence's copy of its row.
    std::vector<llama_token_data> cand(st.logits.size());
    for (size_t t = 0; t < cand.size(); ++t) cand[t] = {static_cast<llama_token>(t), st.logits[t], 0.0f};
    llama_token_data_array arr{cand.data(), cand.size(), -1, false};
    llama_sampler_apply(st.sampler, &arr);
    if (arr.selected < 0 || arr.selected >= static_cast<int64_t>(arr.size)) throw Error("the sampler chose no token");
    const llama_token token = arr.data[arr.selected].id;
    llama_sampler_accept(st.sampler, token);
    return token;
}

int32_t Llm::decode_step(int32_t token, std::vector<float> * hidden_out, int seq) {
    eval(&token, nullptr, 1, false, seq);
    if (hidden_out) *hidden_out = hidden(-1, seq);
    return sample(seq);
}

void Llm::keep(int n_keep, int seq) {
    Seq & st = state(seq);
    if (n_keep < 0 || n_keep > st.n_past) throw InvalidArgument("keep must be in 0..n_past");
    llama_memory_seq_rm(llama_get_memory(ctx_), seq, n_keep, -1);
    st.n_past = n_keep;
    st.has_output = false;
    if (outputs_seq_ == seq) n_outputs_ = 0;
}

void Llm::slide(int n_keep, int n_discard, int seq) {
    Seq & st = state(seq);
    if (n_keep < 0 || n_discard < 1 || n_keep + n_discard > st.n_past) {
        throw InvalidArgument("slide needs 0 <= n_keep and n_keep + n_discard <= n_past");
    }
    llama_memory_t mem = llama_get_memory(ctx_);
    llama_memory_seq_rm(mem, seq, n_keep, n_keep + n_discard);
    llama_memory_seq_add(mem, seq, n_keep + n_discard, st.n_past, -n_discard);
    st.n_past -= n_discard;
    st.has_output = false;
    if (outputs_seq_ == seq) n_outputs_ = 0;
}

void Llm::copy_seq(int src, int dst) {
    const Seq & from = state(src);
    Seq & to = state(dst);
    if (src == dst) throw InvalidArgument("copy_seq: source and destination are the same sequence");
    // p0 = p1 = -1: the whole stream, the only cross-stream copy libllama does
    llama_memory_seq_cp(llama_get_memory(ctx_), src, dst, -1, -1);
    to.n_past = from.n_past;
    to.has_output = false;
    if (outputs_seq_ == dst) n_outputs_ = 0;
}

}  // namespace omni
