#include "omni/tts.h"

#include "tts_shared.h"
#include "omni/errors.h"
#include "omni/gguf_file.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

namespace omni {

namespace {

constexpr int kAudioBos = 151687, kTextEos = 151692;  // llama.cpp-omni's hard-coded emb_text rows

}  // namespace

TtsShared::TtsShared() : GraphModule("tts", 512) {}

Tts::Impl::Impl(std::shared_ptr<TtsShared> shared, int n_ctx_) : w(std::move(shared)), n_ctx(n_ctx_) {
    if (n_ctx < 64 || n_ctx > 65536) throw InvalidArgument("TTS n_ctx must be in 64..65536");
    const TtsDims & d = w->d;
    ggml_init_params p{ggml_tensor_overhead() * 4, nullptr, true};
    kv_ctx = ggml_init(p);
    // F16 K and V as llama.cpp-omni's TTS context keeps them (libllama's default cache type), half
    // the memory of F32; exact sessions (F32 weights) keep F32.
    const ggml_type kv_type = w->w.keep_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    k_cache = ggml_new_tensor_4d(kv_ctx, kv_type, d.head_dim, n_ctx, d.heads, d.layers);
    vt_cache = ggml_new_tensor_4d(kv_ctx, kv_type, n_ctx, d.head_dim, d.heads, d.layers);
    kv_buf = ggml_backend_alloc_ctx_tensors(kv_ctx, w->backend->get());
    if (!kv_buf) {
        ggml_free(kv_ctx);
        throw DeviceError("cannot allocate the TTS KV cache");
    }
    ggml_backend_buffer_clear(kv_buf, 0);  // padding positions are read (masked): keep them finite
}

Tts::Impl::~Impl() {
    if (kv_buf) ggml_backend_buffer_free(kv_buf);
    if (kv_ctx) ggml_free(kv_ctx);
}

Tts::Tts(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Tts::Tts(const std::string & tts_path, const std::string & projector_path, const std::string & device, int threads,
         int n_ctx, bool exact, bool batch_invariant) {
    if (n_ctx < 64 || n_ctx > 65536) throw InvalidArgument("TTS n_ctx must be in 64..65536");
    auto shared = std::make_shared<TtsShared>();
    TtsShared & m = *shared;
    m.w.keep_f16 = !exact;
    m.batch_invariant = batch_invariant;
    m.file = std::make_unique<GgufFile>(tts_path);
    const GgufFile & g = *m.file;
    if (g.get_string("general.architecture") != "llama")
        throw ModelFileError(tts_path, "not a TTS file (architecture is not 'llama')");
    TtsDims & d = m.d;
    d.hidden = static_cast<int>(g.get_int("llama.embedding_length"));
    d.layers = static_cast<int>(g.get_int("llama.block_count"));
    d.heads = static_cast<int>(g.get_int("llama.attention.head_count"));
    d.head_dim = d.hidden / d.heads;
    d.ff = static_cast<int>(g.get_int("llama.feed_forward_length"));
    d.rope_theta =
        g.has_key("llama.rope.freq_base") ? static_cast<float>(g.get_float("llama.rope.freq_base")) : 10000.0f;
    d.rms_eps = g.has_key("llama.attention.layer_norm_rms_epsilon")
        ? static_cast<float>(g.get_float("llama.attention.layer_norm_rms_epsilon"))
        : 1e-6f;
    if (g.has_key("llama.attention.head_count_kv") && g.get_int("llama.attention.head_count_kv") != d.heads) {
        throw ModelFileError(tts_path, "grouped-query attention is not used by the MiniCPM-o TTS");
    }
    const GgufTensorInfo & et = g.tensor("emb_text.weight");
    const GgufTensorInfo & ec = g.tensor("emb_code.0.weight");
    if (et.type != GGML_TYPE_F32 || ec.type != GGML_TYPE_F32 || et.ne[0] != d.hidden || ec.ne[0] != d.hidden) {
        throw ModelFileError(tts_path, "emb_text / emb_code must be F32 with rows of the hidden width");
    }
    d.text_vocab = static_cast<int>(et.ne[1]);
    d.audio_tokens = static_cast<int>(ec.ne[1]);
    m.emb_text = reinterpret_cast<const float *>(g.tensor_data(et));
    m.emb_code = reinterpret_cast<const float *>(g.tensor_data(ec));
    d.audio_bos = g.has_key("omni.tts.audio_bos_token_id") ? static_cast<int>(g.get_int("omni.tts.audio_bos_token_id"))
                                                           : kAudioBos;
    d.text_eos =
        g.has_key("omni.tts.text_eos_token_id") ? static_cast<int>(g.get_int("omni.tts.text_eos_token_id")) : kTextEos;
    if (d.audio_bos >= d.text_vocab || d.text_eos >= d.text_vocab)
        throw ModelFileError(tts_path, "audio_bos/text_eos outside emb_text");

    const int h = d.hidden;
    auto f32 = [&](const GgufFile & f, const std::string & n, std::vector<int64_t> ne) {
        m.w.add(f, n, std::move(ne));
    };
    for (int i = 0; i < d.layers; ++i) {
        const std::string p = "blk." + std::to_string(i);
        f32(g, p + ".attn_norm.weight", {h});
        f32(g, p + ".ffn_norm.weight", {h});
        for (const char * n : {".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_output.weight"})
            f32(g, p + n, {h, h});
        f32(g, p + ".ffn_gate.weight", {h, d.ff});
        f32(g, p + ".ffn_up.weight", {h, d.ff});
        f32(g, p + ".ffn_down.weight", {d.ff, h});
    }
    f32(g, "output_norm.weight", {h});
    // head_code is stored (hidden, codes) row-major; the graph wants (codes rows of hidden).
    const int codes = d.audio_tokens;
    m.w.add_derived(g, "head_code.0.weight", {codes, h}, "head", {h, codes}, [=](std::vector<float> & v) {
        std::vector<float> t(v.size());
        for (int i = 0; i < h; ++i)
            for (int c = 0; c < codes; ++c) t[static_cast<size_t>(c) * h + i] = v[static_cast<size_t>(i) * codes + c];
        v.swap(t);
    });
    // Projector: the separate file if given, else the copy inside the TTS file.
    std::unique_ptr<GgufFile> pf;
    if (!projector_path.empty()) pf = std::make_unique<GgufFile>(projector_path);
    const GgufFile & pg = pf ? *pf : g;
    m.proj = pf ? "" : "projector_semantic.";
    d.llm_embd = static_cast<int>(pg.tensor(m.proj + "linear1.weight").ne[0]);
    f32(pg, m.proj + "linear1.weight", {d.llm_embd, h});
    f32(pg, m.proj + "linear1.bias", {h});
    f32(pg, m.proj + "linear2.weight", {h, h});
    f32(pg, m.proj + "linear2.bias", {h});
    m.finish_loading(std::make_shared<Backend>(device, threads));

    impl_ = std::make_unique<Impl>(std::move(shared), n_ctx);
}

std::unique_ptr<Tts> Tts::new_slot(int n_ctx) const {
    return std::unique_ptr<Tts>(new Tts(std::make_unique<Impl>(impl_->w, n_ctx)));
}

size_t Tts::weight_bytes() const { return impl_->w->w.bytes(); }
size_t Tts::kv_bytes() const { return ggml_backend_buffer_get_size(impl_->kv_buf); }
bool Tts::batch_invariant() const { return impl_->w->batch_invariant; }
std::pair<int64_t, int64_t> Tts::step_batches() const { return {impl_->w->step_graphs, impl_->w->step_rows}; }
void Tts::fail_next_batch() { impl_->w->fail_next_batch = true; }

Tts::~Tts() = default;

const TtsDims & Tts::dims() const { return impl_->w->d; }
int Tts::n_past() const { return impl_->n_past; }
void Tts::clear() { impl_->n_past = 0; }

std::vector<float> Tts::code_embedding(int code) const {
    const TtsDims & d = impl_->w->d;
    if (code < 0 || code >= d.audio_tokens)
        throw InvalidArgument("audio code " + std::to_string(code) + " is out of range");
    const float * r = impl_->w->emb_code + static_cast<size_t>(code) * d.hidden;
    return {r, r + d.hidden};
}

std::vector<float> Tts::conditions(const int32_t * tokens, const float * hidden, int n, bool with_text_eos) {
    TtsShared & m = *impl_->w;
    const TtsDims & d = m.d;
    if (n < 0) throw InvalidArgument("negative token count");
    for (int i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= d.text_vocab)
            throw InvalidArgument("text token " + std::to_string(tokens[i]) + " is outside emb_text");
    const int rows = n + (with_text_eos ? 1 : 0) + 1;
    std::vector<float> out(static_cast<size_t>(rows) * d.hidden);
    if (n > 0) {  // projector on the device: linear1 -> ReLU -> linear2
        std::lock_guard<std::mutex> lock(m.mutex);
        ggml_init_params p{ggml_tensor_overhead() * 64 + ggml_graph_overhead(), nullptr, true};
        std::unique_ptr<ggml_context, decltype(&ggml_free)> holder(ggml_init(p), ggml_free);
        ggml_context * ctx = holder.get();
        ggml_tensor * in = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d.llm_embd, n);
        ggml_set_input(in);
        ggml_tensor * y = m.linear(ctx, ggml_relu(ctx, m.linear(ctx, in, m.proj + "linear1")), m.proj + "linear2");
        ggml_set_output(y);
        ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, y);
        if (!ggml_gallocr_alloc_graph(m.galloc, gf)) throw DeviceError("cannot allocate the projector graph");
        ggml_backend_tensor_set(in, hidden, 0, ggml_nbytes(in));
        m.compute(gf, "projector");
        ggml_backend_tensor_get(y, out.data(), 0, static_cast<size_t>(n) * d.hidden * sizeof(float));
    }
    for (int i = 0; i < n; ++i) {  // F.normalize (x / max(|x|, 1e-12)) + emb_text[token]
        float * r = out.data() + static_cast<size_t>(i) * d.hidden;
        float ss = 0.0f;
        for (int j = 0; j < d.hidden; ++j) ss += r[j] * r[j];
        const float inv = 1.0f / std::max(std::sqrt(ss), 1e-12f);
        const float * e = m.emb_text + static_cast<size_t>(tokens[i]) * d.hidden;
        for (int j = 0; j < d.hidden; ++j) r[j] = e[j] + r[j] * inv;
    }
    int row = n;
    auto put = [&](int id) {
        std::copy_n(m.emb_text + static_cast<size_t>(id) * d.hidden, d.hidden,
                    out.data() + static_cast<size_t>(row++) * d.hidden);
    };
    if (with_text_eos) put(d.text_eos);
    put(d.audio_bos);
    return out;
}

std::vector<float> Tts::forward(const float * rows, int n) {
    std::vector<float> logits;
    evaluate_rows(*impl_->w, {{impl_.get(), rows, n, &logits}});
    return logits;
}

std::vector<int32_t> Tts::generate(const float * rows, int n, TtsSampler & sampler, int limit, int group,
                                   const std::function<bool(const int32_t *, int)> & on_group, int min_codes) {
    if (limit < 0) throw InvalidArgument("limit must be >= 0");
    if (group < 1) throw InvalidArgument("group must be >= 1");
    TtsShared & w = *impl_->w;
    const int end_code = w.d.audio_tokens - 1;
    std::vector<int32_t> codes;
    size_t delivered = 0;
    std::vector<float> logits = forward(rows, n);  // the condition rows: alone, not batched
    // From here each step is one row; with sibling slots decoding too, the steps share graphs.
    // batch_invariant off the CPU: a graph per step (only the CPU graph has a bit-exact batched form).
    TtsBatcher * batcher = w.batch_invariant && !w.backend->is_cpu() ? nullptr : &w.batcher;
    const TtsBatchScope present(batcher, false);
    auto deliver = [&]() {
        if (!on_group) return true;
        const TtsBatchScope away(batcher, true);  // the callback may block: nobody waits for this slot
        const bool go_on = on_group(codes.data() + delivered, static_cast<int>(codes.size() - delivered));
        delivered = codes.size();
        return go_on;
    };
    while (static_cast<int>(codes.size()) < limit) {
        if (static_cast<int>(codes.size()) < min_codes) logits[end_code] = -INFINITY;
        const int code = sampler.sample(std::move(logits));
        if (code == end_code) break;
        codes.push_back(code);
        if (static_cast<int>(codes.size() - delivered) == group && !deliver()) return codes;
        // Every code is fed back, the last one too: it belongs to the context the next chunk sees.
        const std::vector<float> row = code_embedding(code);
        require_room(*impl_, 1);  // here, so that a full context fails this slot only, not a batch
        const TtsRows step{impl_.get(), row.data(), 1, &logits};
        if (batcher) {
            batcher->step(w, step);
        } else {
            evaluate_rows(w, {step});
            ++w.step_graphs;
            ++w.step_rows;
        }
    }
    if (codes.size() > delivered) deliver();
    return codes;
}

std::pair<double, double> Tts::head_cost_ms(int reps) {
    TtsShared & m = *impl_->w;
    const TtsDims & d = m.d;
    if (reps < 1) throw InvalidArgument("reps must be positive");
    const GgufTensorInfo & ht = m.file->tensor("head_code.0.weight");
    std::vector<float> w = m.file->read_f32("head_code.0.weight");  // (hidden, codes) as stored
    // llama.cpp-omni re-transposes to [codes][hidden] and loops; do the same.
    const int codes = static_cast<int>(ht.ne[0]), h = d.hidden;
    std::vector<float> wt(w.size());
    for (int i = 0; i < h; ++i)
        for (int c = 0; c < codes; ++c) wt[static_cast<size_t>(c) * h + i] = w[static_cast<size_t>(i) * codes + c];
    std::vector<float> x(h, 0.01f), out(codes);
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    std::vector<double> plain, graph;
    for (int r = 0; r < reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (int c = 0; c < codes; ++c) {
            float acc = 0.0f;
            const float * row = wt.data() + static_cast<size_t>(c) * h;
            for (int i = 0; i < h; ++i) acc += row[i] * x[i];
            out[c] = acc;
        }
        plain.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::lock_guard<std::mutex> lock(m.mutex);
    ggml_init_params p{ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> holder(ggml_init(p), ggml_free);
    ggml_context * ctx = holder.get();
    ggml_tensor * in = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, h, 1);
    ggml_set_input(in);
    ggml_tensor * y = ggml_mul_mat(ctx, m.W("head"), in);
    ggml_set_output(y);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    if (!ggml_gallocr_alloc_graph(m.galloc, gf)) throw DeviceError("cannot allocate the head graph");
    ggml_backend_tensor_set(in, x.data(), 0, ggml_nbytes(in));
    for (int r = 0; r < reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        m.compute(gf, "head");
        ggml_backend_tensor_get(y, out.data(), 0, ggml_nbytes(y));
        graph.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return {median(plain), median(graph)};
}

}  // namespace omni
