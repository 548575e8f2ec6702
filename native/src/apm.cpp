#include "omni/apm.h"

#include "ggml_weights.h"
#include "graph_util.h"
#include "omni/errors.h"
#include "omni/gguf_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace omni {

// Streaming: per-layer K and V of every position encoded since the last reset, resident on the
// device ([d_model, positions] each; F16 unless exact), as llama.cpp-omni keeps them. Each Apm
// (new_stream: a session slot's) has its own; the weights are shared.
struct Apm::Stream {
    ggml_context * cache_ctx = nullptr;
    ggml_backend_buffer_t cache_buf = nullptr;
    std::vector<ggml_tensor *> k_cache, v_cache;
    int pos = 0, resets = 0;
    int chunks = 0;  // chunks since the last reset (the chunk-count rule's position)
    std::vector<char> written;  // rows written since the last reset; the others must read as zeros

    void reset() {
        pos = chunks = 0;
        std::fill(written.begin(), written.end(), 0);
    }

    ~Stream() {
        if (cache_buf) ggml_backend_buffer_free(cache_buf);
        if (cache_ctx) ggml_free(cache_ctx);
    }
};

struct Apm::Impl : GraphModule {
    ApmDims d;
    std::vector<float> filters;  // (n_mel, n_fft_bins)
    bool exact = false;
    bool tanh_gelu = false;
    bool f16_conv_input = false;

    Impl() : GraphModule("apm", 1024) {}
    void ensure_cache(Stream & s);
    // stream null: a whole clip on its own; else a chunk of that stream. chunk > 0 (a clip
    // only): each position attends to its block of `chunk` positions and every block before it.
    std::vector<float> encode(const float * mel, int frames, int * tokens_out, Stream * stream, int chunk = 0,
                              bool chunk_count = false);
    // Where a streaming chunk of T positions goes: its first position (the history's rule), after
    // clearing the history when the chunk would pass the position table.
    int stream_offset(Stream & s, int T, bool chunk_count) const;
    // Zeros the cache rows of [0, end) that no chunk wrote since the last reset, except [skip, end).
    void zero_unwritten(Stream & s, int end, int skip) const;

    static constexpr int kEncodeNodes = 4096;
    // One encode call: `frames` mel frames give T positions at offset `off` of the position table;
    // Tk positions are attended (a stream's history and this chunk); stream null for a clip.
    struct EncodeCall {
        int frames, T, off, Tk, chunk;
        Stream * stream;
    };
    // The encode graph and the tensors a call fills and reads (mask: null without chunking).
    struct EncodeGraph {
        ggml_cgraph * gf;
        ggml_tensor *in, *mask, *out;
    };
    EncodeGraph build_encode(ggml_context * ctx, const EncodeCall & c) const;
    ggml_tensor * conv_stem(ggml_context * ctx, ggml_tensor * in, int T) const;
    ggml_tensor * layer(ggml_context * ctx, ggml_cgraph * gf, const EncodeCall & c, int i, ggml_tensor * x,
                        ggml_tensor * mask) const;
    ggml_tensor * project_and_pool(ggml_context * ctx, ggml_tensor * x, int n_tok) const;
    // The GELU: the reference's (erf), or the tanh approximation when asked (set_tanh_gelu).
    ggml_tensor * gelu(ggml_context * ctx, ggml_tensor * t) const {
        return tanh_gelu ? ggml_gelu(ctx, t) : ggml_gelu_erf(ctx, t);
    }
    // A conv's input, rounded to F16 when asked (set_f16_conv_input).
    ggml_tensor * conv_input(ggml_context * ctx, ggml_tensor * t) const {
        return f16_conv_input ? ggml_cast(ctx, ggml_cast(ctx, t, GGML_TYPE_F16), GGML_TYPE_F32) : t;
    }
};

namespace {

// (n_mel, frames) -> frames as rows, the graph's input layout.
std::vector<float> frames_as_rows(const float * mel, int n_mel, int frames) {
    std::vector<float> rows(static_cast<size_t>(n_mel) * frames);
    for (int b = 0; b < n_mel; ++b)
        for (int t = 0; t < frames; ++t)
            rows[static_cast<size_t>(t) * n_mel + b] = mel[static_cast<size_t>(b) * frames + t];
    return rows;
}

// The [T][T] block-causal mask of blocks of `chunk` positions: 0 where the key's block is at or
// before the query's, -inf elsewhere.
std::vector<float> block_causal_mask(int T, int chunk) {
    std::vector<float> blocked(static_cast<size_t>(T) * T);
    for (int qi = 0; qi < T; ++qi)
        for (int ki = 0; ki < T; ++ki)
            blocked[static_cast<size_t>(qi) * T + ki] = ki / chunk <= qi / chunk ? 0.0f : -INFINITY;
    return blocked;
}

}  // namespace

int Apm::Impl::stream_offset(Stream & s, int T, bool chunk_count) const {
    const bool full = chunk_count ? s.chunks >= d.positions / T : s.pos + T > d.positions;
    if (full) {
        s.reset();
        ++s.resets;
    }
    return chunk_count ? s.chunks * T : s.pos;
}

void Apm::Impl::zero_unwritten(Stream & s, int end, int skip) const {
    for (int r = 0; r < skip;) {
        if (s.written[r]) {
            ++r;
            continue;
        }
        int e = r;
        while (e < skip && !s.written[e]) s.written[e++] = 1;
        for (auto * caches : {&s.k_cache, &s.v_cache})
            for (ggml_tensor * t : *caches) ggml_backend_tensor_memset(t, 0, r * t->nb[1], (e - r) * t->nb[1]);
        r = e;
    }
    std::fill(s.written.begin() + skip, s.written.begin() + end, 1);
}

void Apm::Impl::ensure_cache(Stream & s) {
    if (s.cache_buf) return;
    ggml_init_params p{ggml_tensor_overhead() * (2 * d.layers + 1), nullptr, true};
    s.cache_ctx = ggml_init(p);
    const ggml_type t = exact ? GGML_TYPE_F32 : GGML_TYPE_F16;
    for (int i = 0; i < d.layers; ++i) {
        s.k_cache.push_back(ggml_new_tensor_2d(s.cache_ctx, t, d.d_model, d.positions));
        s.v_cache.push_back(ggml_new_tensor_2d(s.cache_ctx, t, d.d_model, d.positions));
    }
    s.cache_buf = ggml_backend_alloc_ctx_tensors(s.cache_ctx, backend->get());
    if (!s.cache_buf)
        throw DeviceError("cannot allocate the audio encoder's streaming cache on " + backend->device().id);
    s.written.assign(d.positions, 0);
}

Apm::Apm(std::shared_ptr<Impl> impl) : impl_(std::move(impl)), stream_(std::make_unique<Stream>()) {}

std::unique_ptr<Apm> Apm::new_stream() const { return std::unique_ptr<Apm>(new Apm(impl_)); }

size_t Apm::stream_bytes() const {
    const ApmDims & d = impl_->d;
    return 2 * static_cast<size_t>(d.layers) * d.d_model * d.positions * (impl_->exact ? 4 : 2);
}

Apm::Apm(const std::string & path, const std::string & device, int threads, bool exact)
    : impl_(std::make_shared<Impl>()), stream_(std::make_unique<Stream>()) {
    Impl & m = *impl_;
    m.w.keep_f16 = !exact;
    m.exact = exact;
    GgufFile g(path);
    if (g.get_string("general.architecture") != "whisper")
        throw ModelFileError(path, "not an audio encoder file (architecture is not 'whisper')");
    ApmDims & d = m.d;
    d.d_model = static_cast<int>(g.get_int("d_model"));
    d.heads = static_cast<int>(g.get_int("encoder_attention_heads"));
    d.layers = static_cast<int>(g.get_int("encoder_layers"));
    d.n_mel = g.has_key("n_mel") ? static_cast<int>(g.get_int("n_mel")) : 80;
    d.n_fft_bins = g.has_key("n_fft") ? static_cast<int>(g.get_int("n_fft")) : 201;
    d.pool = g.has_key("audio_pool_step") ? static_cast<int>(g.get_int("audio_pool_step")) : 5;
    const GgufValue & f = g.value("filters");
    if (f.type != GgufValue::Type::ARRAY || f.floats.size() != static_cast<size_t>(d.n_mel) * d.n_fft_bins ||
        d.n_fft_bins != kNfft / 2 + 1) {
        throw ModelFileError(path, "'filters' must hold n_mel x 201 floats (a mel filter bank for n_fft 400)");
    }
    m.filters.assign(f.floats.begin(), f.floats.end());
    const GgufTensorInfo & pos = g.tensor("encoder.positional_embedding");
    d.positions = static_cast<int>(pos.ne[1]);
    d.ff = static_cast<int>(g.tensor("encoder.blocks.0.mlp.0.weight").ne[1]);
    d.llm_embd = static_cast<int>(g.tensor("audio_projector.linear1.weight").ne[1]);
    if (d.heads <= 0 || d.d_model % d.heads) throw ModelFileError(path, "d_model is not divisible by the head count");
    const int D = d.d_model;
    m.w.add_conv_taps(g, "encoder.conv1.weight", d.n_mel, D, 3);
    m.w.add_conv_taps(g, "encoder.conv2.weight", D, D, 3);
    m.w.add(g, "encoder.conv1.bias", {D});
    m.w.add(g, "encoder.conv2.bias", {D});
    m.w.add(g, "encoder.positional_embedding", {D, d.positions});
    for (int i = 0; i < d.layers; ++i) {
        const std::string b = "encoder.blocks." + std::to_string(i);
        m.w.add_norm(g, b + ".attn_ln", D);
        m.w.add_linear(g, b + ".attn.query", D, D);
        m.w.add_linear(g, b + ".attn.key", D, D, false);
        m.w.add_linear(g, b + ".attn.value", D, D);
        m.w.add_linear(g, b + ".attn.out", D, D);
        m.w.add_norm(g, b + ".mlp_ln", D);
        m.w.add_linear(g, b + ".mlp.0", D, d.ff);
        m.w.add_linear(g, b + ".mlp.2", d.ff, D);
    }
    m.w.add_norm(g, "encoder.ln_post", D);
    m.w.add_linear(g, "audio_projector.linear1", D, d.llm_embd);
    m.w.add_linear(g, "audio_projector.linear2", d.llm_embd, d.llm_embd);
    m.finish_loading(std::make_shared<Backend>(device, threads));
}

Apm::~Apm() = default;
void Apm::set_tanh_gelu(bool on) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->tanh_gelu = on;
}
bool Apm::tanh_gelu() const { return impl_->tanh_gelu; }
void Apm::set_f16_conv_input(bool on) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->f16_conv_input = on;
}
bool Apm::f16_conv_input() const { return impl_->f16_conv_input; }
const ApmDims & Apm::dims() const { return impl_->d; }

std::vector<float> Apm::log_mel(const float * x, int n, int * frames_out, bool zero_tail) const {
    const ApmDims & d = impl_->d;
    if (n < kNfft / 2 + 1) throw InvalidArgument("audio is too short (need at least 201 samples)");
    const int frames = n / kHop;  // center=True gives n/hop + 1; Whisper drops the last one
    const int bins = kNfft / 2 + 1;
    std::vector<float> window(kNfft);
    for (int i = 0; i < kNfft; ++i) window[i] = 0.5f - 0.5f * std::cos(2.0f * static_cast<float>(M_PI) * i / kNfft);
    auto at = [&](int i) {  // reflect padding of n_fft/2 (zeros at the end with zero_tail)
        if (i < 0) i = -i;
        if (i >= n) {
            if (zero_tail) return 0.0f;
            i = 2 * (n - 1) - i;
        }
        return x[i];
    };
    std::vector<double> cs(static_cast<size_t>(bins) * kNfft), sn(cs.size());
    for (int k = 0; k < bins; ++k)
        for (int t = 0; t < kNfft; ++t) {
            const double a = 2.0 * M_PI * k * t / kNfft;
            cs[static_cast<size_t>(k) * kNfft + t] = std::cos(a);
            sn[static_cast<size_t>(k) * kNfft + t] = std::sin(a);
        }
    std::vector<float> mel(static_cast<size_t>(d.n_mel) * frames);
    std::vector<double> buf(kNfft), power(bins);
    for (int f = 0; f < frames; ++f) {
        for (int t = 0; t < kNfft; ++t) buf[t] = static_cast<double>(window[t]) * at(f * kHop + t - kNfft / 2);
        for (int k = 0; k < bins; ++k) {
            double re = 0, im = 0;
            const double * c = cs.data() + static_cast<size_t>(k) * kNfft;
            const double * s = sn.data() + static_cast<size_t>(k) * kNfft;
            for (int t = 0; t < kNfft; ++t) {
                re += buf[t] * c[t];
                im -= buf[t] * s[t];
            }
            power[k] = re * re + im * im;
        }
        for (int b = 0; b < d.n_mel; ++b) {
            double acc = 0;
            const float * fb = impl_->filters.data() + static_cast<size_t>(b) * bins;
            for (int k = 0; k < bins; ++k) acc += fb[k] * power[k];
            mel[static_cast<size_t>(b) * frames + f] = static_cast<float>(std::log10(std::max(acc, 1e-10)));
        }
    }
    const float mx = *std::max_element(mel.begin(), mel.end());
    for (float & v : mel) v = (std::max(v, mx - 8.0f) + 4.0f) / 4.0f;
    if (frames_out) *frames_out = frames;
    return mel;
}

std::vector<float> Apm::encode_mel(const float * mel, int frames, int * tokens_out, int chunk) {
    if (chunk < 0) throw InvalidArgument("chunk must be 0 (full attention) or a positive block size");
    std::lock_guard<std::mutex> lock(impl_->mutex);
    return impl_->encode(mel, frames, tokens_out, nullptr, chunk);
}

std::vector<float> Apm::encode_mel_streaming(const float * mel, int frames, int * tokens_out, bool chunk_count) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->ensure_cache(*stream_);
    return impl_->encode(mel, frames, tokens_out, stream_.get(), 0, chunk_count);
}

void Apm::reset_stream() {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    stream_->reset();
}

int Apm::stream_position() const { return stream_->pos; }
int Apm::stream_resets() const { return stream_->resets; }

// Built in the reference's order: the conv stem, the positions, the layers (a streaming chunk's
// K/V written into the history before the attention that reads it), the projector and pooling.
Apm::Impl::EncodeGraph Apm::Impl::build_encode(ggml_context * ctx, const EncodeCall & c) const {
    EncodeGraph g{};
    g.gf = ggml_new_graph_custom(ctx, kEncodeNodes, false);
    g.in = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d.n_mel, c.frames);  // frames as rows
    ggml_set_input(g.in);
    ggml_tensor * x = conv_stem(ctx, g.in, c.T);
    // The block-causal mask of a chunked clip: key block <= query block, as the reference's
    // subsequent_chunk_mask with every left block kept.
    g.mask = nullptr;
    if (c.chunk > 0 && !c.stream && c.chunk < c.T) {
        g.mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, c.T, c.T);
        ggml_set_input(g.mask);
    }
    ggml_tensor * pos = W("encoder.positional_embedding");
    x = ggml_add(ctx, x, ggml_view_2d(ctx, pos, d.d_model, c.T, pos->nb[1], static_cast<size_t>(c.off) * pos->nb[1]));
    for (int i = 0; i < d.layers; ++i) x = layer(ctx, g.gf, c, i, x, g.mask);
    x = gu::layer_norm(ctx, x, 1e-5f, W("encoder.ln_post.weight"), W("encoder.ln_post.bias"));
    g.out = project_and_pool(ctx, x, c.T / d.pool);
    ggml_set_output(g.out);
    ggml_build_forward_expand(g.gf, g.out);
    return g;
}

// conv1 (k3, pad 1) + GELU, conv2 (k3, stride 2, pad 1) + GELU: stride 2 = every other output.
ggml_tensor * Apm::Impl::conv_stem(ggml_context * ctx, ggml_tensor * in, int T) const {
    ggml_tensor * x = gelu(ctx,
                           gu::conv_valid(ctx, ggml_pad_ext(ctx, conv_input(ctx, in), 0, 0, 1, 1, 0, 0, 0, 0),
                                          w.taps("encoder.conv1.weight", 3), W("encoder.conv1.bias")));
    ggml_tensor * c2 = gu::conv_valid(ctx, ggml_pad_ext(ctx, conv_input(ctx, x), 0, 0, 1, 1, 0, 0, 0, 0),
                                      w.taps("encoder.conv2.weight", 3), W("encoder.conv2.bias"));
    return gelu(ctx, ggml_cont(ctx, ggml_view_2d(ctx, c2, d.d_model, T, 2 * c2->nb[1], 0)));
}

// Encoder layer i: pre-norm self-attention, then the pre-norm GELU MLP, each added back. A
// streaming chunk stores its K/V at its offset, then attends over the whole history.
ggml_tensor * Apm::Impl::layer(ggml_context * ctx, ggml_cgraph * gf, const EncodeCall & c, int i, ggml_tensor * x,
                               ggml_tensor * mask) const {
    const int D = d.d_model, H = d.heads, hd = D / H, T = c.T, Tk = c.Tk;
    const std::string b = "encoder.blocks." + std::to_string(i);
    ggml_tensor * h = gu::layer_norm(ctx, x, 1e-5f, W(b + ".attn_ln.weight"), W(b + ".attn_ln.bias"));
    auto heads = [&](ggml_tensor * t, int n) {  // [D, n] -> [hd, n, H]
        return ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_3d(ctx, t, hd, H, n), 0, 2, 1, 3));
    };
    ggml_tensor * key = linear(ctx, h, b + ".attn.key", false);
    ggml_tensor * value = linear(ctx, h, b + ".attn.value");
    if (c.stream) {
        ggml_tensor * kc = c.stream->k_cache[i];
        ggml_tensor * vc = c.stream->v_cache[i];
        for (auto [src, cache] : {std::pair{key, kc}, std::pair{value, vc}}) {
            ggml_build_forward_expand(
                gf,
                ggml_cpy(ctx, src,
                         ggml_view_2d(ctx, cache, D, T, cache->nb[1], static_cast<size_t>(c.off) * cache->nb[1])));
        }
        key = ggml_view_2d(ctx, kc, D, Tk, kc->nb[1], 0);
        value = ggml_view_2d(ctx, vc, D, Tk, vc->nb[1], 0);
    }
    ggml_tensor * q = heads(linear(ctx, h, b + ".attn.query"), T);
    ggml_tensor * k = heads(key, Tk);
    ggml_tensor * vt =
        ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_3d(ctx, value, hd, H, Tk), 1, 2, 0, 3));  // [Tk, hd, H]
    ggml_tensor * att = ggml_soft_max_ext(ctx, ggml_mul_mat(ctx, k, q), mask, 1.0f / std::sqrt(float(hd)), 0.0f);
    ggml_tensor * o = ggml_cont(ctx, ggml_permute(ctx, ggml_mul_mat(ctx, vt, att), 0, 2, 1, 3));  // [hd, H, T]
    x = ggml_add(ctx, x, linear(ctx, ggml_reshape_2d(ctx, o, D, T), b + ".attn.out"));
    h = gu::layer_norm(ctx, x, 1e-5f, W(b + ".mlp_ln.weight"), W(b + ".mlp_ln.bias"));
    return ggml_add(ctx, x, linear(ctx, gelu(ctx, linear(ctx, h, b + ".mlp.0")), b + ".mlp.2"));
}

// The projector (linear, ReLU, linear), then average pooling by `pool` frames as a sum of
// strided views (CANN has no POOL_1D): [llm_embd, n_tok].
ggml_tensor * Apm::Impl::project_and_pool(ggml_context * ctx, ggml_tensor * x, int n_tok) const {
    x = linear(ctx, ggml_relu(ctx, linear(ctx, x, "audio_projector.linear1")), "audio_projector.linear2");
    ggml_tensor * pooled = nullptr;
    for (int j = 0; j < d.pool; ++j) {
        ggml_tensor * v = ggml_view_2d(ctx, x, d.llm_embd, n_tok, d.pool * x->nb[1], j * x->nb[1]);
        pooled = pooled ? ggml_add(ctx, pooled, v) : ggml_cont(ctx, v);
    }
    return ggml_scale(ctx, pooled, 1.0f / d.pool);
}

std::vector<float> Apm::Impl::encode(const float * mel, int frames, int * tokens_out, Stream * stream, int chunk,
                                     bool chunk_count) {
    const bool streaming = stream != nullptr;
    const int T = (frames + 1) / 2;  // conv2 stride 2, padding 1
    if (T < d.pool || T > d.positions) {  // one pooled row at least: 2 * pool - 1 frames
        throw InvalidArgument("the audio encoder takes " + std::to_string(2 * d.pool - 1) + " to " +
                              std::to_string(2 * d.positions) + " mel frames (0.09 to 30 s), got " +
                              std::to_string(frames));
    }
    // A chunk that would run past the position table starts a new window (llama.cpp-omni's
    // "30 s limit"): history is dropped, never overflowed.
    const int off = streaming ? stream_offset(*stream, T, chunk_count) : 0, Tk = off + T;
    if (streaming) zero_unwritten(*stream, Tk, off);
    ggml_init_params p{ggml_tensor_overhead() * kEncodeNodes + ggml_graph_overhead_custom(kEncodeNodes, false), nullptr,
                       true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> holder(ggml_init(p), ggml_free);
    const EncodeGraph g = build_encode(holder.get(), EncodeCall{frames, T, off, Tk, chunk, stream});
    if (!ggml_gallocr_alloc_graph(galloc, g.gf)) throw DeviceError("cannot allocate the audio encoder graph");
    const std::vector<float> rows = frames_as_rows(mel, d.n_mel, frames);
    ggml_backend_tensor_set(g.in, rows.data(), 0, ggml_nbytes(g.in));
    if (g.mask) {
        const std::vector<float> blocked = block_causal_mask(T, chunk);
        ggml_backend_tensor_set(g.mask, blocked.data(), 0, ggml_nbytes(g.mask));
    }
    compute(g.gf, streaming ? "encode_stream" : "encode");
    const int n_tok = T / d.pool;
    std::vector<float> out(static_cast<size_t>(d.llm_embd) * n_tok);
    ggml_backend_tensor_get(g.out, out.data(), 0, ggml_nbytes(g.out));
    if (tokens_out) *tokens_out = n_tok;
    if (streaming) {
        stream->pos = Tk;
        ++stream->chunks;
    }
    return out;
}

}  // namespace omni
