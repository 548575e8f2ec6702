#include "dit_cpu.h"

#include "cpu_rows.h"
#include "native_layers.h"
#include "omni/errors.h"
#include "vec_math.h"
#include "blas.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

namespace omni {

namespace {

constexpr int kFreqDim = 256;
constexpr float kTimeScale = 1000.0f;
constexpr size_t kMaxModCache = 64;  // distinct t values whose modulation is kept

float silu(float v) { return v / (1.0f + std::exp(-v)); }

// y[out] = W[out][in] x[in] + b[out], plain loops (the once-per-t modulation path).
void matvec(const std::vector<float> & w, const std::vector<float> & b, const float * x, int in, int out, float * y) {
    for (int o = 0; o < out; ++o) {
        const float * row = w.data() + static_cast<size_t>(o) * in;
        float acc = 0.0f;
        for (int i = 0; i < in; ++i) acc += row[i] * x[i];
        y[o] = acc + b[o];
    }
}

}  // namespace

struct DitCpu::Impl {
    DitDims d;
    cpu::LayerRunner run;
    std::mutex mutex;
    struct Block {
        cpu::PackedConv qkv, proj, conv1, conv2, fc1, fc2;
        std::vector<float> qn_w, qn_b, kn_w, kn_b, cn_w, cn_b;  // q/k norms, the conv block's LayerNorm
        std::vector<float> ada_w, ada_b;  // adaLN [9h][h]
    };
    std::vector<Block> blocks;
    cpu::PackedConv in_proj, final_linear;
    std::vector<float> t0_w, t0_b, t2_w, t2_b, final_ada_w, final_ada_b;
    std::map<uint32_t, std::vector<float>> mods;  // t bits -> [depth][9][h] then [2][h]
    cpu::Rows xin, xh, a, qkv, att, y, cin, c1, cin2, f1, out;
    std::vector<std::vector<float>> scratch;  // per worker: attention scores and cache-less K/V

    Impl(std::shared_ptr<ThreadPool> pool, bool bf16) : run(std::move(pool), bf16) {}

    // The adaLN modulation for flow time t (computed once per distinct t).
    const std::vector<float> & modulation(float t) {
        uint32_t key;
        std::memcpy(&key, &t, sizeof(key));
        auto it = mods.find(key);
        if (it != mods.end()) return it->second;
        if (mods.size() >= kMaxModCache) mods.clear();
        const int h = d.hidden, half = kFreqDim / 2;
        std::vector<float> tf(kFreqDim), e1(h), temb(h), st(h);
        const float ts = t * kTimeScale;  // sinusoidal embedding of t*1000, [cos | sin]
        for (int j = 0; j < half; ++j) {
            const float freq =
                std::exp(static_cast<float>(-std::log(10000.0)) * static_cast<float>(j) / static_cast<float>(half));
            tf[j] = std::cos(ts * freq);
            tf[half + j] = std::sin(ts * freq);
        }
        matvec(t0_w, t0_b, tf.data(), kFreqDim, h, e1.data());
        for (float & v : e1) v = silu(v);
        matvec(t2_w, t2_b, e1.data(), h, h, temb.data());
        for (int i = 0; i < h; ++i) st[i] = silu(temb[i]);
        std::vector<float> m(static_cast<size_t>(d.depth) * 9 * h + 2 * h);
        for (int i = 0; i < d.depth; ++i)
            matvec(blocks[i].ada_w, blocks[i].ada_b, st.data(), h, 9 * h, m.data() + static_cast<size_t>(i) * 9 * h);
        matvec(final_ada_w, final_ada_b, st.data(), h, 2 * h, m.data() + static_cast<size_t>(d.depth) * 9 * h);
        return mods.emplace(key, std::move(m)).first->second;
    }
};

DitCpu::DitCpu(const GgufFile & g, const DitDims & dims, std::shared_ptr<ThreadPool> pool, bool bf16)
    : impl_(std::make_unique<Impl>(std::move(pool), bf16)) {
    Impl & m = *impl_;
    m.d = dims;
    const int h = dims.hidden, inner = dims.heads * dims.head_dim, F = dims.mlp;
    m.t0_w = cpu::read_exact(g, "estimator.t_embedder.mlp.0.weight", static_cast<size_t>(kFreqDim) * h);
    m.t0_b = cpu::read_exact(g, "estimator.t_embedder.mlp.0.bias", h);
    m.t2_w = cpu::read_exact(g, "estimator.t_embedder.mlp.2.weight", static_cast<size_t>(h) * h);
    m.t2_b = cpu::read_exact(g, "estimator.t_embedder.mlp.2.bias", h);
    m.in_proj = cpu::load_linear(g, "estimator.in_proj", dims.in_channels, h, bf16);
    for (int i = 0; i < dims.depth; ++i) {
        const std::string b = "estimator.blocks." + std::to_string(i);
        Impl::Block k;
        std::vector<float> w, bias;
        for (const char * n : {".attn.to_q", ".attn.to_k", ".attn.to_v"}) {
            const auto wi = cpu::read_exact(g, b + n + ".weight", static_cast<size_t>(h) * inner);
            const auto bi = cpu::read_exact(g, b + n + ".bias", inner);
            w.insert(w.end(), wi.begin(), wi.end());
            bias.insert(bias.end(), bi.begin(), bi.end());
        }
        k.qkv = cpu::pack_linear(w.data(), bias.data(), 3 * inner, h, bf16);
        k.proj = cpu::load_linear(g, b + ".attn.proj", inner, h, bf16);
        k.fc1 = cpu::load_linear(g, b + ".mlp.fc1", h, F, bf16);
        k.fc2 = cpu::load_linear(g, b + ".mlp.fc2", F, h, bf16);
        for (int c = 0; c < 2; ++c) {
            const std::string p = b + (c == 0 ? ".conv.block.1" : ".conv.block.6");
            const auto cw = cpu::read_exact(g, p + ".weight", static_cast<size_t>(3) * h * h);
            const auto cb = cpu::read_exact(g, p + ".bias", h);
            (c == 0 ? k.conv1 : k.conv2) = cpu::pack_conv(cw.data(), cb.data(), h, h, 3, 1, 0, bf16);
        }
        k.qn_w = cpu::read_exact(g, b + ".attn.q_norm.weight", dims.head_dim);
        k.qn_b = cpu::read_exact(g, b + ".attn.q_norm.bias", dims.head_dim);
        k.kn_w = cpu::read_exact(g, b + ".attn.k_norm.weight", dims.head_dim);
        k.kn_b = cpu::read_exact(g, b + ".attn.k_norm.bias", dims.head_dim);
        k.cn_w = cpu::read_exact(g, b + ".conv.block.3.weight", h);
        k.cn_b = cpu::read_exact(g, b + ".conv.block.3.bias", h);
        k.ada_w = cpu::read_exact(g, b + ".adaLN_modulation.1.weight", static_cast<size_t>(h) * 9 * h);
        k.ada_b = cpu::read_exact(g, b + ".adaLN_modulation.1.bias", static_cast<size_t>(9) * h);
        m.blocks.push_back(std::move(k));
    }
    m.final_ada_w =
        cpu::read_exact(g, "estimator.final_layer.adaLN_modulation.1.weight", static_cast<size_t>(h) * 2 * h);
    m.final_ada_b = cpu::read_exact(g, "estimator.final_layer.adaLN_modulation.1.bias", static_cast<size_t>(2) * h);
    m.final_linear = cpu::load_linear(g, "estimator.final_layer.linear", h, dims.out_channels, bf16);
    m.scratch.resize(m.run.pool().size());
}

DitCpu::~DitCpu() = default;

size_t DitCpu::weight_bytes() const {
    using cpu::bytes_of;
    const Impl & m = *impl_;
    size_t n = m.in_proj.bytes() + m.final_linear.bytes();
    for (const auto * v : {&m.t0_w, &m.t0_b, &m.t2_w, &m.t2_b, &m.final_ada_w, &m.final_ada_b}) n += bytes_of(*v);
    for (const Impl::Block & b : m.blocks) {
        n += b.qkv.bytes() + b.proj.bytes() + b.conv1.bytes() + b.conv2.bytes() + b.fc1.bytes() + b.fc2.bytes();
        for (const auto * v : {&b.qn_w, &b.qn_b, &b.kn_w, &b.kn_b, &b.cn_w, &b.cn_b, &b.ada_w, &b.ada_b})
            n += bytes_of(*v);
    }
    return n;
}

std::vector<float> DitCpu::run(const float * x, const float * mu, const float * t, const float * spks,
                               const float * cond, int B, int T, DitDeviceState * dev, int keep_head, int keep_tail) {
    Impl & m = *impl_;
    std::lock_guard<std::mutex> lock(m.mutex);
    const DitDims & d = m.d;
    const int h = d.hidden, H = d.heads, hd = d.head_dim, inner = H * hd, C = d.out_channels, N = B * T;
    const int DH = d.depth * H, Tp = T + 2;
    ThreadPool & pool = m.run.pool();
    std::vector<const float *> mod(B);
    for (int b = 0; b < B; ++b) mod[b] = m.modulation(t[b]).data();
    auto modv = [&](int b, int block, int chunk) { return mod[b] + (static_cast<size_t>(block) * 9 + chunk) * h; };

    const auto old_ranges = dev ? kept_ranges(dev->stored, keep_head, keep_tail) : std::vector<std::pair<int, int>>{};
    int old_keep = 0;
    for (auto & r : old_ranges) old_keep += r.second;
    const int T2 = T + old_keep;
    const int cur = dev ? dev->cur : 0, nxt = 1 - cur, cap = dev ? dev->capacity : T;

    m.xin.shape(d.in_channels, N);
    for (cpu::Rows * r : {&m.xh, &m.a, &m.y, &m.c1}) r->shape(h, N);
    m.qkv.shape(3 * inner, N);
    m.att.shape(inner, N);
    m.cin.shape(h, B * Tp);
    m.cin2.shape(h, B * Tp);
    m.f1.shape(d.mlp, N);
    m.out.shape(C, N);
    for (auto & s : m.scratch) s.resize(static_cast<size_t>(T2) * T + 2 * static_cast<size_t>(T) * hd + 2 * T);

    // Inputs: rows [x, mu, spks (broadcast over T), cond], columns b*T + t.
    for (int b = 0; b < B; ++b)
        for (int c = 0; c < C; ++c) {
            const size_t src = (static_cast<size_t>(b) * C + c) * T;
            std::copy_n(x + src, T, m.xin.row(c) + b * T);
            std::copy_n(mu + src, T, m.xin.row(C + c) + b * T);
            std::fill_n(m.xin.row(2 * C + c) + b * T, T, spks[static_cast<size_t>(b) * C + c]);
            std::copy_n(cond + src, T, m.xin.row(3 * C + c) + b * T);
        }
    m.run.apply(m.in_proj, m.xin, m.xh, N);

    // dst[o][col] += src[o][col] * gate_b[o] over a finished block, batch by batch.
    auto gated_add = [&](cpu::Rows & src_rows, int block, int chunk) {
        cpu::Rows * srcp = &src_rows;
        return [&m, &modv, T, srcp, block, chunk](int seg, int o0, int o1, int t0, int t1) {
            const cpu::Rows & src = *srcp;
            t0 += seg * T;  // a conv's segments are batch items (a linear has one segment)
            t1 += seg * T;
            for (int b = t0 / T; b * T < t1; ++b) {
                const int ca = std::max(t0, b * T), cb = std::min(t1, (b + 1) * T);
                const float * g = modv(b, block, chunk);
                for (int o = o0; o < o1; ++o) {
                    float * dst = m.xh.row(o);
                    const float * s = src.row(o);
                    for (int c = ca; c < cb; ++c) dst[c] += s[c] * g[o];
                }
            }
        };
    };
    // out = modulate(norm(xh)) for this block's chunks (shift, scale), into rows at (b, t) -> col.
    auto norm_mod = [&](int block, int shift, int scale, cpu::Rows & dst, int seg_stride, int seg_off) {
        cpu::for_column_blocks(pool, B, T, [&](int b, int c0, int c1) {
            const float * sh = block < 0
                ? mod[b] + static_cast<size_t>(d.depth) * 9 * h + static_cast<size_t>(shift) * h
                : modv(b, block, shift);
            const float * sc = block < 0
                ? mod[b] + static_cast<size_t>(d.depth) * 9 * h + static_cast<size_t>(scale) * h
                : modv(b, block, scale);
            const int dc = b * seg_stride + seg_off - b * T;
            cpu::norm_columns(m.xh, h, b * T + c0, b * T + c1, 1e-6f,
                              [&](int o, int col, float v) { dst.row(o)[col + dc] = (v + v * sc[o]) + sh[o]; });
        });
    };
    // The conv cache columns: segment b's first 2 columns from cnn[cur] (zeros without a cache),
    // and after the fill its last 2 columns into cnn[nxt]. `part` 0: conv1's, 1: conv2's.
    auto cache_cols = [&](cpu::Rows & buf, int block, int part, bool save) {
        for (int b = 0; b < B; ++b)
            for (int f = 0; f < 2; ++f) {
                const size_t off =
                    ((static_cast<size_t>(b) * d.depth + block) * 2 + f) * 2 * h + static_cast<size_t>(part) * h;
                const int col = b * Tp + (save ? T + f : f);
                if (save) {
                    if (!dev) continue;
                    float * c = static_cast<float *>(dev->cnn[nxt]->data) + off;
                    for (int o = 0; o < h; ++o) c[o] = buf.row(o)[col];
                } else {
                    const float * c = dev ? static_cast<const float *>(dev->cnn[cur]->data) + off : nullptr;
                    for (int o = 0; o < h; ++o) buf.row(o)[col] = c ? c[o] : 0.0f;
                }
            }
    };

    for (int i = 0; i < d.depth; ++i) {
        const Impl::Block & blk = m.blocks[i];
        norm_mod(i, 0, 1, m.a, T, 0);
        m.run.apply(blk.qkv, m.a, m.qkv, N);
        // Attention per (batch item, head): q/k norms, this chunk's K/V into the cache (and the
        // kept older frames after them), softmax(q K^T / sqrt(hd)) V.
        pool.parallel_for(B * H, [&](int task, int worker) {
            const int b = task / H, hh = task % H, slab = i * H + hh;
            const int c0 = b * T;
            for (int which = 0; which < 2; ++which) {
                const std::vector<float> & nw = which == 0 ? blk.qn_w : blk.kn_w;
                const std::vector<float> & nb = which == 0 ? blk.qn_b : blk.kn_b;
                const int r0 = which * inner + hh * hd;
                cpu::norm_columns_rows(m.qkv, r0, hd, c0, c0 + T, 1e-5f,
                                       [&](int r, int col, float v) { m.qkv.row(r0 + r)[col] = v * nw[r] + nb[r]; });
            }
            float * scr = m.scratch[worker].data();
            float * S = scr;
            float * K;
            float * Vt;
            int ldv;
            if (dev) {
                K = static_cast<float *>(dev->k[nxt]->data) + (static_cast<size_t>(b) * DH + slab) * cap * hd;
                Vt = static_cast<float *>(dev->vt[nxt]->data) + (static_cast<size_t>(b) * DH + slab) * hd * cap;
                ldv = cap;
                const float * Ko =
                    static_cast<const float *>(dev->k[cur]->data) + (static_cast<size_t>(b) * DH + slab) * cap * hd;
                const float * Vo =
                    static_cast<const float *>(dev->vt[cur]->data) + (static_cast<size_t>(b) * DH + slab) * hd * cap;
                int off = T;
                for (auto & r : old_ranges) {
                    std::memcpy(K + static_cast<size_t>(off) * hd, Ko + static_cast<size_t>(r.first) * hd,
                                sizeof(float) * r.second * hd);
                    for (int e = 0; e < hd; ++e)
                        std::memcpy(Vt + static_cast<size_t>(e) * cap + off,
                                    Vo + static_cast<size_t>(e) * cap + r.first, sizeof(float) * r.second);
                    off += r.second;
                }
            } else {
                K = scr + static_cast<size_t>(T2) * T;
                Vt = K + static_cast<size_t>(T) * hd;
                ldv = T;
            }
            for (int e = 0; e < hd; ++e) {
                const float * kr = m.qkv.row(inner + hh * hd + e) + c0;
                for (int tt = 0; tt < T; ++tt) K[static_cast<size_t>(tt) * hd + e] = kr[tt];
                std::memcpy(Vt + static_cast<size_t>(e) * ldv, m.qkv.row(2 * inner + hh * hd + e) + c0,
                            sizeof(float) * T);
            }
            OMNI_SGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, T2, T, hd, 1.0f / std::sqrt(static_cast<float>(hd)),
                       K, hd, m.qkv.row(hh * hd) + c0, m.qkv.ld, 0.0f, S, T);
            cpu::softmax_columns(S, T2, T, scr + static_cast<size_t>(T2) * T + 2 * static_cast<size_t>(T) * hd);
            OMNI_SGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, hd, T, T2, 1.0f, Vt, ldv, S, T, 0.0f,
                       m.att.row(hh * hd) + c0, m.att.ld);
        });
        m.run.apply(blk.proj, m.att, m.y, N, gated_add(m.y, i, 2));
        // Causal conv block: modulate -> conv(k=3) -> LayerNorm -> Mish -> conv(k=3), each conv
        // continuing from its 2 cached input frames.
        cache_cols(m.cin, i, 0, false);
        norm_mod(i, 6, 7, m.cin, Tp, 2);
        cache_cols(m.cin, i, 0, true);
        m.run.apply(blk.conv1, m.cin, m.c1, T, nullptr, B, Tp, T);
        cache_cols(m.cin2, i, 1, false);
        cpu::for_column_blocks(pool, B, T, [&](int b, int c0, int c1) {
            float tmp[cpu::kColBlock];
            cpu::norm_column_rows(m.c1, 0, h, b * T + c0, b * T + c1, 1e-5f, tmp, [&](int o, const float * v, int n) {
                cpu::mish_affine_row(v, blk.cn_w[o], blk.cn_b[o], m.cin2.row(o) + b * Tp + 2 + c0, n);
            });
        });
        cache_cols(m.cin2, i, 1, true);
        m.run.apply(blk.conv2, m.cin2, m.y, T, gated_add(m.y, i, 8), B, Tp, T);
        norm_mod(i, 3, 4, m.a, T, 0);
        m.run.apply(blk.fc1, m.a, m.f1, N, [&](int, int o0, int o1, int t0, int t1) {
            for (int o = o0; o < o1; ++o) cpu::gelu_tanh_row(m.f1.row(o) + t0, t1 - t0);
        });
        m.run.apply(blk.fc2, m.f1, m.y, N, gated_add(m.y, i, 5));
    }
    norm_mod(-1, 0, 1, m.a, T, 0);
    m.run.apply(m.final_linear, m.a, m.out, N);
    std::vector<float> res(static_cast<size_t>(B) * C * T);
    for (int b = 0; b < B; ++b)
        for (int c = 0; c < C; ++c)
            std::copy_n(m.out.row(c) + b * T, T, res.data() + (static_cast<size_t>(b) * C + c) * T);
    return res;
}

}  // namespace omni
