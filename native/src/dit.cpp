#include "omni/dit.h"

#include "dit_cpu.h"
#include "dit_state.h"
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

constexpr int kFreqDim = 256;  // sinusoidal timestep embedding width
constexpr float kTimeScale = 1000.0f;
constexpr int kGraphNodes = 16384;  // 16 blocks x ~400 nodes each, with room
constexpr int kFramePad = 16;  // attention lengths are padded to a multiple of this

int count_blocks(const GgufFile & g, const std::string & prefix) {
    int n = 0;
    while (g.find_tensor(prefix + std::to_string(n) + ".attn.to_q.weight")) ++n;
    return n;
}

}  // namespace

std::vector<float> keep_head_tail(const std::vector<float> & v, size_t slabs, int frames, int row, int head, int tail) {
    const int keep = head + tail;
    std::vector<float> out(slabs * static_cast<size_t>(keep) * row);
    for (size_t s = 0; s < slabs; ++s) {
        const float * src = v.data() + s * frames * row;
        float * dst = out.data() + s * keep * row;
        std::copy_n(src, static_cast<size_t>(head) * row, dst);
        std::copy_n(src + static_cast<size_t>(frames - tail) * row, static_cast<size_t>(tail) * row,
                    dst + static_cast<size_t>(head) * row);
    }
    return out;
}

namespace {

int round16(int n) { return (n + kFramePad - 1) / kFramePad * kFramePad; }

// After a call on a resident cache: it now holds T2 frames (bounded next call).
void finish_call(DitDeviceState & dev, DitCache & cache, int T2) {
    dev.stored = T2;
    int logical = 0;
    for (auto & r : kept_ranges(T2, cache.keep_head, cache.keep_tail)) logical += r.second;
    cache.att_frames = logical;
}

// The estimator's input rows: x_cat = [x, mu, spks (broadcast over T), cond] per frame, frames
// as rows; x, mu, cond are [B][C][T], spks [B][C].
std::vector<float> concat_inputs(const float * x, const float * mu, const float * spks, const float * cond, int B,
                                 int T, int C, int in_channels) {
    std::vector<float> xc(static_cast<size_t>(in_channels) * T * B);
    for (int bb = 0; bb < B; ++bb)
        for (int tt = 0; tt < T; ++tt) {
            float * row = xc.data() + (static_cast<size_t>(bb) * T + tt) * in_channels;
            for (int c = 0; c < C; ++c) {
                const size_t src = (static_cast<size_t>(bb) * C + c) * T + tt;
                row[c] = x[src];
                row[C + c] = mu[src];
                row[2 * C + c] = spks[static_cast<size_t>(bb) * C + c];
                row[3 * C + c] = cond[src];
            }
        }
    return xc;
}

// Sinusoidal embedding of t*1000, [cos | sin], float arithmetic as the reference orders it.
std::vector<float> timestep_features(const float * t, int B) {
    std::vector<float> tf(static_cast<size_t>(kFreqDim) * B);
    const int half = kFreqDim / 2;
    for (int bb = 0; bb < B; ++bb) {
        const float ts = t[bb] * kTimeScale;
        for (int j = 0; j < half; ++j) {
            const float freq =
                std::exp(static_cast<float>(-std::log(10000.0)) * static_cast<float>(j) / static_cast<float>(half));
            const float arg = ts * freq;
            tf[static_cast<size_t>(bb) * kFreqDim + j] = std::cos(arg);
            tf[static_cast<size_t>(bb) * kFreqDim + half + j] = std::sin(arg);
        }
    }
    return tf;
}

// The attention mask [T][T2p]: -inf on the padding frames T2..T2p of every query row.
std::vector<float> padding_mask(int T, int T2, int T2p) {
    std::vector<float> mk(static_cast<size_t>(T2p) * T, 0.0f);
    for (int r = 0; r < T; ++r)
        for (int c = T2; c < T2p; ++c) mk[static_cast<size_t>(r) * T2p + c] = -INFINITY;
    return mk;
}

// The graph's output rows [B][T][C] as the caller's [B][C][T].
std::vector<float> frames_to_channels(const std::vector<float> & o, int B, int T, int C) {
    std::vector<float> res(o.size());
    for (int bb = 0; bb < B; ++bb)
        for (int tt = 0; tt < T; ++tt)
            for (int c = 0; c < C; ++c)
                res[(static_cast<size_t>(bb) * C + c) * T + tt] = o[(static_cast<size_t>(bb) * T + tt) * C + c];
    return res;
}

}  // namespace

struct DitEstimator::Impl : GraphModule {
    DitDims d;
    Token2MelImpl token2mel = Token2MelImpl::Graph;
    std::unique_ptr<DitCpu> native;
    Impl() : GraphModule("dit", 4096) {}

    // x * (1 + scale) + shift, without SCALE-with-bias (unsupported on CANN).
    static ggml_tensor * modulate(ggml_context * ctx, ggml_tensor * x, ggml_tensor * shift, ggml_tensor * scale) {
        return ggml_add(ctx, ggml_add(ctx, x, ggml_mul(ctx, x, scale)), shift);
    }

    // Mish: x * tanh(softplus(x)) = x * n / (n + 2) with n = e^x (e^x + 2); x is clamped at 20
    // for the exponential, where the ratio is already 1 in float.
    static ggml_tensor * mish(ggml_context * ctx, ggml_tensor * x, ggml_tensor * two) {
        ggml_tensor * e = ggml_exp(ctx, ggml_clamp(ctx, x, -INFINITY, 20.0f));
        ggml_tensor * n = ggml_mul(ctx, e, ggml_add(ctx, e, two));
        return ggml_mul(ctx, x, ggml_div(ctx, n, ggml_add(ctx, n, two)));
    }

    // Causal conv (k = 3) on x [C, T, B], continuing from `cache` [C, 2, B] (null: zeros).
    // *new_cache receives the last 2 input frames.
    ggml_tensor * causal_conv(ggml_context * ctx, ggml_tensor * x, ggml_tensor * cache, const std::string & p,
                              ggml_tensor ** new_cache) const {
        ggml_tensor * xp = cache ? ggml_concat(ctx, cache, x, 1) : ggml_pad_ext(ctx, x, 0, 0, 2, 0, 0, 0, 0, 0);
        *new_cache = gu::frames(ctx, xp, xp->ne[1] - 2, 2);
        return gu::conv_valid(ctx, xp, w.taps(p + ".weight", 3), W(p + ".bias"));
    }

    // Attention of this block. k_all [hd, T2p, H, B] and vt_all [T2p, hd, H, B] are views of the
    // resident cache (this chunk's frames already written); mask [T2p, T] holds -inf for the
    // padding frames beyond T2 (keys padded to a multiple of 16 keep ggml's fast matmul).
    ggml_tensor * attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k_all, ggml_tensor * vt_all,
                            ggml_tensor * mask, const std::string & p, int64_t T, int64_t B) const {
        const int hd = d.head_dim, H = d.heads;
        ggml_tensor * kq = ggml_soft_max_ext(ctx, ggml_mul_mat(ctx, k_all, q), mask, 1.0f / std::sqrt(float(hd)), 0.0f);
        ggml_tensor * o = ggml_mul_mat(ctx, vt_all, kq);  // [hd, T, H, B]
        o = ggml_cont(ctx, ggml_permute(ctx, o, 0, 2, 1, 3));  // [hd, H, T, B]
        return linear(ctx, ggml_reshape_3d(ctx, o, hd * H, T, B), p + ".proj");
    }

    // q, k, v of this block for x [h, T, B]: q and k LayerNorm'ed per head; q, k as [hd, T, H, B],
    // v transposed as [T, hd, H, B].
    void qkv(ggml_context * ctx, ggml_tensor * x, const std::string & p, ggml_tensor ** q, ggml_tensor ** k,
             ggml_tensor ** vt) const {
        const int64_t T = x->ne[1], B = x->ne[2];
        const int hd = d.head_dim, H = d.heads;
        auto heads = [&](ggml_tensor * t) { return ggml_reshape_4d(ctx, t, hd, H, T, B); };
        auto qk_norm = [&](ggml_tensor * t, const std::string & n) {
            return ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, t, 1e-5f), W(n + ".weight")), W(n + ".bias"));
        };
        *q = ggml_cont(ctx, ggml_permute(ctx, qk_norm(heads(linear(ctx, x, p + ".to_q")), p + ".q_norm"), 0, 2, 1, 3));
        *k = ggml_cont(ctx, ggml_permute(ctx, qk_norm(heads(linear(ctx, x, p + ".to_k")), p + ".k_norm"), 0, 2, 1, 3));
        *vt = ggml_cont(ctx, ggml_permute(ctx, heads(linear(ctx, x, p + ".to_v")), 1, 2, 0, 3));
    }

    // One call's shape: batch B, this chunk's T frames, T2 frames attended (the chunk, then the
    // kept older ones), padded to T2p; dev: the resident cache (null: none).
    struct Call {
        int B, T, T2, T2p;
        DitDeviceState * dev;
        std::vector<std::pair<int, int>> old_ranges;  // the stored frames that survive the bounding
    };
    // The step graph and the tensors the call fills and reads (mask: null without padding).
    struct StepGraph {
        ggml_cgraph * gf;
        ggml_tensor *in_x, *in_t, *two, *mask, *out;
    };

    StepGraph build_step(ggml_context * ctx, const Call & c) const;
    ggml_tensor * block(ggml_context * ctx, ggml_cgraph * gf, const Call & c, int i, ggml_tensor * x_h,
                        ggml_tensor * st, ggml_tensor * mask, ggml_tensor * two,
                        std::vector<ggml_tensor *> & cnn_writes) const;
    void attended_kv(ggml_context * ctx, ggml_cgraph * gf, const Call & c, int i, ggml_tensor * k, ggml_tensor * vt,
                     ggml_tensor ** k_all, ggml_tensor ** vt_all) const;
    ggml_tensor * conv_cache_view(ggml_context * ctx, const Call & c, int i, int part) const;

    // The j-th h-wide slice of an adaLN modulation mod [n*h, B], as [h, 1, B].
    ggml_tensor * mod_chunk(ggml_context * ctx, ggml_tensor * mod, int j) const {
        const int h = d.hidden;
        return ggml_cont(ctx,
                         ggml_view_3d(ctx, mod, h, 1, mod->ne[1], mod->nb[1], mod->nb[1],
                                      static_cast<size_t>(j) * h * sizeof(float)));
    }
};

// Built as we go: each block's cache writes are expanded before the reads that follow them, so
// they run first (the reads are views of the same resident buffer). The cache is updated in
// place: per block, the kept older frames are copied out to temporaries (graph memory, shared by
// all streams), then written back behind this chunk's frames, then the chunk's K/V go in front;
// the conv caches are read (copied) before their writes at the very end.
DitEstimator::Impl::StepGraph DitEstimator::Impl::build_step(ggml_context * ctx, const Call & c) const {
    StepGraph g{};
    g.gf = ggml_new_graph_custom(ctx, kGraphNodes, false);
    g.in_x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d.in_channels, c.T, c.B);
    g.in_t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kFreqDim, c.B);
    g.two = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1);
    for (ggml_tensor * in : {g.in_x, g.in_t, g.two}) ggml_set_input(in);
    g.mask = nullptr;
    if (c.T2p != c.T2) {
        g.mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, c.T2p, c.T);
        ggml_set_input(g.mask);
    }

    ggml_tensor * temb = linear(ctx, ggml_silu(ctx, linear(ctx, g.in_t, "estimator.t_embedder.mlp.0")),
                                "estimator.t_embedder.mlp.2");  // [h, B]
    ggml_tensor * st = ggml_silu(ctx, temb);
    std::vector<ggml_tensor *> cnn_writes;
    ggml_tensor * x_h = linear(ctx, g.in_x, "estimator.in_proj");  // [h, T, B]
    for (int i = 0; i < d.depth; ++i) x_h = block(ctx, g.gf, c, i, x_h, st, g.mask, g.two, cnn_writes);
    ggml_tensor * fmod = linear(ctx, st, "estimator.final_layer.adaLN_modulation.1");
    g.out = modulate(ctx, ggml_norm(ctx, x_h, 1e-6f), mod_chunk(ctx, fmod, 0), mod_chunk(ctx, fmod, 1));
    g.out = linear(ctx, g.out, "estimator.final_layer.linear");  // [80, T, B]
    ggml_set_output(g.out);
    ggml_build_forward_expand(g.gf, g.out);
    for (ggml_tensor * w : cnn_writes) ggml_build_forward_expand(g.gf, w);
    return g;
}

// Block i: attention, the causal conv branch, then the MLP, each gated by its adaLN chunks
// (order in mod: shift/scale/gate for attention, MLP, then conv). Its conv cache writes are
// appended to cnn_writes.
ggml_tensor * DitEstimator::Impl::block(ggml_context * ctx, ggml_cgraph * gf, const Call & c, int i, ggml_tensor * x_h,
                                        ggml_tensor * st, ggml_tensor * mask, ggml_tensor * two,
                                        std::vector<ggml_tensor *> & cnn_writes) const {
    const std::string b = "estimator.blocks." + std::to_string(i);
    ggml_tensor * mod = linear(ctx, st, b + ".adaLN_modulation.1");  // [9h, B]
    ggml_tensor * a = modulate(ctx, ggml_norm(ctx, x_h, 1e-6f), mod_chunk(ctx, mod, 0), mod_chunk(ctx, mod, 1));
    ggml_tensor * q = nullptr;
    ggml_tensor * k = nullptr;
    ggml_tensor * vt = nullptr;
    qkv(ctx, a, b + ".attn", &q, &k, &vt);
    ggml_tensor * k_all = nullptr;
    ggml_tensor * vt_all = nullptr;
    attended_kv(ctx, gf, c, i, k, vt, &k_all, &vt_all);
    x_h = ggml_add(
        ctx, x_h, ggml_mul(ctx, attention(ctx, q, k_all, vt_all, mask, b + ".attn", c.T, c.B), mod_chunk(ctx, mod, 2)));

    ggml_tensor * cnn1 = c.dev ? ggml_cont(ctx, conv_cache_view(ctx, c, i, 0)) : nullptr;
    ggml_tensor * cnn2 = c.dev ? ggml_cont(ctx, conv_cache_view(ctx, c, i, 1)) : nullptr;
    ggml_tensor * cv = modulate(ctx, ggml_norm(ctx, x_h, 1e-6f), mod_chunk(ctx, mod, 6), mod_chunk(ctx, mod, 7));
    ggml_tensor * nc1 = nullptr;
    ggml_tensor * nc2 = nullptr;
    cv = causal_conv(ctx, cv, cnn1, b + ".conv.block.1", &nc1);
    cv = gu::layer_norm(ctx, cv, 1e-5f, W(b + ".conv.block.3.weight"), W(b + ".conv.block.3.bias"));
    cv = causal_conv(ctx, mish(ctx, cv, two), cnn2, b + ".conv.block.6", &nc2);
    x_h = ggml_add(ctx, x_h, ggml_mul(ctx, cv, mod_chunk(ctx, mod, 8)));
    ggml_tensor * f = modulate(ctx, ggml_norm(ctx, x_h, 1e-6f), mod_chunk(ctx, mod, 3), mod_chunk(ctx, mod, 4));
    f = linear(ctx, gu::gelu_tanh(ctx, linear(ctx, f, b + ".mlp.fc1")), b + ".mlp.fc2");
    x_h = ggml_add(ctx, x_h, ggml_mul(ctx, f, mod_chunk(ctx, mod, 5)));
    if (c.dev) {  // this block's conv caches: conv1's then conv2's last 2 input frames
        cnn_writes.push_back(ggml_cpy(ctx, nc1, conv_cache_view(ctx, c, i, 0)));
        cnn_writes.push_back(ggml_cpy(ctx, nc2, conv_cache_view(ctx, c, i, 1)));
    }
    return x_h;
}

// The keys and values block i attends to. With a resident cache: the kept older frames move
// behind this chunk's (through copies), the chunk's K/V go in front, and the views cover all T2p
// frames. Without one: this chunk only, padded to T2p.
void DitEstimator::Impl::attended_kv(ggml_context * ctx, ggml_cgraph * gf, const Call & c, int i, ggml_tensor * k,
                                     ggml_tensor * vt, ggml_tensor ** k_all, ggml_tensor ** vt_all) const {
    const int hd = d.head_dim, H = d.heads, B = c.B, T = c.T;
    if (!c.dev) {
        *k_all = c.T2p != c.T2 ? ggml_pad(ctx, k, 0, c.T2p - c.T2, 0, 0) : k;
        *vt_all = c.T2p != c.T2 ? ggml_pad(ctx, vt, c.T2p - c.T2, 0, 0, 0) : vt;
        return;
    }
    ggml_tensor * K = c.dev->k;
    ggml_tensor * V = c.dev->vt;
    const size_t kb = static_cast<size_t>(i) * H * K->nb[2], vb = static_cast<size_t>(i) * H * V->nb[2];
    auto k_frames = [&](ggml_tensor * src, int first, int n) {
        return ggml_view_4d(ctx, src, hd, n, H, B, src->nb[1], src->nb[2], src->nb[3], kb + first * src->nb[1]);
    };
    auto v_frames = [&](ggml_tensor * src, int first, int n) {
        return ggml_view_4d(ctx, src, n, hd, H, B, src->nb[1], src->nb[2], src->nb[3], vb + first * sizeof(float));
    };
    std::vector<std::pair<ggml_tensor *, ggml_tensor *>> kept;  // (K, Vt) copies of each range
    for (auto & r : c.old_ranges) {
        kept.emplace_back(ggml_cont(ctx, k_frames(K, r.first, r.second)),
                          ggml_cont(ctx, v_frames(V, r.first, r.second)));
        ggml_build_forward_expand(gf, kept.back().first);
        ggml_build_forward_expand(gf, kept.back().second);
    }
    int off = T;
    for (size_t j = 0; j < c.old_ranges.size(); ++j) {
        const int n = c.old_ranges[j].second;
        ggml_build_forward_expand(gf, ggml_cpy(ctx, kept[j].first, k_frames(K, off, n)));
        ggml_build_forward_expand(gf, ggml_cpy(ctx, kept[j].second, v_frames(V, off, n)));
        off += n;
    }
    ggml_build_forward_expand(gf, ggml_cpy(ctx, k, k_frames(K, 0, T)));
    ggml_build_forward_expand(gf, ggml_cpy(ctx, vt, v_frames(V, 0, T)));
    *k_all = k_frames(K, 0, c.T2p);
    *vt_all = v_frames(V, 0, c.T2p);
}

// Block i's conv cache in the resident state, [h, 2, B]: part 0 conv1's, part 1 conv2's.
ggml_tensor * DitEstimator::Impl::conv_cache_view(ggml_context * ctx, const Call & c, int i, int part) const {
    ggml_tensor * cc = c.dev->cnn;
    const size_t off = static_cast<size_t>(part) * d.hidden * sizeof(float);
    return ggml_view_3d(ctx, cc, d.hidden, 2, c.B, cc->nb[1], cc->nb[3], i * cc->nb[2] + off);
}

DitEstimator::DitEstimator(const std::string & path, const std::string & device, int threads, Token2MelImpl token2mel,
                           bool bf16)
    : DitEstimator(path, std::make_shared<Backend>(device, threads), nullptr, token2mel, bf16) {}

DitEstimator::DitEstimator(const std::string & path, std::shared_ptr<Backend> backend, std::shared_ptr<ThreadPool> pool,
                           Token2MelImpl token2mel, bool bf16)
    : impl_(std::make_unique<Impl>()) {
    Impl & m = *impl_;
    GgufFile g(path);
    DitDims & d = m.d;
    const GgufTensorInfo & in_proj = g.tensor("estimator.in_proj.weight");
    if (in_proj.ne.size() != 2 || in_proj.ne[0] != d.in_channels) {
        throw ModelFileError(path, "estimator.in_proj.weight must be [320, hidden]");
    }
    d.hidden = static_cast<int>(in_proj.ne[1]);
    d.head_dim = static_cast<int>(g.tensor("estimator.blocks.0.attn.q_norm.weight").ne[0]);
    d.heads = static_cast<int>(g.tensor("estimator.blocks.0.attn.to_q.weight").ne[1]) / d.head_dim;
    d.depth = count_blocks(g, "estimator.blocks.");
    d.mlp = static_cast<int>(g.tensor("estimator.blocks.0.mlp.fc1.weight").ne[1]);
    const int h = d.hidden, inner = d.heads * d.head_dim;
    if (d.depth == 0 || inner <= 0) throw ModelFileError(path, "no estimator blocks found");
    m.token2mel = resolve_token2mel_impl(token2mel, backend->is_cpu());
    if (bf16 && m.token2mel != Token2MelImpl::Native)
        throw InvalidArgument("bf16 needs the native CPU code (token2mel='native')");
    if (m.token2mel == Token2MelImpl::Native) {
        if (!pool) pool = std::make_shared<ThreadPool>(std::max(1, backend->threads()));
        m.native = std::make_unique<DitCpu>(g, d, std::move(pool), bf16);
        m.backend = std::move(backend);  // holds the resident caches; no graph weights
        return;
    }

    m.w.add_linear(g, "estimator.t_embedder.mlp.0", kFreqDim, h);
    m.w.add_linear(g, "estimator.t_embedder.mlp.2", h, h);
    m.w.add_linear(g, "estimator.in_proj", d.in_channels, h);
    for (int i = 0; i < d.depth; ++i) {
        const std::string b = "estimator.blocks." + std::to_string(i);
        m.w.add_linear(g, b + ".attn.to_q", h, inner);
        m.w.add_linear(g, b + ".attn.to_k", h, inner);
        m.w.add_linear(g, b + ".attn.to_v", h, inner);
        m.w.add_norm(g, b + ".attn.q_norm", d.head_dim);
        m.w.add_norm(g, b + ".attn.k_norm", d.head_dim);
        m.w.add_linear(g, b + ".attn.proj", inner, h);
        m.w.add_linear(g, b + ".mlp.fc1", h, d.mlp);
        m.w.add_linear(g, b + ".mlp.fc2", d.mlp, h);
        m.w.add_conv_taps(g, b + ".conv.block.1.weight", h, h, 3);
        m.w.add(g, b + ".conv.block.1.bias", {h});
        m.w.add_norm(g, b + ".conv.block.3", h);
        m.w.add_conv_taps(g, b + ".conv.block.6.weight", h, h, 3);
        m.w.add(g, b + ".conv.block.6.bias", {h});
        m.w.add_linear(g, b + ".adaLN_modulation.1", h, 9 * h);
    }
    m.w.add_linear(g, "estimator.final_layer.adaLN_modulation.1", h, 2 * h);
    m.w.add_linear(g, "estimator.final_layer.linear", h, d.out_channels);

    m.finish_loading(std::move(backend));
}

DitEstimator::~DitEstimator() = default;

const DitDims & DitEstimator::dims() const { return impl_->d; }
Token2MelImpl DitEstimator::token2mel() const { return impl_->token2mel; }
const DeviceInfo & DitEstimator::device() const { return impl_->backend->device(); }
size_t DitEstimator::weight_bytes() const { return impl_->native ? impl_->native->weight_bytes() : impl_->w.bytes(); }

size_t DitCache::bytes() const {
    const size_t resident = device && device->buffer ? ggml_backend_buffer_get_size(device->buffer) : 0;
    return (cnn.size() + att.size()) * sizeof(float) + resident;
}

void DitEstimator::to_device(DitCache & cache, int B, int capacity) {
    Impl & m = *impl_;
    const DitDims & d = m.d;
    const int hd = d.head_dim, DH = d.depth * d.heads, Tc = cache.att_frames;
    capacity = round16(capacity);
    if (capacity < round16(Tc) || capacity < kFramePad)
        throw InvalidArgument("device cache capacity is smaller than the cache");
    if (Tc > 0 &&
        (cache.att.size() != static_cast<size_t>(2 * hd) * Tc * DH * B ||
         cache.cnn.size() != static_cast<size_t>(2 * d.hidden) * 2 * d.depth * B)) {
        throw InvalidArgument("estimator cache does not match the model and batch");
    }
    auto st = std::make_shared<DitDeviceState>();
    ggml_init_params p{ggml_tensor_overhead() * 4, nullptr, true};
    st->ctx = ggml_init(p);
    st->k = ggml_new_tensor_4d(st->ctx, GGML_TYPE_F32, hd, capacity, DH, B);
    st->vt = ggml_new_tensor_4d(st->ctx, GGML_TYPE_F32, capacity, hd, DH, B);
    st->cnn = ggml_new_tensor_4d(st->ctx, GGML_TYPE_F32, 2 * d.hidden, 2, d.depth, B);
    st->buffer = ggml_backend_alloc_ctx_tensors(st->ctx, m.backend->get());
    if (!st->buffer) throw DeviceError("cannot allocate the estimator cache on " + m.backend->device().id);
    ggml_backend_buffer_clear(st->buffer, 0);  // padding frames are read (masked): keep them finite
    st->capacity = capacity;
    st->batch = B;
    st->stored = Tc;
    if (Tc > 0) {
        const size_t slabs = static_cast<size_t>(DH) * B;
        std::vector<float> k(slabs * capacity * hd, 0.0f), vt(slabs * hd * capacity, 0.0f);
        for (size_t sl = 0; sl < slabs; ++sl)
            for (int t = 0; t < Tc; ++t) {
                const float * row = cache.att.data() + (sl * Tc + t) * 2 * hd;  // K then V
                std::copy_n(row, hd, k.data() + (sl * capacity + t) * hd);
                for (int e = 0; e < hd; ++e) vt[(sl * hd + e) * capacity + t] = row[hd + e];
            }
        ggml_backend_tensor_set(st->k, k.data(), 0, ggml_nbytes(st->k));
        ggml_backend_tensor_set(st->vt, vt.data(), 0, ggml_nbytes(st->vt));
        ggml_backend_tensor_set(st->cnn, cache.cnn.data(), 0, ggml_nbytes(st->cnn));
    }
    cache.att.clear();
    cache.att.shrink_to_fit();
    cache.cnn.clear();
    cache.cnn.shrink_to_fit();
    cache.device = std::move(st);
}

void DitEstimator::to_host(DitCache & cache) {
    if (!cache.device) return;
    const DitDims & d = impl_->d;
    DitDeviceState & st = *cache.device;
    const int hd = d.head_dim, cap = st.capacity;
    const size_t slabs = static_cast<size_t>(d.depth) * d.heads * st.batch;
    std::vector<float> k(slabs * cap * hd), vt(slabs * hd * cap);
    ggml_backend_tensor_get(st.k, k.data(), 0, ggml_nbytes(st.k));
    ggml_backend_tensor_get(st.vt, vt.data(), 0, ggml_nbytes(st.vt));
    const auto ranges = kept_ranges(st.stored, cache.keep_head, cache.keep_tail);
    int frames = 0;
    for (auto & r : ranges) frames += r.second;
    cache.att.assign(slabs * frames * 2 * hd, 0.0f);
    for (size_t sl = 0; sl < slabs; ++sl) {
        int out_t = 0;
        for (auto & r : ranges)
            for (int t = r.first; t < r.first + r.second; ++t, ++out_t) {
                float * row = cache.att.data() + (sl * frames + out_t) * 2 * hd;
                std::copy_n(k.data() + (sl * cap + t) * hd, hd, row);
                for (int e = 0; e < hd; ++e) row[hd + e] = vt[(sl * hd + e) * cap + t];
            }
    }
    cache.att_frames = frames;
    cache.cnn.resize(ggml_nelements(st.cnn));
    ggml_backend_tensor_get(st.cnn, cache.cnn.data(), 0, ggml_nbytes(st.cnn));
    cache.device.reset();
}

std::vector<float> DitEstimator::forward(const float * x, const float * mu, const float * t, const float * spks,
                                         const float * cond, int B, int T) {
    return run(x, mu, t, spks, cond, B, T, nullptr);
}

std::vector<float> DitEstimator::forward_chunk(const float * x, const float * mu, const float * t, const float * spks,
                                               const float * cond, int B, int T, DitCache & cache) {
    if (cache.device) return run(x, mu, t, spks, cond, B, T, &cache);
    // A host cache: stage it on the device for this call, then bring the result back.
    to_device(cache, B, cache.att_frames + T + kFramePad);
    std::vector<float> out = run(x, mu, t, spks, cond, B, T, &cache);
    to_host(cache);
    return out;
}

std::vector<float> DitEstimator::run(const float * x, const float * mu, const float * t, const float * spks,
                                     const float * cond, int B, int T, DitCache * cache) {
    if (B < 1 || B > 16 || T < 1 || T > 8192) throw InvalidArgument("estimator batch must be 1..16 and frames 1..8192");
    Impl & m = *impl_;
    DitDeviceState * dev = cache ? cache->device.get() : nullptr;
    if (dev && dev->batch != B) throw InvalidArgument("the device cache was made for another batch size");
    // Frames attended: this chunk, then the stored frames that survive the bounding.
    Impl::Call call{
        B,   T,
        0,   0,
        dev, dev ? kept_ranges(dev->stored, cache->keep_head, cache->keep_tail) : std::vector<std::pair<int, int>>{}};
    int old_keep = 0;
    for (auto & r : call.old_ranges) old_keep += r.second;
    call.T2 = T + old_keep;
    call.T2p = round16(call.T2);
    if (dev && call.T2p > dev->capacity) throw InvalidArgument("the estimator cache outgrew its device capacity");
    if (m.native) {
        std::vector<float> res =
            m.native->run(x, mu, t, spks, cond, B, T, dev, cache ? cache->keep_head : 0, cache ? cache->keep_tail : 0);
        if (dev) finish_call(*dev, *cache, call.T2);
        return res;
    }
    std::lock_guard<std::mutex> lock(m.mutex);
    ggml_init_params p{ggml_tensor_overhead() * kGraphNodes + ggml_graph_overhead_custom(kGraphNodes, false), nullptr,
                       true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> holder(ggml_init(p), ggml_free);
    const Impl::StepGraph g = m.build_step(holder.get(), call);
    if (!ggml_gallocr_alloc_graph(m.galloc, g.gf)) throw DeviceError("cannot allocate the estimator graph");

    const int C = m.d.out_channels;
    const std::vector<float> xc = concat_inputs(x, mu, spks, cond, B, T, C, m.d.in_channels);
    const std::vector<float> tf = timestep_features(t, B);
    const float two_v = 2.0f;
    ggml_backend_tensor_set(g.in_x, xc.data(), 0, ggml_nbytes(g.in_x));
    ggml_backend_tensor_set(g.in_t, tf.data(), 0, ggml_nbytes(g.in_t));
    ggml_backend_tensor_set(g.two, &two_v, 0, sizeof(float));
    if (g.mask) {
        const std::vector<float> mk = padding_mask(T, call.T2, call.T2p);
        ggml_backend_tensor_set(g.mask, mk.data(), 0, ggml_nbytes(g.mask));
    }
    m.compute(g.gf, "step");
    std::vector<float> o(static_cast<size_t>(C) * T * B);
    ggml_backend_tensor_get(g.out, o.data(), 0, ggml_nbytes(g.out));
    if (dev) finish_call(*dev, *cache, call.T2);
    return frames_to_channels(o, B, T, C);
}

}  // namespace omni
