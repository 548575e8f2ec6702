#include "conformer_cpu.h"

#include "cpu_rows.h"
#include "native_layers.h"
#include "vec_math.h"
#include "blas.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

namespace omni {

namespace {

constexpr int kLookahead = 3, kPreCache = 2, kUpCache = 4;

}  // namespace

struct ConformerCpu::Impl {
    ConformerDims d;
    cpu::LayerRunner run;
    std::mutex mutex;
    struct Layer {
        cpu::PackedConv qkv, out, pos, w1, w2;
        std::vector<float> bias_u, bias_v, mha_w, mha_b, ff_w, ff_b;
    };
    std::vector<Layer> layers;  // token-rate blocks, then the mel-rate ones
    cpu::PackedConv embed, up_embed, pre1, pre2, up_conv;
    std::vector<float> embed_w, embed_b, up_embed_w, up_embed_b, after_w, after_b;
    cpu::Rows xin, x, h, qkv, att, y, pos, pp, pre, up, ff;
    std::vector<std::vector<float>> scratch;  // per worker: scores, shifted positions, softmax

    Impl(std::shared_ptr<ThreadPool> pool, bool bf16) : run(std::move(pool), bf16) {}

    // dst[:, dcol + t] = LayerNorm(src[:, t]) * w + b (then * scale), t < T.
    void layer_norm(cpu::Rows & src, int T, float eps, const std::vector<float> & w, const std::vector<float> & b,
                    cpu::Rows & dst, int dcol = 0, float scale = 1.0f) {
        cpu::for_column_blocks(run.pool(), 1, T, [&](int, int c0, int c1) {
            cpu::norm_columns(src, d.d, c0, c1, eps,
                              [&](int o, int col, float v) { dst.row(o)[dcol + col] = (v * w[o] + b[o]) * scale; });
        });
    }

    // One conformer block on x (T1 columns) with `pos` (P = 2*T2 - 1 columns, T2 = cached +
    // T1); K/V of the cached frames come from `cache` [heads][cached][2*dh] (null: none), and
    // the block's new cache [heads][T2][2*dh] goes to `new_cache`.
    void block(const Layer & L, int T1, int P, const float * cache, int cached, float * new_cache) {
        const int H = d.heads, dh = d.d_head, T2 = cached + T1;
        layer_norm(x, T1, 1e-12f, L.mha_w, L.mha_b, h);
        run.apply(L.qkv, h, qkv, T1);
        run.apply(L.pos, this->pos, pp, P);
        for (auto & s : scratch)
            s.resize(static_cast<size_t>(T2) * T1 + static_cast<size_t>(P) * T1 + 2 * T1 + 2 * dh * T1);
        run.pool().parallel_for(
            H, [&](int hh, int worker) { attend_head(L, hh, worker, T1, P, cache, cached, new_cache); });
        run.apply(L.out, att, y, T1, add_y_to_x());
        layer_norm(x, T1, 1e-12f, L.ff_w, L.ff_b, h);
        run.apply(L.w1, h, ff, T1, [&](int, int o0, int o1, int t0, int t1) {
            for (int o = o0; o < o1; ++o) cpu::silu_row(ff.row(o) + t0, t1 - t0);
        });
        run.apply(L.w2, ff, y, T1, add_y_to_x());
    }

    // The residual epilogue: x += y over a finished block.
    cpu::BlockFn add_y_to_x() {
        return [this](int, int o0, int o1, int t0, int t1) {
            for (int o = o0; o < o1; ++o) {
                float * xr = x.row(o);
                const float * yr = y.row(o);
                for (int t = t0; t < t1; ++t) xr[t] += yr[t];
            }
        };
    }

    // Head hh of a block: its new K/V cache (the cached frames, then this chunk's), the content
    // and position scores (q + bias_u against K, q + bias_v against the positions, rel-shifted),
    // softmax, and the weighted values into att.
    void attend_head(const Layer & L, int hh, int worker, int T1, int P, const float * cache, int cached,
                     float * new_cache) {
        const int D = d.d, dh = d.d_head, T2 = cached + T1;
        const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
        float * kv = new_cache + static_cast<size_t>(hh) * T2 * 2 * dh;  // [T2][K | V]
        if (cached) std::memcpy(kv, cache + static_cast<size_t>(hh) * cached * 2 * dh, sizeof(float) * cached * 2 * dh);
        for (int e = 0; e < dh; ++e) {
            const float * kr = qkv.row(D + hh * dh + e);
            const float * vr = qkv.row(2 * D + hh * dh + e);
            for (int t = 0; t < T1; ++t) {
                kv[static_cast<size_t>(cached + t) * 2 * dh + e] = kr[t];
                kv[static_cast<size_t>(cached + t) * 2 * dh + dh + e] = vr[t];
            }
        }
        float * S = scratch[worker].data();  // [T2][T1] scores
        float * BD = S + static_cast<size_t>(T2) * T1;  // [P][T1] position scores
        float * tmp = BD + static_cast<size_t>(P) * T1;
        float * qu = tmp + 2 * T1;  // [dh][T1] q + bias_u, then q + bias_v
        float * qv = qu + static_cast<size_t>(dh) * T1;
        for (int e = 0; e < dh; ++e) {
            const float * q = qkv.row(hh * dh + e);
            for (int t = 0; t < T1; ++t) {
                qu[static_cast<size_t>(e) * T1 + t] = q[t] + L.bias_u[hh * dh + e];
                qv[static_cast<size_t>(e) * T1 + t] = q[t] + L.bias_v[hh * dh + e];
            }
        }
        OMNI_SGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, T2, T1, dh, 1.0f, kv, 2 * dh, qu, T1, 0.0f, S, T1);
        OMNI_SGEMM(CblasRowMajor, CblasTrans, CblasNoTrans, P, T1, dh, 1.0f, pp.row(hh * dh), pp.ld, qv, T1, 0.0f, BD,
                   T1);
        // ESPnet rel_shift as the graph does it: left-pad a zero position, read the buffer
        // [t][P+1] (here [P+1] per t, transposed) at T1 + t*P + s.
        for (int s = 0; s < T2; ++s)
            for (int t = 0; t < T1; ++t) {
                float bd = 0.0f;
                if (P == T2) {
                    bd = BD[static_cast<size_t>(s) * T1 + t];
                } else {
                    const long f = T1 + static_cast<long>(t) * P + s;
                    const long tp = f / (P + 1), p = f % (P + 1);
                    if (p > 0) bd = BD[static_cast<size_t>(p - 1) * T1 + tp];
                }
                float & v = S[static_cast<size_t>(s) * T1 + t];
                v = (v + bd) * scale;
            }
        cpu::softmax_columns(S, T2, T1, tmp);
        OMNI_SGEMM(CblasRowMajor, CblasTrans, CblasNoTrans, dh, T1, T2, 1.0f, kv + dh, 2 * dh, S, T1, 0.0f,
                   att.row(hh * dh), att.ld);
    }

    // Relative positions (2*S - 1 of them) as rows [D][2S-1].
    void positions(int S) {
        const std::vector<float> table = rel_position_table(d.d, S);
        const int P = 2 * S - 1;
        pos.shape(d.d, P);
        for (int p = 0; p < P; ++p)
            for (int c = 0; c < d.d; ++c) pos.row(c)[p] = table[static_cast<size_t>(p) * d.d + c];
    }

    void load_input(const float * xs, int T, int T1, int S2);
    void pre_lookahead(cpu::Rows & emb, const float * cnn_cache, int T1, ConformerChunk & out);
    void token_rate_blocks(const float * att_cache, int att_frames, int T1, int S1, int S2, ConformerChunk & out);
    void upsample(const float * cnn_cache, int T1, ConformerChunk & out);
};

ConformerCpu::ConformerCpu(const GgufFile & g, const ConformerDims & dims, std::shared_ptr<ThreadPool> pool, bool bf16)
    : impl_(std::make_unique<Impl>(std::move(pool), bf16)) {
    Impl & m = *impl_;
    m.d = dims;
    const int D = dims.d;
    auto vec = [&](const std::string & n, size_t count) { return cpu::read_exact(g, n, count); };
    auto conv = [&](const std::string & p, int k) {
        const auto w = vec(p + ".weight", static_cast<size_t>(k) * D * D);
        const auto b = vec(p + ".bias", D);
        return cpu::pack_conv(w.data(), b.data(), D, D, k, 1, 0, bf16);
    };
    auto layer = [&](const std::string & p) {
        const std::string a = p + ".self_attn";
        Impl::Layer L;
        std::vector<float> w, b;
        for (const char * n : {".linear_q", ".linear_k", ".linear_v"}) {
            const auto wi = vec(a + n + ".weight", static_cast<size_t>(D) * D);
            const auto bi = vec(a + n + ".bias", D);
            w.insert(w.end(), wi.begin(), wi.end());
            b.insert(b.end(), bi.begin(), bi.end());
        }
        L.qkv = cpu::pack_linear(w.data(), b.data(), 3 * D, D, bf16);
        L.out = cpu::load_linear(g, a + ".linear_out", D, D, bf16);
        L.pos = cpu::load_linear(g, a + ".linear_pos", D, D, bf16, false);
        L.w1 = cpu::load_linear(g, p + ".feed_forward.w_1", D, dims.ff, bf16);
        L.w2 = cpu::load_linear(g, p + ".feed_forward.w_2", dims.ff, D, bf16);
        L.bias_u = vec(a + ".pos_bias_u", D);
        L.bias_v = vec(a + ".pos_bias_v", D);
        L.mha_w = vec(p + ".norm_mha.weight", D);
        L.mha_b = vec(p + ".norm_mha.bias", D);
        L.ff_w = vec(p + ".norm_ff.weight", D);
        L.ff_b = vec(p + ".norm_ff.bias", D);
        return L;
    };
    m.embed = cpu::load_linear(g, "embed.out.0", dims.in, D, bf16);
    m.embed_w = vec("embed.out.1.weight", D);
    m.embed_b = vec("embed.out.1.bias", D);
    m.pre1 = conv("pre_lookahead_layer.conv1", kLookahead + 1);
    m.pre2 = conv("pre_lookahead_layer.conv2", 3);
    for (int i = 0; i < dims.blocks; ++i) m.layers.push_back(layer("encoders." + std::to_string(i)));
    m.up_conv = conv("up_layer.conv", 5);
    m.up_embed = cpu::load_linear(g, "up_embed.out.0", D, D, bf16);
    m.up_embed_w = vec("up_embed.out.1.weight", D);
    m.up_embed_b = vec("up_embed.out.1.bias", D);
    for (int i = 0; i < dims.up_blocks; ++i) m.layers.push_back(layer("up_encoders." + std::to_string(i)));
    m.after_w = vec("after_norm.weight", D);
    m.after_b = vec("after_norm.bias", D);
    m.scratch.resize(m.run.pool().size());
}

ConformerCpu::~ConformerCpu() = default;

size_t ConformerCpu::weight_bytes() const {
    using cpu::bytes_of;
    const Impl & m = *impl_;
    size_t n = m.embed.bytes() + m.up_embed.bytes() + m.pre1.bytes() + m.pre2.bytes() + m.up_conv.bytes();
    for (const auto * v : {&m.embed_w, &m.embed_b, &m.up_embed_w, &m.up_embed_b, &m.after_w, &m.after_b})
        n += bytes_of(*v);
    for (const Impl::Layer & L : m.layers) {
        n += L.qkv.bytes() + L.out.bytes() + L.pos.bytes() + L.w1.bytes() + L.w2.bytes();
        for (const auto * v : {&L.bias_u, &L.bias_v, &L.mha_w, &L.mha_b, &L.ff_w, &L.ff_b}) n += bytes_of(*v);
    }
    return n;
}

// The chunk's tokens [T][in] as rows, and every activation shaped for the widest (mel) rate.
void ConformerCpu::Impl::load_input(const float * xs, int T, int T1, int S2) {
    const int D = d.d;
    xin.shape(d.in, T);
    for (int t = 0; t < T; ++t)
        for (int c = 0; c < d.in; ++c) xin.row(c)[t] = xs[static_cast<size_t>(t) * d.in + c];
    const int W = 2 * T1;  // widest activation (the mel rate)
    for (cpu::Rows * r : {&x, &h, &y, &att}) r->shape(D, W);
    qkv.shape(3 * D, W);
    ff.shape(d.ff, W);
    pp.shape(D, 2 * S2 - 1);
}

// Pre-lookahead on the embedded input emb: conv1 (k=4, valid) + leaky ReLU 0.01, conv2 (k=3)
// over 2 cached frames, + emb, into x (T1 columns). conv1's last 2 outputs: the new pre cache.
void ConformerCpu::Impl::pre_lookahead(cpu::Rows & emb, const float * cnn_cache, int T1, ConformerChunk & out) {
    const int D = d.d;
    pre.shape(D, kPreCache + T1);
    for (int c = 0; c < D; ++c)
        for (int f = 0; f < kPreCache; ++f)
            pre.row(c)[f] = cnn_cache ? cnn_cache[static_cast<size_t>(f) * D + c] : 0.0f;
    run.apply(
        pre1, emb, pre, T1,
        [&](int, int o0, int o1, int t0, int t1) {
            for (int o = o0; o < o1; ++o) {
                float * r = pre.row(o) + kPreCache;
                for (int t = t0; t < t1; ++t) r[t] = r[t] > 0.0f ? r[t] : r[t] * 0.01f;
            }
        },
        1, 0, 0, 0, kPreCache);
    for (int f = 0; f < kPreCache; ++f)
        for (int c = 0; c < D; ++c) out.cnn_cache[static_cast<size_t>(f) * D + c] = pre.row(c)[T1 + f];
    run.apply(pre2, pre, x, T1, [&](int, int o0, int o1, int t0, int t1) {
        for (int o = o0; o < o1; ++o) {
            float * r = x.row(o);
            const float * e = emb.row(o);
            for (int t = t0; t < t1; ++t) r[t] += e[t];
        }
    });
}

// The token-rate blocks (S1 frames attended), each layer's new cache tiled to the mel-rate
// length S2 in out.att_cache; the first half of a token-rate layer's tiled cache holds its frames.
void ConformerCpu::Impl::token_rate_blocks(const float * att_cache, int att_frames, int T1, int S1, int S2,
                                           ConformerChunk & out) {
    const int H = d.heads, dh2 = 2 * d.d_head, off1 = att_frames / 2;
    std::vector<float> layer_cache, new_cache;
    positions(S1);
    for (int i = 0; i < d.blocks; ++i) {
        layer_cache.assign(static_cast<size_t>(H) * off1 * dh2, 0.0f);
        for (int hh = 0; hh < H && att_cache; ++hh)
            std::memcpy(layer_cache.data() + static_cast<size_t>(hh) * off1 * dh2,
                        att_cache + (static_cast<size_t>(i) * H + hh) * att_frames * dh2, sizeof(float) * off1 * dh2);
        new_cache.assign(static_cast<size_t>(H) * S1 * dh2, 0.0f);
        block(layers[i], T1, 2 * S1 - 1, layer_cache.data(), att_cache ? off1 : 0, new_cache.data());
        for (int hh = 0; hh < H; ++hh)
            for (int rep = 0; rep < 2; ++rep)  // tiled to the mel-rate length
                std::memcpy(out.att_cache.data() +
                                ((static_cast<size_t>(i) * H + hh) * S2 + static_cast<size_t>(rep) * S1) * dh2,
                            new_cache.data() + static_cast<size_t>(hh) * S1 * dh2, sizeof(float) * S1 * dh2);
    }
}

// Nearest x2 upsampling of x behind 4 cached frames, into `up`; its last 4 frames: the new up
// cache.
void ConformerCpu::Impl::upsample(const float * cnn_cache, int T1, ConformerChunk & out) {
    const int D = d.d;
    up.shape(D, kUpCache + 2 * T1);
    for (int c = 0; c < D; ++c) {
        float * u = up.row(c);
        for (int f = 0; f < kUpCache; ++f)
            u[f] = cnn_cache ? cnn_cache[static_cast<size_t>(kPreCache + f) * D + c] : 0.0f;
        const float * xr = x.row(c);
        for (int t = 0; t < T1; ++t) u[kUpCache + 2 * t] = u[kUpCache + 2 * t + 1] = xr[t];
        for (int f = 0; f < kUpCache; ++f) out.cnn_cache[static_cast<size_t>(kPreCache + f) * D + c] = u[2 * T1 + f];
    }
}

ConformerChunk ConformerCpu::forward_chunk(const float * xs, int T, bool last_chunk, const float * cnn_cache,
                                           const float * att_cache, int att_frames) {
    Impl & m = *impl_;
    std::lock_guard<std::mutex> lock(m.mutex);
    const ConformerDims & d = m.d;
    const int D = d.d, L = d.blocks + d.up_blocks, H = d.heads, dh2 = 2 * d.d_head;
    const int T_in = T + (last_chunk ? kLookahead : 0);
    const int T1 = T_in - kLookahead, off1 = att_frames / 2;
    const int S1 = off1 + T1, S2 = att_frames + 2 * T1;
    const float sqrt_d = std::sqrt(static_cast<float>(D));
    m.load_input(xs, T, T1, S2);

    // Embedding (linear + LayerNorm + x sqrt(D)), zero look-ahead padding on the last chunk.
    cpu::Rows emb;
    emb.shape(D, T_in);
    m.run.apply(m.embed, m.xin, m.y, T);
    m.layer_norm(m.y, T, 1e-5f, m.embed_w, m.embed_b, emb, 0, sqrt_d);
    ConformerChunk out;
    out.cnn_cache.assign(static_cast<size_t>(D) * (kPreCache + kUpCache), 0.0f);
    m.pre_lookahead(emb, cnn_cache, T1, out);

    out.att_frames = S2;
    out.att_cache.assign(static_cast<size_t>(L) * H * S2 * dh2, 0.0f);
    m.token_rate_blocks(att_cache, att_frames, T1, S1, S2, out);
    // Upsampled, then conv (k=5) and the mel-rate embedding.
    m.upsample(cnn_cache, T1, out);
    m.run.apply(m.up_conv, m.up, m.y, 2 * T1);
    m.run.apply(m.up_embed, m.y, m.h, 2 * T1);
    m.layer_norm(m.h, 2 * T1, 1e-5f, m.up_embed_w, m.up_embed_b, m.x, 0, sqrt_d);
    m.positions(S2);
    for (int i = 0; i < d.up_blocks; ++i) {
        const int li = d.blocks + i;
        m.block(m.layers[li], 2 * T1, 2 * S2 - 1,
                att_cache ? att_cache + static_cast<size_t>(li) * H * att_frames * dh2 : nullptr,
                att_cache ? att_frames : 0, out.att_cache.data() + static_cast<size_t>(li) * H * S2 * dh2);
    }
    m.layer_norm(m.x, 2 * T1, 1e-5f, m.after_w, m.after_b, m.h);
    out.frames = 2 * T1;
    out.h.resize(static_cast<size_t>(out.frames) * D);
    for (int c = 0; c < D; ++c)
        for (int t = 0; t < out.frames; ++t) out.h[static_cast<size_t>(t) * D + c] = m.h.row(c)[t];
    return out;
}

}  // namespace omni
