#include "omni/dit.h"

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

constexpr int kFreqDim = 256;      // sinusoidal timestep embedding width
constexpr float kTimeScale = 1000.0f;

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
        std::copy_n(src + static_cast<size_t>(frames - tail) * row, static_cast<size_t>(tail) * row, dst + static_cast<size_t>(head) * row);
    }
    return out;
}

struct DitDeviceState {
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buffer = nullptr;
    ggml_tensor * att[2] = {nullptr, nullptr};
    ggml_tensor * cnn[2] = {nullptr, nullptr};
    int cur = 0, capacity = 0, batch = 0;
    ~DitDeviceState() {
        if (buffer) ggml_backend_buffer_free(buffer);
        if (ctx) ggml_free(ctx);
    }
};

struct DitEstimator::Impl : GraphModule {
    DitDims d;
    Impl() : GraphModule(4096) {}

    // x * (1 + scale) + shift, without SCALE-with-bias (unsupported on CANN).
    static ggml_tensor * modulate(ggml_context * ctx, ggml_tensor * x, ggml_tensor * shift, ggml_tensor * scale) {
        return ggml_add(ctx, ggml_add(ctx, x, ggml_mul(ctx, x, scale)), shift);
    }

    // GELU, tanh form: 0.5 x (1 + tanh(z)) = x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3).
    // Sigmoid rather than tanh: the CPU's tanhf (via expm1f) cost ~10 % of Token2Mel.
    static ggml_tensor * gelu_tanh(ggml_context * ctx, ggml_tensor * x) {
        ggml_tensor * x3 = ggml_mul(ctx, ggml_mul(ctx, x, x), x);
        ggml_tensor * z2 = ggml_scale(ctx, ggml_add(ctx, x, ggml_scale(ctx, x3, 0.044715f)), 2.0f * 0.7978845608028654f);
        return ggml_mul(ctx, x, ggml_sigmoid(ctx, z2));
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

    // mask: [T2 rounded up to 16, T] of 0 / -inf (the padding keys), or null when no padding is
    // needed. Padding keeps the key count a multiple of 16 so ggml's fast F32 matmul applies.
    ggml_tensor * attention(ggml_context * ctx, ggml_tensor * x, ggml_tensor * cache, ggml_tensor * mask,
                            const std::string & p, ggml_tensor ** new_cache) const {
        const int64_t T = x->ne[1], B = x->ne[2];
        const int hd = d.head_dim, H = d.heads;
        auto heads = [&](ggml_tensor * t) { return ggml_reshape_4d(ctx, t, hd, H, T, B); };
        auto qk_norm = [&](ggml_tensor * t, const std::string & n) {
            return ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, t, 1e-5f), W(n + ".weight")), W(n + ".bias"));
        };
        ggml_tensor * q = qk_norm(heads(linear(ctx, x, p + ".to_q")), p + ".q_norm");
        ggml_tensor * k = qk_norm(heads(linear(ctx, x, p + ".to_k")), p + ".k_norm");
        ggml_tensor * v = heads(linear(ctx, x, p + ".to_v"));
        q = ggml_cont(ctx, ggml_permute(ctx, q, 0, 2, 1, 3));  // [hd, T, H, B]
        k = ggml_cont(ctx, ggml_permute(ctx, k, 0, 2, 1, 3));
        v = ggml_cont(ctx, ggml_permute(ctx, v, 0, 2, 1, 3));
        if (cache) {  // [2hd, Tc, H, B]: this chunk first, then the cached frames
            const int64_t Tc = cache->ne[1];
            auto half = [&](size_t off) {
                return ggml_cont(ctx, ggml_view_4d(ctx, cache, hd, Tc, H, B, cache->nb[1], cache->nb[2], cache->nb[3], off));
            };
            k = ggml_concat(ctx, k, half(0), 1);
            v = ggml_concat(ctx, v, half(hd * sizeof(float)), 1);
        }
        if (new_cache) *new_cache = ggml_concat(ctx, k, v, 0);  // [2hd, T2, H, B]
        if (mask) {
            const int64_t pad = mask->ne[0] - k->ne[1];
            k = ggml_pad(ctx, k, 0, static_cast<int>(pad), 0, 0);
            v = ggml_pad(ctx, v, 0, static_cast<int>(pad), 0, 0);
        }
        ggml_tensor * vt = ggml_cont(ctx, ggml_permute(ctx, v, 1, 0, 2, 3));  // [T2p, hd, H, B]
        ggml_tensor * kq = ggml_soft_max_ext(ctx, ggml_mul_mat(ctx, k, q), mask, 1.0f / std::sqrt(float(hd)), 0.0f);
        ggml_tensor * o = ggml_mul_mat(ctx, vt, kq);  // [hd, T, H, B]
        o = ggml_cont(ctx, ggml_permute(ctx, o, 0, 2, 1, 3));  // [hd, H, T, B]
        return linear(ctx, ggml_reshape_3d(ctx, o, hd * H, T, B), p + ".proj");
    }
};

DitEstimator::DitEstimator(const std::string & path, const std::string & device, int threads)
    : DitEstimator(path, std::make_shared<Backend>(device, threads)) {}

DitEstimator::DitEstimator(const std::string & path, std::shared_ptr<Backend> backend)
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

    auto lin = [&](const std::string & p, int n_in, int n_out) {
        m.w.add(g, p + ".weight", {n_in, n_out});
        m.w.add(g, p + ".bias", {n_out});
    };
    auto norm = [&](const std::string & p, int n) {
        m.w.add(g, p + ".weight", {n});
        m.w.add(g, p + ".bias", {n});
    };
    lin("estimator.t_embedder.mlp.0", kFreqDim, h);
    lin("estimator.t_embedder.mlp.2", h, h);
    lin("estimator.in_proj", d.in_channels, h);
    for (int i = 0; i < d.depth; ++i) {
        const std::string b = "estimator.blocks." + std::to_string(i);
        lin(b + ".attn.to_q", h, inner);
        lin(b + ".attn.to_k", h, inner);
        lin(b + ".attn.to_v", h, inner);
        norm(b + ".attn.q_norm", d.head_dim);
        norm(b + ".attn.k_norm", d.head_dim);
        lin(b + ".attn.proj", inner, h);
        lin(b + ".mlp.fc1", h, d.mlp);
        lin(b + ".mlp.fc2", d.mlp, h);
        m.w.add_conv_taps(g, b + ".conv.block.1.weight", h, h, 3);
        m.w.add(g, b + ".conv.block.1.bias", {h});
        norm(b + ".conv.block.3", h);
        m.w.add_conv_taps(g, b + ".conv.block.6.weight", h, h, 3);
        m.w.add(g, b + ".conv.block.6.bias", {h});
        lin(b + ".adaLN_modulation.1", h, 9 * h);
    }
    lin("estimator.final_layer.adaLN_modulation.1", h, 2 * h);
    lin("estimator.final_layer.linear", h, d.out_channels);

    m.finish_loading(std::move(backend));
}

DitEstimator::~DitEstimator() = default;

const DitDims & DitEstimator::dims() const { return impl_->d; }
const DeviceInfo & DitEstimator::device() const { return impl_->backend->device(); }

std::vector<float> DitEstimator::forward(const float * x, const float * mu, const float * t, const float * spks,
                                         const float * cond, int B, int T) {
    return run(x, mu, t, spks, cond, B, T, nullptr);
}

std::vector<float> DitEstimator::forward_chunk(const float * x, const float * mu, const float * t, const float * spks,
                                               const float * cond, int B, int T, DitCache & cache) {
    return run(x, mu, t, spks, cond, B, T, &cache);
}

void DitEstimator::to_device(DitCache & cache, int B, int capacity) {
    Impl & m = *impl_;
    const DitDims & d = m.d;
    const int row = 2 * d.head_dim, DH = d.depth * d.heads;
    if (capacity < cache.att_frames || capacity < 1) throw InvalidArgument("device cache capacity is smaller than the cache");
    auto st = std::make_shared<DitDeviceState>();
    ggml_init_params p{ggml_tensor_overhead() * 8, nullptr, true};
    st->ctx = ggml_init(p);
    for (int i = 0; i < 2; ++i) {
        st->att[i] = ggml_new_tensor_4d(st->ctx, GGML_TYPE_F32, row, capacity, DH, B);
        st->cnn[i] = ggml_new_tensor_4d(st->ctx, GGML_TYPE_F32, 2 * d.hidden, 2, d.depth, B);
    }
    st->buffer = ggml_backend_alloc_ctx_tensors(st->ctx, m.backend->get());
    if (!st->buffer) throw DeviceError("cannot allocate the estimator cache on " + m.backend->device().id);
    ggml_backend_buffer_clear(st->buffer, 0);
    st->capacity = capacity;
    st->batch = B;
    if (cache.att_frames > 0) {
        const size_t slab = static_cast<size_t>(cache.att_frames) * row;  // one (head, batch) slab on the host
        for (size_t sl = 0; sl < static_cast<size_t>(DH) * B; ++sl) {
            ggml_backend_tensor_set(st->att[0], cache.att.data() + sl * slab, sl * capacity * row * sizeof(float), slab * sizeof(float));
        }
        ggml_backend_tensor_set(st->cnn[0], cache.cnn.data(), 0, ggml_nbytes(st->cnn[0]));
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
    const int row = 2 * d.head_dim, DH = d.depth * d.heads;
    const size_t slab = static_cast<size_t>(cache.att_frames) * row;
    cache.att.assign(slab * DH * st.batch, 0.0f);
    for (size_t sl = 0; sl < static_cast<size_t>(DH) * st.batch; ++sl) {
        ggml_backend_tensor_get(st.att[st.cur], cache.att.data() + sl * slab, sl * st.capacity * row * sizeof(float), slab * sizeof(float));
    }
    cache.cnn.resize(ggml_nelements(st.cnn[st.cur]));
    ggml_backend_tensor_get(st.cnn[st.cur], cache.cnn.data(), 0, ggml_nbytes(st.cnn[st.cur]));
    cache.device.reset();
}

std::vector<float> DitEstimator::run(const float * x, const float * mu, const float * t, const float * spks,
                                     const float * cond, int B, int T, DitCache * cache) {
    if (B < 1 || B > 16 || T < 1 || T > 8192) throw InvalidArgument("estimator batch must be 1..16 and frames 1..8192");
    Impl & m = *impl_;
    const DitDims & d = m.d;
    const int h = d.hidden, C = 80, hd2 = 2 * d.head_dim, HD = d.depth * d.heads;
    const int Tc = cache ? cache->att_frames : 0;
    DitDeviceState * dev = cache ? cache->device.get() : nullptr;
    if (dev && dev->batch != B) throw InvalidArgument("the device cache was made for another batch size");
    if (cache && !dev && Tc > 0) {
        if (cache->att.size() != static_cast<size_t>(hd2) * Tc * HD * B || cache->cnn.size() != static_cast<size_t>(2 * h) * 2 * d.depth * B) {
            throw InvalidArgument("estimator cache does not match the model and batch");
        }
    }
    std::lock_guard<std::mutex> lock(m.mutex);

    ggml_init_params p{ggml_tensor_overhead() * 16384 + ggml_graph_overhead_custom(16384, false), nullptr, true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> holder(ggml_init(p), ggml_free);
    ggml_context * ctx = holder.get();

    ggml_tensor * in_x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d.in_channels, T, B);
    ggml_tensor * in_t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kFreqDim, B);
    ggml_tensor * two = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1);
    ggml_tensor * in_cnn = nullptr;
    ggml_tensor * in_att = nullptr;
    for (ggml_tensor * in : {in_x, in_t, two}) ggml_set_input(in);
    const int T2 = T + Tc, T2p = (T2 + 15) / 16 * 16;
    ggml_tensor * in_mask = nullptr;
    if (T2p != T2) {
        in_mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, T2p, T);
        ggml_set_input(in_mask);
    }
    if (dev && Tc > 0) {  // read the resident cache in place
        ggml_tensor * a = dev->att[dev->cur];
        in_att = ggml_view_4d(ctx, a, hd2, Tc, HD, B, a->nb[1], a->nb[2], a->nb[3], 0);
        in_cnn = dev->cnn[dev->cur];
    } else if (cache && Tc > 0) {
        in_cnn = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 2 * h, 2, d.depth, B);
        in_att = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd2, Tc, HD, B);
        ggml_set_input(in_cnn);
        ggml_set_input(in_att);
    }

    ggml_tensor * temb = m.linear(ctx, ggml_silu(ctx, m.linear(ctx, in_t, "estimator.t_embedder.mlp.0")),
                                  "estimator.t_embedder.mlp.2");      // [h, B]
    ggml_tensor * st = ggml_silu(ctx, temb);
    auto chunk = [&](ggml_tensor * mod, int j) {  // j-th h-wide slice of mod [n*h, B], as [h, 1, B]
        return ggml_cont(ctx, ggml_view_3d(ctx, mod, h, 1, B, mod->nb[1], mod->nb[1], static_cast<size_t>(j) * h * sizeof(float)));
    };
    std::vector<ggml_tensor *> new_cnn, new_att;
    ggml_tensor * x_h = m.linear(ctx, in_x, "estimator.in_proj");    // [h, T, B]
    for (int i = 0; i < d.depth; ++i) {
        const std::string b = "estimator.blocks." + std::to_string(i);
        ggml_tensor * att_c = nullptr;
        ggml_tensor * cnn1 = nullptr;
        ggml_tensor * cnn2 = nullptr;
        if (in_att) {
            att_c = ggml_view_4d(ctx, in_att, hd2, Tc, d.heads, B, in_att->nb[1], in_att->nb[2], in_att->nb[3],
                                 static_cast<size_t>(i) * d.heads * in_att->nb[2]);
            auto conv_cache = [&](size_t off) {
                return ggml_cont(ctx, ggml_view_3d(ctx, in_cnn, h, 2, B, in_cnn->nb[1], in_cnn->nb[3], i * in_cnn->nb[2] + off));
            };
            cnn1 = conv_cache(0);
            cnn2 = conv_cache(static_cast<size_t>(h) * sizeof(float));
        }
        ggml_tensor * mod = m.linear(ctx, st, b + ".adaLN_modulation.1");  // [9h, B]
        // Chunk order: shift/scale/gate for attention, MLP, then conv.
        ggml_tensor * a = Impl::modulate(ctx, ggml_norm(ctx, x_h, 1e-6f), chunk(mod, 0), chunk(mod, 1));
        ggml_tensor * na = nullptr;
        x_h = ggml_add(ctx, x_h, ggml_mul(ctx, m.attention(ctx, a, att_c, in_mask, b + ".attn", cache ? &na : nullptr), chunk(mod, 2)));
        ggml_tensor * c = Impl::modulate(ctx, ggml_norm(ctx, x_h, 1e-6f), chunk(mod, 6), chunk(mod, 7));
        ggml_tensor * nc1 = nullptr;
        ggml_tensor * nc2 = nullptr;
        c = m.causal_conv(ctx, c, cnn1, b + ".conv.block.1", &nc1);
        c = gu::layer_norm(ctx, c, 1e-5f, m.W(b + ".conv.block.3.weight"), m.W(b + ".conv.block.3.bias"));
        c = m.causal_conv(ctx, Impl::mish(ctx, c, two), cnn2, b + ".conv.block.6", &nc2);
        x_h = ggml_add(ctx, x_h, ggml_mul(ctx, c, chunk(mod, 8)));
        ggml_tensor * f = Impl::modulate(ctx, ggml_norm(ctx, x_h, 1e-6f), chunk(mod, 3), chunk(mod, 4));
        f = m.linear(ctx, Impl::gelu_tanh(ctx, m.linear(ctx, f, b + ".mlp.fc1")), b + ".mlp.fc2");
        x_h = ggml_add(ctx, x_h, ggml_mul(ctx, f, chunk(mod, 5)));
        if (cache) {
            ggml_tensor * cc = ggml_concat(ctx, nc1, nc2, 0);  // [2h, 2, B]
            new_cnn.push_back(ggml_reshape_4d(ctx, cc, 2 * h, 2, 1, B));
            new_att.push_back(na);  // [2hd, T2, H, B]
        }
    }
    ggml_tensor * fmod = m.linear(ctx, st, "estimator.final_layer.adaLN_modulation.1");
    ggml_tensor * out = Impl::modulate(ctx, ggml_norm(ctx, x_h, 1e-6f), chunk(fmod, 0), chunk(fmod, 1));
    out = m.linear(ctx, out, "estimator.final_layer.linear");  // [80, T, B]
    ggml_set_output(out);
    // New caches. Device mode: copied (bounded) into the other resident buffer inside the graph.
    // Host mode: per-block outputs, read back into place after compute (one concat over all
    // blocks would copy the growing result again for every block).
    const int T2_new = T + Tc;
    const bool bound = cache && cache->keep_tail > 0 && T2_new > cache->keep_head + cache->keep_tail;
    const int kept = bound ? cache->keep_head + cache->keep_tail : T2_new;
    std::vector<ggml_tensor *> writes;
    if (dev) {
        if (kept > dev->capacity) throw InvalidArgument("the estimator cache outgrew its device capacity");
        const int nxt = 1 - dev->cur;
        ggml_tensor * da = dev->att[nxt];
        ggml_tensor * dc = dev->cnn[nxt];
        auto copy_frames = [&](ggml_tensor * src, int s0, int n, int d0, int blk) {
            ggml_tensor * sv = ggml_view_4d(ctx, src, hd2, n, d.heads, B, src->nb[1], src->nb[2], src->nb[3], s0 * src->nb[1]);
            ggml_tensor * dv = ggml_view_4d(ctx, da, hd2, n, d.heads, B, da->nb[1], da->nb[2], da->nb[3],
                                            static_cast<size_t>(blk) * d.heads * da->nb[2] + d0 * da->nb[1]);
            writes.push_back(ggml_cpy(ctx, sv, dv));
        };
        for (int i = 0; i < d.depth; ++i) {
            if (bound) {
                copy_frames(new_att[i], 0, cache->keep_head, 0, i);
                copy_frames(new_att[i], T2_new - cache->keep_tail, cache->keep_tail, cache->keep_head, i);
            } else {
                copy_frames(new_att[i], 0, T2_new, 0, i);
            }
            ggml_tensor * cv = ggml_view_4d(ctx, dc, 2 * h, 2, 1, B, dc->nb[1], dc->nb[2], dc->nb[3], static_cast<size_t>(i) * dc->nb[2]);
            writes.push_back(ggml_cpy(ctx, new_cnn[i], cv));
        }
    } else {
        for (ggml_tensor * t : new_cnn) ggml_set_output(t);
        for (ggml_tensor * t : new_att) ggml_set_output(t);
    }

    ggml_cgraph * gf = ggml_new_graph_custom(ctx, 16384, false);
    ggml_build_forward_expand(gf, out);
    if (dev) {
        for (ggml_tensor * t : writes) ggml_build_forward_expand(gf, t);
    } else {
        for (ggml_tensor * t : new_cnn) ggml_build_forward_expand(gf, t);
        for (ggml_tensor * t : new_att) ggml_build_forward_expand(gf, t);
    }
    if (!ggml_gallocr_alloc_graph(m.galloc, gf)) throw DeviceError("cannot allocate the estimator graph");
    // Inputs: x_cat = [x, mu, spks (broadcast over T), cond] per frame, frames as rows.
    std::vector<float> xc(static_cast<size_t>(d.in_channels) * T * B);
    for (int bb = 0; bb < B; ++bb)
        for (int tt = 0; tt < T; ++tt) {
            float * row = xc.data() + (static_cast<size_t>(bb) * T + tt) * d.in_channels;
            for (int c = 0; c < C; ++c) {
                const size_t src = (static_cast<size_t>(bb) * C + c) * T + tt;
                row[c] = x[src];
                row[C + c] = mu[src];
                row[2 * C + c] = spks[static_cast<size_t>(bb) * C + c];
                row[3 * C + c] = cond[src];
            }
        }
    // Sinusoidal embedding of t*1000, [cos | sin], float arithmetic as the reference orders it.
    std::vector<float> tf(static_cast<size_t>(kFreqDim) * B);
    const int half = kFreqDim / 2;
    for (int bb = 0; bb < B; ++bb) {
        const float ts = t[bb] * kTimeScale;
        for (int j = 0; j < half; ++j) {
            const float freq = std::exp(static_cast<float>(-std::log(10000.0)) * static_cast<float>(j) / static_cast<float>(half));
            const float arg = ts * freq;
            tf[static_cast<size_t>(bb) * kFreqDim + j] = std::cos(arg);
            tf[static_cast<size_t>(bb) * kFreqDim + half + j] = std::sin(arg);
        }
    }
    const float two_v = 2.0f;
    ggml_backend_tensor_set(in_x, xc.data(), 0, ggml_nbytes(in_x));
    ggml_backend_tensor_set(in_t, tf.data(), 0, ggml_nbytes(in_t));
    ggml_backend_tensor_set(two, &two_v, 0, sizeof(float));
    if (in_mask) {
        std::vector<float> mk(static_cast<size_t>(T2p) * T, 0.0f);
        for (int r = 0; r < T; ++r)
            for (int c = T2; c < T2p; ++c) mk[static_cast<size_t>(r) * T2p + c] = -INFINITY;
        ggml_backend_tensor_set(in_mask, mk.data(), 0, ggml_nbytes(in_mask));
    }
    if (in_cnn && !dev) {
        ggml_backend_tensor_set(in_cnn, cache->cnn.data(), 0, ggml_nbytes(in_cnn));
        ggml_backend_tensor_set(in_att, cache->att.data(), 0, ggml_nbytes(in_att));
    }
    if (ggml_backend_graph_compute(m.backend->get(), gf) != GGML_STATUS_SUCCESS) {
        throw DeviceError("estimator graph failed on " + m.backend->device().id);
    }
    std::vector<float> o(static_cast<size_t>(C) * T * B), res(o.size());
    ggml_backend_tensor_get(out, o.data(), 0, ggml_nbytes(out));
    for (int bb = 0; bb < B; ++bb)  // [B][T][80] -> [B][80][T]
        for (int tt = 0; tt < T; ++tt)
            for (int c = 0; c < C; ++c) res[(static_cast<size_t>(bb) * C + c) * T + tt] = o[(static_cast<size_t>(bb) * T + tt) * C + c];
    if (dev) {
        dev->cur = 1 - dev->cur;
        cache->att_frames = kept;
    } else if (cache) {
        const int T2 = static_cast<int>(new_att[0]->ne[1]);
        const size_t att_block = static_cast<size_t>(hd2) * T2 * d.heads;  // one block, one batch row
        const size_t cnn_block = static_cast<size_t>(2 * h) * 2;
        cache->att.resize(att_block * d.depth * B);
        cache->cnn.resize(cnn_block * d.depth * B);
        for (int i = 0; i < d.depth; ++i)
            for (int bb = 0; bb < B; ++bb) {
                ggml_backend_tensor_get(new_att[i], cache->att.data() + (static_cast<size_t>(bb) * d.depth + i) * att_block,
                                        bb * att_block * sizeof(float), att_block * sizeof(float));
                ggml_backend_tensor_get(new_cnn[i], cache->cnn.data() + (static_cast<size_t>(bb) * d.depth + i) * cnn_block,
                                        bb * cnn_block * sizeof(float), cnn_block * sizeof(float));
            }
        cache->att_frames = T2;
        if (bound) {
            cache->att = keep_head_tail(cache->att, static_cast<size_t>(B) * d.depth * d.heads, T2, hd2, cache->keep_head,
                                        cache->keep_tail);
            cache->att_frames = kept;
        }
    }
    return res;
}

}  // namespace omni
