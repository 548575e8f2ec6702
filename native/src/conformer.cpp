#include "omni/conformer.h"

#include "conformer_cpu.h"
#include "ggml_weights.h"
#include "graph_util.h"
#include "omni/errors.h"
#include "omni/gguf_file.h"

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

namespace omni {

namespace {

constexpr int kLookahead = 3, kPreCache = 2, kUpCache = 4, kCnnCache = kPreCache + kUpCache;

int count_layers(const GgufFile & g, const std::string & prefix) {
    int n = 0;
    while (g.find_tensor(prefix + std::to_string(n) + ".self_attn.linear_q.weight")) ++n;
    return n;
}

}  // namespace

std::vector<float> rel_position_table(int d, int size) {
    std::vector<float> out(static_cast<size_t>(2 * size - 1) * d);
    const float neg_log = static_cast<float>(-(std::log(10000.0) / d));
    std::vector<float> div(d / 2);
    for (int i = 0; i < d / 2; ++i) div[i] = std::exp(static_cast<float>(2 * i) * neg_log);
    for (int k = 0; k < 2 * size - 1; ++k) {
        const float rel = static_cast<float>(size - 1 - k);
        float * row = out.data() + static_cast<size_t>(k) * d;
        for (int i = 0; i < d / 2; ++i) {
            const float a = rel * div[i];
            row[2 * i] = std::sin(a);
            row[2 * i + 1] = std::cos(a);
        }
    }
    return out;
}

struct ConformerEncoder::Impl : GraphModule {
    ConformerDims d;
    std::unique_ptr<ConformerCpu> native;
    Impl() : GraphModule("conformer", 1024) {}

    // Linear + LayerNorm (1e-5) + x sqrt(d): the LinearNoSubsampling input stage.
    ggml_tensor * embed(ggml_context * ctx, ggml_tensor * x, const std::string & p) const {
        x = linear(ctx, x, p + ".out.0");
        x = gu::layer_norm(ctx, x, 1e-5f, W(p + ".out.1.weight"), W(p + ".out.1.bias"));
        return ggml_scale(ctx, x, std::sqrt(static_cast<float>(d.d)));
    }

    // One conformer block with its K/V cache [2dh, Tc, H] (or null); returns the new cache.
    ggml_tensor * block(ggml_context * ctx, ggml_tensor * x, ggml_tensor * pos, ggml_tensor * cache,
                        const std::string & p, ggml_tensor ** new_cache) const {
        const int dh = d.d_head, H = d.heads;
        const int64_t T1 = x->ne[1];
        ggml_tensor * res = x;
        ggml_tensor * h = gu::layer_norm(ctx, x, 1e-12f, W(p + ".norm_mha.weight"), W(p + ".norm_mha.bias"));
        const std::string a = p + ".self_attn";
        auto per_head = [&](ggml_tensor * t) {  // [d, T] -> [dh, T, H]
            return ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_3d(ctx, t, dh, H, t->ne[1]), 0, 2, 1, 3));
        };
        ggml_tensor * q = ggml_reshape_3d(ctx, linear(ctx, h, a + ".linear_q"), dh, H, T1);
        ggml_tensor * k = per_head(linear(ctx, h, a + ".linear_k"));
        ggml_tensor * v = per_head(linear(ctx, h, a + ".linear_v"));
        if (cache) {
            const int64_t Tc = cache->ne[1];
            ggml_tensor * kc = ggml_view_3d(ctx, cache, dh, Tc, H, cache->nb[1], cache->nb[2], 0);
            ggml_tensor * vc = ggml_view_3d(ctx, cache, dh, Tc, H, cache->nb[1], cache->nb[2], dh * sizeof(float));
            k = ggml_concat(ctx, ggml_cont(ctx, kc), k, 1);
            v = ggml_concat(ctx, ggml_cont(ctx, vc), v, 1);
        }
        *new_cache = ggml_concat(ctx, k, v, 0);  // [2dh, T2, H]
        const int64_t T2 = k->ne[1];
        ggml_tensor * bias_u = ggml_reshape_3d(ctx, W(a + ".pos_bias_u"), dh, 1, H);
        ggml_tensor * bias_v = ggml_reshape_3d(ctx, W(a + ".pos_bias_v"), dh, 1, H);
        ggml_tensor * qh = ggml_cont(ctx, ggml_permute(ctx, q, 0, 2, 1, 3));  // [dh, T1, H]
        ggml_tensor * ac = ggml_mul_mat(ctx, k, ggml_add(ctx, qh, bias_u));  // [T2, T1, H]
        ggml_tensor * pp = per_head(linear(ctx, pos, a + ".linear_pos", false));  // [dh, P, H]
        ggml_tensor * bd = ggml_mul_mat(ctx, pp, ggml_add(ctx, qh, bias_v));  // [P, T1, H]
        const int64_t P = bd->ne[0];
        if (P != T2) {
            // ESPnet rel_shift: left-pad one zero column, read the buffer as (P+1, T1) rows,
            // drop the first row, and keep the first T2 columns.
            ggml_tensor * padded = ggml_pad_ext(ctx, bd, 1, 0, 0, 0, 0, 0, 0, 0);
            bd = ggml_cont(ctx,
                           ggml_view_3d(ctx, padded, T2, T1, H, P * sizeof(float), (P + 1) * T1 * sizeof(float),
                                        T1 * sizeof(float)));
        }
        ggml_tensor * att = ggml_soft_max_ext(ctx, ggml_add(ctx, ac, bd), nullptr, 1.0f / std::sqrt(float(dh)), 0.0f);
        ggml_tensor * vt = ggml_cont(ctx, ggml_permute(ctx, v, 1, 0, 2, 3));  // [T2, dh, H]
        ggml_tensor * o = ggml_mul_mat(ctx, vt, att);  // [dh, T1, H]
        o = ggml_reshape_2d(ctx, ggml_cont(ctx, ggml_permute(ctx, o, 0, 2, 1, 3)), dh * H, T1);
        x = ggml_add(ctx, res, linear(ctx, o, a + ".linear_out"));
        h = gu::layer_norm(ctx, x, 1e-12f, W(p + ".norm_ff.weight"), W(p + ".norm_ff.bias"));
        h = linear(ctx, ggml_silu(ctx, linear(ctx, h, p + ".feed_forward.w_1")), p + ".feed_forward.w_2");
        return ggml_add(ctx, x, h);
    }

    static constexpr int kChunkNodes = 4096;
    // One chunk's shape: T tokens in (T1 token-rate frames after the pre-lookahead layer), with
    // att_frames cached mel-rate frames (off1 token-rate ones); S1 and S2: the frames attended at
    // token and at mel rate.
    struct Chunk {
        int T, T1, att_frames, off1, S1, S2;
        bool last;
    };
    // The chunk graph, its inputs (in_att: null without a K/V cache) and outputs.
    struct ChunkGraph {
        ggml_cgraph * gf;
        ggml_tensor *in_x, *in_pos1, *in_pos2, *in_cnn, *in_att;
        ggml_tensor *x, *cnn_out;
        std::vector<ggml_tensor *> new_caches;  // per layer, [2dh, frames, H]
    };
    ChunkGraph build_chunk(ggml_context * ctx, const Chunk & c) const;
    ggml_tensor * pre_lookahead(ggml_context * ctx, ggml_tensor * x, ggml_tensor * in_cnn, int T1,
                                ggml_tensor ** new_pre_cache) const;
    ggml_tensor * upsample(ggml_context * ctx, ggml_tensor * x, ggml_tensor * in_cnn, int T1,
                           ggml_tensor ** new_up_cache) const;
    ggml_tensor * att_cache_view(ggml_context * ctx, ggml_tensor * in_att, int l, int frames) const;
    void set_inputs(const ChunkGraph & g, const Chunk & c, const float * xs, const float * cnn_cache,
                    const float * att_cache) const;
    ConformerChunk read_outputs(const ChunkGraph & g) const;
};

ConformerEncoder::ConformerEncoder(const std::string & path, std::shared_ptr<Backend> backend,
                                   std::shared_ptr<ThreadPool> pool, Token2MelImpl token2mel, bool bf16)
    : impl_(std::make_unique<Impl>()) {
    Impl & m = *impl_;
    GgufFile g(path);
    ConformerDims & d = m.d;
    const GgufTensorInfo & e0 = g.tensor("embed.out.0.weight");
    if (e0.ne.size() != 2) throw ModelFileError(path, "embed.out.0.weight must be 2-D");
    d.in = static_cast<int>(e0.ne[0]);
    d.d = static_cast<int>(e0.ne[1]);
    const GgufTensorInfo & pu = g.tensor("encoders.0.self_attn.pos_bias_u");
    d.d_head = static_cast<int>(pu.ne[0]);
    d.heads = static_cast<int>(pu.ne.size() > 1 ? pu.ne[1] : 1);
    d.ff = static_cast<int>(g.tensor("encoders.0.feed_forward.w_1.weight").ne[1]);
    d.blocks = count_layers(g, "encoders.");
    d.up_blocks = count_layers(g, "up_encoders.");
    if (d.heads * d.d_head != d.d || d.blocks == 0) throw ModelFileError(path, "inconsistent conformer dimensions");
    token2mel = resolve_token2mel_impl(token2mel, backend->is_cpu());
    if (bf16 && token2mel != Token2MelImpl::Native)
        throw InvalidArgument("bf16 needs the native CPU code (token2mel='native')");
    if (token2mel == Token2MelImpl::Native) {
        if (!pool) pool = std::make_shared<ThreadPool>(std::max(1, backend->threads()));
        m.native = std::make_unique<ConformerCpu>(g, d, std::move(pool), bf16);
        m.backend = std::move(backend);
        return;
    }

    const int D = d.d;
    auto conv = [&](const std::string & p, int k) {
        m.w.add_conv_taps(g, p + ".weight", D, D, k);
        m.w.add(g, p + ".bias", {D});
    };
    auto layer = [&](const std::string & p) {
        const std::string a = p + ".self_attn";
        m.w.add(g, a + ".pos_bias_u", {d.d_head, d.heads});
        m.w.add(g, a + ".pos_bias_v", {d.d_head, d.heads});
        m.w.add_linear(g, a + ".linear_q", D, D);
        m.w.add_linear(g, a + ".linear_k", D, D);
        m.w.add_linear(g, a + ".linear_v", D, D);
        m.w.add_linear(g, a + ".linear_out", D, D);
        m.w.add_linear(g, a + ".linear_pos", D, D, false);
        m.w.add_linear(g, p + ".feed_forward.w_1", D, d.ff);
        m.w.add_linear(g, p + ".feed_forward.w_2", d.ff, D);
        m.w.add_norm(g, p + ".norm_ff", D);
        m.w.add_norm(g, p + ".norm_mha", D);
    };
    m.w.add_linear(g, "embed.out.0", d.in, D);
    m.w.add_norm(g, "embed.out.1", D);
    m.w.add_norm(g, "after_norm", D);
    conv("pre_lookahead_layer.conv1", kLookahead + 1);
    conv("pre_lookahead_layer.conv2", 3);
    for (int i = 0; i < d.blocks; ++i) layer("encoders." + std::to_string(i));
    conv("up_layer.conv", 5);
    m.w.add_linear(g, "up_embed.out.0", D, D);
    m.w.add_norm(g, "up_embed.out.1", D);
    for (int i = 0; i < d.up_blocks; ++i) layer("up_encoders." + std::to_string(i));
    m.finish_loading(std::move(backend));
}

ConformerEncoder::~ConformerEncoder() = default;

const ConformerDims & ConformerEncoder::dims() const { return impl_->d; }
Token2MelImpl ConformerEncoder::token2mel() const {
    return impl_->native ? Token2MelImpl::Native : Token2MelImpl::Graph;
}
size_t ConformerEncoder::weight_bytes() const {
    return impl_->native ? impl_->native->weight_bytes() : impl_->w.bytes();
}

// Built in the reference's order: the input embedding, the pre-lookahead layer, the token-rate
// blocks, the x2 upsampling, the mel-rate blocks and the final norm; the graph itself comes last.
ConformerEncoder::Impl::ChunkGraph ConformerEncoder::Impl::build_chunk(ggml_context * ctx, const Chunk & c) const {
    const int D = d.d, L = d.blocks + d.up_blocks, dh2 = 2 * d.d_head;
    ChunkGraph g{};
    g.in_x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d.in, c.T);
    g.in_pos1 = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, 2 * c.S1 - 1);
    g.in_pos2 = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, 2 * c.S2 - 1);
    g.in_cnn = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, kCnnCache);
    g.in_att = c.att_frames ? ggml_new_tensor_4d(ctx, GGML_TYPE_F32, dh2, c.att_frames, d.heads, L) : nullptr;
    for (ggml_tensor * t : {g.in_x, g.in_pos1, g.in_pos2, g.in_cnn}) ggml_set_input(t);
    if (g.in_att) ggml_set_input(g.in_att);

    ggml_tensor * x = embed(ctx, g.in_x, "embed");  // [D, T]
    if (c.last) x = ggml_pad_ext(ctx, x, 0, 0, 0, kLookahead, 0, 0, 0, 0);
    ggml_tensor * new_pre_cache = nullptr;
    x = pre_lookahead(ctx, x, g.in_cnn, c.T1, &new_pre_cache);
    for (int i = 0; i < d.blocks; ++i) {
        // The first half of the tiled time axis holds this layer's token-rate frames.
        ggml_tensor * cache = g.in_att ? att_cache_view(ctx, g.in_att, i, c.off1) : nullptr;
        ggml_tensor * nc = nullptr;
        x = block(ctx, x, g.in_pos1, cache, "encoders." + std::to_string(i), &nc);
        g.new_caches.push_back(ggml_concat(ctx, nc, nc, 1));  // tiled to the mel-rate length
    }
    ggml_tensor * new_up_cache = nullptr;
    x = embed(ctx, upsample(ctx, x, g.in_cnn, c.T1, &new_up_cache), "up_embed");
    for (int i = 0; i < d.up_blocks; ++i) {
        ggml_tensor * cache = g.in_att ? att_cache_view(ctx, g.in_att, d.blocks + i, c.att_frames) : nullptr;
        ggml_tensor * nc = nullptr;
        x = block(ctx, x, g.in_pos2, cache, "up_encoders." + std::to_string(i), &nc);
        g.new_caches.push_back(nc);
    }
    g.x = gu::layer_norm(ctx, x, 1e-5f, W("after_norm.weight"), W("after_norm.bias"));
    g.cnn_out = ggml_concat(ctx, new_pre_cache, new_up_cache, 1);  // [D, 6]
    for (ggml_tensor * t : {g.x, g.cnn_out}) ggml_set_output(t);
    for (ggml_tensor * t : g.new_caches) ggml_set_output(t);  // copied out one layer at a time

    g.gf = ggml_new_graph_custom(ctx, kChunkNodes, false);
    ggml_build_forward_expand(g.gf, g.x);
    ggml_build_forward_expand(g.gf, g.cnn_out);
    for (ggml_tensor * t : g.new_caches) ggml_build_forward_expand(g.gf, t);
    return g;
}

// Pre-lookahead: conv1 (k=4, no padding) + leaky ReLU, then conv2 (k=3) over 2 cached frames,
// added to the first T1 input frames. *new_pre_cache: conv1's last 2 output frames.
ggml_tensor * ConformerEncoder::Impl::pre_lookahead(ggml_context * ctx, ggml_tensor * x, ggml_tensor * in_cnn, int T1,
                                                    ggml_tensor ** new_pre_cache) const {
    ggml_tensor * c1 =
        ggml_leaky_relu(ctx,
                        gu::conv_valid(ctx, x, w.taps("pre_lookahead_layer.conv1.weight", kLookahead + 1),
                                       W("pre_lookahead_layer.conv1.bias")),
                        0.01f, false);
    ggml_tensor * pre_cache = gu::frames(ctx, in_cnn, 0, kPreCache);
    *new_pre_cache = gu::frames(ctx, c1, T1 - kPreCache, kPreCache);
    ggml_tensor * c2 =
        gu::conv_valid(ctx, ggml_concat(ctx, pre_cache, c1, 1), w.taps("pre_lookahead_layer.conv2.weight", 3),
                       W("pre_lookahead_layer.conv2.bias"));
    return ggml_add(ctx, c2, gu::frames(ctx, x, 0, T1));
}

// Nearest x2 upsampling, then conv (k=5) over 4 cached frames. *new_up_cache: the conv's last 4
// input frames.
ggml_tensor * ConformerEncoder::Impl::upsample(ggml_context * ctx, ggml_tensor * x, ggml_tensor * in_cnn, int T1,
                                               ggml_tensor ** new_up_cache) const {
    const int D = d.d;
    ggml_tensor * up = ggml_reshape_2d(
        ctx, ggml_repeat(ctx, ggml_reshape_3d(ctx, x, D, 1, T1), ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, 2, T1)), D,
        2 * T1);
    ggml_tensor * up_in = ggml_concat(ctx, gu::frames(ctx, in_cnn, kPreCache, kUpCache), up, 1);
    *new_up_cache = gu::frames(ctx, up_in, up_in->ne[1] - kUpCache, kUpCache);
    return gu::conv_valid(ctx, up_in, w.taps("up_layer.conv.weight", 5), W("up_layer.conv.bias"));
}

// Layer l's K/V cache, its first `frames` frames, as a tensor of its own: [2dh, frames, H].
ggml_tensor * ConformerEncoder::Impl::att_cache_view(ggml_context * ctx, ggml_tensor * in_att, int l,
                                                     int frames) const {
    return ggml_cont(
        ctx, ggml_view_3d(ctx, in_att, 2 * d.d_head, frames, d.heads, in_att->nb[1], in_att->nb[2], l * in_att->nb[3]));
}

// The chunk's tokens, both position tables, and the caches (zeros for a missing conv cache).
void ConformerEncoder::Impl::set_inputs(const ChunkGraph & g, const Chunk & c, const float * xs,
                                        const float * cnn_cache, const float * att_cache) const {
    const int D = d.d;
    ggml_backend_tensor_set(g.in_x, xs, 0, ggml_nbytes(g.in_x));
    const auto pos1 = rel_position_table(D, c.S1), pos2 = rel_position_table(D, c.S2);
    ggml_backend_tensor_set(g.in_pos1, pos1.data(), 0, ggml_nbytes(g.in_pos1));
    ggml_backend_tensor_set(g.in_pos2, pos2.data(), 0, ggml_nbytes(g.in_pos2));
    std::vector<float> zeros;
    if (!cnn_cache) zeros.assign(static_cast<size_t>(D) * kCnnCache, 0.0f);
    ggml_backend_tensor_set(g.in_cnn, cnn_cache ? cnn_cache : zeros.data(), 0, ggml_nbytes(g.in_cnn));
    if (g.in_att) ggml_backend_tensor_set(g.in_att, att_cache, 0, ggml_nbytes(g.in_att));
}

// The output frames, the conv caches and every layer's K/V cache, layer after layer.
ConformerChunk ConformerEncoder::Impl::read_outputs(const ChunkGraph & g) const {
    ConformerChunk out;
    out.frames = static_cast<int>(g.x->ne[1]);
    out.h.resize(ggml_nelements(g.x));
    ggml_backend_tensor_get(g.x, out.h.data(), 0, ggml_nbytes(g.x));
    out.cnn_cache.resize(ggml_nelements(g.cnn_out));
    ggml_backend_tensor_get(g.cnn_out, out.cnn_cache.data(), 0, ggml_nbytes(g.cnn_out));
    out.att_frames = static_cast<int>(g.new_caches[0]->ne[1]);
    const size_t per_layer = static_cast<size_t>(ggml_nelements(g.new_caches[0]));
    out.att_cache.resize(per_layer * g.new_caches.size());
    for (size_t i = 0; i < g.new_caches.size(); ++i)
        ggml_backend_tensor_get(g.new_caches[i], out.att_cache.data() + i * per_layer, 0, per_layer * sizeof(float));
    return out;
}

ConformerChunk ConformerEncoder::forward_chunk(const float * xs, int T, bool last_chunk, const float * cnn_cache,
                                               const float * att_cache, int att_frames) {
    Impl & m = *impl_;
    const int T_in = T + (last_chunk ? kLookahead : 0);
    if (T < 1 || T_in <= kLookahead || T > 4096) {
        throw InvalidArgument("conformer chunk needs more than " + std::to_string(kLookahead) +
                              " tokens (look-ahead included), got " + std::to_string(T));
    }
    if (att_cache && (att_frames <= 0 || att_frames % 2 != 0))
        throw InvalidArgument("att_frames must be even and positive");
    if (!att_cache) att_frames = 0;
    if (m.native) return m.native->forward_chunk(xs, T, last_chunk, cnn_cache, att_cache, att_frames);
    std::lock_guard<std::mutex> lock(m.mutex);

    Impl::Chunk c{};
    c.T = T;
    c.last = last_chunk;
    c.att_frames = att_frames;
    c.T1 = T_in - kLookahead;  // token-rate frames out of the pre-lookahead layer
    c.off1 = att_frames / 2;  // cached token-rate frames
    c.S1 = c.off1 + c.T1;
    c.S2 = c.off1 * 2 + 2 * c.T1;
    ggml_init_params p{
        ggml_tensor_overhead() * Impl::kChunkNodes + ggml_graph_overhead_custom(Impl::kChunkNodes, false), nullptr,
        true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> holder(ggml_init(p), ggml_free);
    const Impl::ChunkGraph g = m.build_chunk(holder.get(), c);
    if (!ggml_gallocr_alloc_graph(m.galloc, g.gf)) throw DeviceError("cannot allocate the conformer graph");
    m.set_inputs(g, c, xs, cnn_cache, att_cache);
    m.compute(g.gf, "chunk");
    return m.read_outputs(g);
}

}  // namespace omni
