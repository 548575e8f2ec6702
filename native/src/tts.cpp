#include "omni/tts.h"

#include "ggml_weights.h"
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

int round16(int n) { return (n + 15) / 16 * 16; }

}  // namespace

struct Tts::Impl : GraphModule {
    TtsDims d;
    int n_ctx = 0, n_past = 0;
    std::unique_ptr<GgufFile> file;  // emb_text / emb_code rows are read in place
    const float * emb_text = nullptr;
    const float * emb_code = nullptr;
    ggml_context * kv_ctx = nullptr;
    ggml_backend_buffer_t kv_buf = nullptr;
    ggml_tensor * k_cache = nullptr;  // [head_dim, n_ctx, heads, layers]
    ggml_tensor * vt_cache = nullptr;  // [n_ctx, head_dim, heads, layers]
    std::string proj;  // name prefix of the projector weights

    Impl() : GraphModule("tts", 512) {}
    ~Impl() {
        if (kv_buf) ggml_backend_buffer_free(kv_buf);
        if (kv_ctx) ggml_free(kv_ctx);
    }
};

Tts::Tts(const std::string & tts_path, const std::string & projector_path, const std::string & device, int threads,
         int n_ctx, bool exact)
    : impl_(std::make_unique<Impl>()) {
    Impl & m = *impl_;
    m.w.keep_f16 = !exact;
    if (n_ctx < 64 || n_ctx > 65536) throw InvalidArgument("TTS n_ctx must be in 64..65536");
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

    ggml_init_params p{ggml_tensor_overhead() * 4, nullptr, true};
    m.kv_ctx = ggml_init(p);
    m.k_cache = ggml_new_tensor_4d(m.kv_ctx, GGML_TYPE_F32, d.head_dim, n_ctx, d.heads, d.layers);
    m.vt_cache = ggml_new_tensor_4d(m.kv_ctx, GGML_TYPE_F32, n_ctx, d.head_dim, d.heads, d.layers);
    m.kv_buf = ggml_backend_alloc_ctx_tensors(m.kv_ctx, m.backend->get());
    if (!m.kv_buf) throw DeviceError("cannot allocate the TTS KV cache");
    ggml_backend_buffer_clear(m.kv_buf, 0);  // padding positions are read (masked): keep them finite
    m.n_ctx = n_ctx;
}

Tts::~Tts() = default;

const TtsDims & Tts::dims() const { return impl_->d; }
int Tts::n_past() const { return impl_->n_past; }
void Tts::clear() { impl_->n_past = 0; }

std::vector<float> Tts::code_embedding(int code) const {
    const TtsDims & d = impl_->d;
    if (code < 0 || code >= d.audio_tokens)
        throw InvalidArgument("audio code " + std::to_string(code) + " is out of range");
    const float * r = impl_->emb_code + static_cast<size_t>(code) * d.hidden;
    return {r, r + d.hidden};
}

std::vector<float> Tts::conditions(const int32_t * tokens, const float * hidden, int n, bool with_text_eos) {
    Impl & m = *impl_;
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
    Impl & m = *impl_;
    const TtsDims & d = m.d;
    if (n < 1) throw InvalidArgument("no rows to evaluate");
    const int T2 = m.n_past + n, T2p = round16(T2);
    if (T2p > m.n_ctx)
        throw InvalidArgument("the TTS context is full (" + std::to_string(m.n_ctx) + " positions); start a new turn");
    std::lock_guard<std::mutex> lock(m.mutex);
    const int h = d.hidden, hd = d.head_dim, H = d.heads;

    ggml_init_params p{ggml_tensor_overhead() * 4096 + ggml_graph_overhead_custom(4096, false), nullptr, true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> holder(ggml_init(p), ggml_free);
    ggml_context * ctx = holder.get();
    ggml_cgraph * gf = ggml_new_graph_custom(ctx, 4096, false);
    ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, h, n);
    ggml_tensor * pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
    ggml_tensor * mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, T2p, n);
    for (ggml_tensor * t : {x, pos, mask}) ggml_set_input(t);
    ggml_tensor * kc = m.k_cache;
    ggml_tensor * vc = m.vt_cache;
    ggml_tensor * cur = x;
    for (int l = 0; l < d.layers; ++l) {
        const std::string b = "blk." + std::to_string(l);
        ggml_tensor * a = ggml_mul(ctx, ggml_rms_norm(ctx, cur, d.rms_eps), m.W(b + ".attn_norm.weight"));
        auto rope = [&](ggml_tensor * t) {  // LLaMA's interleaved RoPE (the GGUF's q/k rows are permuted for it)
            return ggml_rope_ext(ctx, ggml_reshape_3d(ctx, t, hd, H, n), pos, nullptr, hd, 0, 0, d.rope_theta, 1.0f,
                                 0.0f, 1.0f, 0.0f, 0.0f);
        };
        ggml_tensor * q = rope(ggml_mul_mat(ctx, m.W(b + ".attn_q.weight"), a));  // [hd, H, n]
        ggml_tensor * k = rope(ggml_mul_mat(ctx, m.W(b + ".attn_k.weight"), a));
        ggml_tensor * v = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, m.W(b + ".attn_v.weight"), a), hd, H, n);
        ggml_tensor * k_dst =
            ggml_view_3d(ctx, kc, hd, n, H, kc->nb[1], kc->nb[2], l * kc->nb[3] + m.n_past * kc->nb[1]);
        ggml_tensor * v_dst =
            ggml_view_3d(ctx, vc, n, hd, H, vc->nb[1], vc->nb[2], l * vc->nb[3] + m.n_past * sizeof(float));
        ggml_build_forward_expand(gf, ggml_cpy(ctx, ggml_permute(ctx, k, 0, 2, 1, 3), k_dst));
        ggml_build_forward_expand(gf, ggml_cpy(ctx, ggml_permute(ctx, v, 1, 2, 0, 3), v_dst));
        ggml_tensor * K = ggml_view_3d(ctx, kc, hd, T2p, H, kc->nb[1], kc->nb[2], l * kc->nb[3]);
        ggml_tensor * VT = ggml_view_3d(ctx, vc, T2p, hd, H, vc->nb[1], vc->nb[2], l * vc->nb[3]);
        ggml_tensor * Q = ggml_cont(ctx, ggml_permute(ctx, q, 0, 2, 1, 3));  // [hd, n, H]
        ggml_tensor * att = ggml_soft_max_ext(ctx, ggml_mul_mat(ctx, K, Q), mask, 1.0f / std::sqrt(float(hd)), 0.0f);
        ggml_tensor * o = ggml_cont(ctx, ggml_permute(ctx, ggml_mul_mat(ctx, VT, att), 0, 2, 1, 3));  // [hd, H, n]
        cur = ggml_add(ctx, cur, ggml_mul_mat(ctx, m.W(b + ".attn_output.weight"), ggml_reshape_2d(ctx, o, h, n)));
        ggml_tensor * f = ggml_mul(ctx, ggml_rms_norm(ctx, cur, d.rms_eps), m.W(b + ".ffn_norm.weight"));
        f = ggml_mul(ctx, ggml_silu(ctx, ggml_mul_mat(ctx, m.W(b + ".ffn_gate.weight"), f)),
                     ggml_mul_mat(ctx, m.W(b + ".ffn_up.weight"), f));
        cur = ggml_add(ctx, cur, ggml_mul_mat(ctx, m.W(b + ".ffn_down.weight"), f));
    }
    ggml_tensor * last = ggml_view_2d(ctx, cur, h, 1, cur->nb[1], static_cast<size_t>(n - 1) * cur->nb[1]);
    last = ggml_mul(ctx, ggml_rms_norm(ctx, ggml_cont(ctx, last), d.rms_eps), m.W("output_norm.weight"));
    ggml_tensor * logits = ggml_mul_mat(ctx, m.W("head"), last);  // [codes, 1]
    ggml_set_output(logits);
    ggml_build_forward_expand(gf, logits);
    if (!ggml_gallocr_alloc_graph(m.galloc, gf)) throw DeviceError("cannot allocate the TTS graph");

    ggml_backend_tensor_set(x, rows, 0, ggml_nbytes(x));
    std::vector<int32_t> pv(n);
    std::iota(pv.begin(), pv.end(), m.n_past);
    ggml_backend_tensor_set(pos, pv.data(), 0, ggml_nbytes(pos));
    std::vector<float> mk(static_cast<size_t>(T2p) * n);
    for (int r = 0; r < n; ++r)  // causal: row r (position n_past + r) sees positions <= its own
        for (int c = 0; c < T2p; ++c) mk[static_cast<size_t>(r) * T2p + c] = c <= m.n_past + r ? 0.0f : -INFINITY;
    ggml_backend_tensor_set(mask, mk.data(), 0, ggml_nbytes(mask));
    m.compute(gf, "step");
    std::vector<float> out(d.audio_tokens);
    ggml_backend_tensor_get(logits, out.data(), 0, ggml_nbytes(logits));
    m.n_past += n;
    return out;
}

std::vector<int32_t> Tts::generate(const float * rows, int n, TtsSampler & sampler, int limit, int group,
                                   const std::function<bool(const int32_t *, int)> & on_group, int min_codes) {
    if (limit < 0) throw InvalidArgument("limit must be >= 0");
    if (group < 1) throw InvalidArgument("group must be >= 1");
    const int end_code = impl_->d.audio_tokens - 1;
    std::vector<int32_t> codes;
    size_t delivered = 0;
    auto deliver = [&]() {
        const bool go_on = !on_group || on_group(codes.data() + delivered, static_cast<int>(codes.size() - delivered));
        delivered = codes.size();
        return go_on;
    };
    std::vector<float> logits = forward(rows, n);
    while (static_cast<int>(codes.size()) < limit) {
        if (static_cast<int>(codes.size()) < min_codes) logits[end_code] = -INFINITY;
        const int code = sampler.sample(std::move(logits));
        if (code == end_code) break;
        codes.push_back(code);
        if (static_cast<int>(codes.size() - delivered) == group && !deliver()) return codes;
        // Every code is fed back, the last one too: it belongs to the context the next chunk sees.
        const std::vector<float> row = code_embedding(code);
        logits = forward(row.data(), 1);
    }
    if (codes.size() > delivered) deliver();
    return codes;
}

std::pair<double, double> Tts::head_cost_ms(int reps) {
    Impl & m = *impl_;
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

TtsSampler::TtsSampler(const TtsSamplerOptions & o) : o_(o), rng_(o.seed) {
    if (!(o.repetition_penalty > 0.0f)) throw InvalidArgument("repetition_penalty must be > 0");
    if (o.window < 0) throw InvalidArgument("window must be >= 0");
}

void TtsSampler::reset() { history_.clear(); }

int TtsSampler::sample(std::vector<float> logits) {
    const int V = static_cast<int>(logits.size());
    if (V == 0) throw InvalidArgument("no logits");
    if (!history_.empty() && o_.repetition_penalty != 1.0f) {  // not on the first token of a turn
        const size_t from = history_.size() > static_cast<size_t>(o_.window) ? history_.size() - o_.window : 0;
        std::vector<int> count(V, 0);
        for (size_t i = from; i < history_.size(); ++i) ++count[history_[i]];
        for (int c = 0; c < V; ++c) {
            if (!count[c]) continue;
            const float alpha = o_.count_penalty ? std::pow(o_.repetition_penalty, static_cast<float>(count[c]))
                                                 : o_.repetition_penalty;
            logits[c] = logits[c] >= 0.0f ? logits[c] / alpha : logits[c] * alpha;
        }
    }
    int chosen;
    if (o_.temperature <= 0.0f) {
        chosen = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
        std::vector<int> idx(V);
        std::iota(idx.begin(), idx.end(), 0);
        const float mx = *std::max_element(logits.begin(), logits.end());
        std::vector<double> prob(V);
        for (int c = 0; c < V; ++c) prob[c] = std::exp(static_cast<double>((logits[c] - mx) / o_.temperature));
        if (o_.top_k > 0 || o_.top_p < 1.0f) {
            std::sort(idx.begin(), idx.end(), [&](int a, int b) { return prob[a] > prob[b]; });
            int k = o_.top_k > 0 ? std::min(V, o_.top_k) : V;
            if (o_.top_p_first) k = std::max(k, std::min(V, 3));  // its top-k keeps 3 as well
            // the nucleus's mass is measured over the top-k (llama.cpp-omni) or over all (reference)
            const int pool = o_.top_p_first ? V : k;
            double total = 0;
            for (int i = 0; i < pool; ++i) total += prob[idx[i]];
            double acc = 0;
            int n = 0;
            while (n < pool && (n < 3 || acc < o_.top_p * total)) acc += prob[idx[n++]];
            n = std::min(n, k);
            for (int i = n; i < V; ++i) prob[idx[i]] = 0.0;
        }
        double total = std::accumulate(prob.begin(), prob.end(), 0.0);
        std::uniform_real_distribution<double> u(0.0, total);
        double r = u(rng_), acc = 0.0;
        chosen = V - 1;
        for (int c = 0; c < V; ++c) {
            acc += prob[c];
            if (r < acc) {
                chosen = c;
                break;
            }
        }
    }
    history_.push_back(chosen);
    return chosen;
}

}  // namespace omni
