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

    // The adaLN modulation for flow time t (computed once per distinct t; begin_call keeps the
    // cache within kMaxModCache, for a whole batch at once).
    const std::vector<float> & modulation(float t) {
        uint32_t key;
        std::memcpy(&key, &t, sizeof(key));
        auto it = mods.find(key);
        if (it != mods.end()) return it->second;
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

    // One call: B items of T frames (Tp with the 2 cached conv frames in front), T2 frames
    // attended (the chunk, then the kept older ones); dev: the resident cache (null: none).
    struct Call {
        int B, T, Tp, T2, cap;
        DitDeviceState * dev;
        std::vector<const float *> mod;  // per item: its modulation (see modulation)
        std::vector<std::pair<int, int>> old_ranges, moves;  // the kept older frames, and their moves
    };
    Call begin_call(const float * t, int B, int T, DitDeviceState * dev, int keep_head, int keep_tail);
    void shape_buffers(const Call & c);
    void load_inputs(const Call & c, const float * x, const float * mu, const float * spks, const float * cond);
    // Item b's chunk `chunk` (of 9) of block `block`'s modulation, h floats.
    const float * modv(const Call & c, int b, int block, int chunk) const {
        return c.mod[b] + (static_cast<size_t>(block) * 9 + chunk) * d.hidden;
    }
    cpu::BlockFn gated_add(const Call & c, cpu::Rows & src_rows, int block, int chunk);
    void norm_mod(const Call & c, int block, int shift, int scale, cpu::Rows & dst, int seg_stride, int seg_off);
    void cache_cols(const Call & c, cpu::Rows & buf, int block, int part, bool save) const;
    void block(const Call & c, int i);
    void attend(const Call & c, int i, int b, int hh, int worker);
    void kv_buffers(const Call & c, int i, int b, int hh, float * scr, float ** K, float ** Vt, int * ldv) const;
    void conv_branch(const Call & c, int i);
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

// The call's shape, each item's modulation (computed once per t), and the kept older frames with
// the moves that place them behind this chunk.
DitCpu::Impl::Call DitCpu::Impl::begin_call(const float * t, int B, int T, DitDeviceState * dev, int keep_head,
                                            int keep_tail) {
    Call c{};
    c.B = B;
    c.T = T;
    c.Tp = T + 2;
    c.dev = dev;
    c.mod.resize(B);
    // Room for every item's modulation first, the one place the cache is emptied: emptying it
    // between two items would free the one an earlier item points to.
    if (mods.size() + static_cast<size_t>(B) > kMaxModCache) mods.clear();
    for (int b = 0; b < B; ++b) c.mod[b] = modulation(t[b]).data();
    c.old_ranges = dev ? kept_ranges(dev->stored, keep_head, keep_tail) : std::vector<std::pair<int, int>>{};
    int old_keep = 0;
    for (auto & r : c.old_ranges) old_keep += r.second;
    c.T2 = T + old_keep;
    c.moves = kept_moves(c.old_ranges, T);
    c.cap = dev ? dev->capacity : T;
    return c;
}

// Every activation shaped for this call (zeroed only when its shape changes), each worker's scratch sized.
void DitCpu::Impl::shape_buffers(const Call & c) {
    const int h = d.hidden, inner = d.heads * d.head_dim, N = c.B * c.T, T = c.T;
    xin.shape(d.in_channels, N);
    for (cpu::Rows * r : {&xh, &a, &y, &c1}) r->shape(h, N);
    qkv.shape(3 * inner, N);
    att.shape(inner, N);
    cin.shape(h, c.B * c.Tp);
    cin2.shape(h, c.B * c.Tp);
    f1.shape(d.mlp, N);
    out.shape(d.out_channels, N);
    for (auto & s : scratch) s.resize(static_cast<size_t>(c.T2) * T + 2 * static_cast<size_t>(T) * d.head_dim + 2 * T);
}

// Rows [x, mu, spks (broadcast over T), cond], columns b*T + t.
void DitCpu::Impl::load_inputs(const Call & c, const float * x, const float * mu, const float * spks,
                               const float * cond) {
    const int C = d.out_channels, T = c.T;
    for (int b = 0; b < c.B; ++b)
        for (int ch = 0; ch < C; ++ch) {
            const size_t src = (static_cast<size_t>(b) * C + ch) * T;
            std::copy_n(x + src, T, xin.row(ch) + b * T);
            std::copy_n(mu + src, T, xin.row(C + ch) + b * T);
            std::fill_n(xin.row(2 * C + ch) + b * T, T, spks[static_cast<size_t>(b) * C + ch]);
            std::copy_n(cond + src, T, xin.row(3 * C + ch) + b * T);
        }
}

// dst[o][col] += src[o][col] * gate_b[o] over a finished block, batch by batch.
cpu::BlockFn DitCpu::Impl::gated_add(const Call & c, cpu::Rows & src_rows, int block, int chunk) {
    cpu::Rows * srcp = &src_rows;
    const int T = c.T;
    return [this, &c, T, srcp, block, chunk](int seg, int o0, int o1, int t0, int t1) {
        const cpu::Rows & src = *srcp;
        t0 += seg * T;  // a conv's segments are batch items (a linear has one segment)
        t1 += seg * T;
        for (int b = t0 / T; b * T < t1; ++b) {
            const int ca = std::max(t0, b * T), cb = std::min(t1, (b + 1) * T);
            const float * g = modv(c, b, block, chunk);
            for (int o = o0; o < o1; ++o) {
                float * dst = xh.row(o);
                const float * s = src.row(o);
                for (int col = ca; col < cb; ++col) dst[col] += s[col] * g[o];
            }
        }
    };
}

// dst = modulate(norm(xh)) with this block's chunks (shift, scale); block -1: the final layer's.
// Column b*T + t goes to b*seg_stride + seg_off + t.
void DitCpu::Impl::norm_mod(const Call & c, int block, int shift, int scale, cpu::Rows & dst, int seg_stride,
                            int seg_off) {
    const int h = d.hidden, T = c.T;
    cpu::for_column_blocks(run.pool(), c.B, T, [&](int b, int c0, int c1) {
        const float * sh = block < 0 ? c.mod[b] + static_cast<size_t>(d.depth) * 9 * h + static_cast<size_t>(shift) * h
                                     : modv(c, b, block, shift);
        const float * sc = block < 0 ? c.mod[b] + static_cast<size_t>(d.depth) * 9 * h + static_cast<size_t>(scale) * h
                                     : modv(c, b, block, scale);
        const int dc = b * seg_stride + seg_off - b * T;
        cpu::norm_columns(xh, h, b * T + c0, b * T + c1, 1e-6f,
                          [&](int o, int col, float v) { dst.row(o)[col + dc] = (v + v * sc[o]) + sh[o]; });
    });
}

// The conv cache columns: segment b's first 2 columns from the cache (zeros without one), and
// after the fill its last 2 columns back into the same place. `part` 0: conv1's, 1: conv2's.
void DitCpu::Impl::cache_cols(const Call & c, cpu::Rows & buf, int block, int part, bool save) const {
    const int h = d.hidden;
    for (int b = 0; b < c.B; ++b)
        for (int f = 0; f < 2; ++f) {
            const size_t off =
                ((static_cast<size_t>(b) * d.depth + block) * 2 + f) * 2 * h + static_cast<size_t>(part) * h;
            const int col = b * c.Tp + (save ? c.T + f : f);
            if (save) {
                if (!c.dev) continue;
                float * cc = static_cast<float *>(c.dev->cnn->data) + off;
                for (int o = 0; o < h; ++o) cc[o] = buf.row(o)[col];
            } else {
                const float * cc = c.dev ? static_cast<const float *>(c.dev->cnn->data) + off : nullptr;
                for (int o = 0; o < h; ++o) buf.row(o)[col] = cc ? cc[o] : 0.0f;
            }
        }
}

// Block i: attention, the causal conv branch, then the MLP, each added back gated by its chunk.
void DitCpu::Impl::block(const Call & c, int i) {
    const Block & blk = blocks[i];
    const int N = c.B * c.T;
    norm_mod(c, i, 0, 1, a, c.T, 0);
    run.apply(blk.qkv, a, qkv, N);
    run.pool().parallel_for(c.B * d.heads,
                            [&](int task, int worker) { attend(c, i, task / d.heads, task % d.heads, worker); });
    run.apply(blk.proj, att, y, N, gated_add(c, y, i, 2));
    conv_branch(c, i);
    norm_mod(c, i, 3, 4, a, c.T, 0);
    run.apply(blk.fc1, a, f1, N, [&](int, int o0, int o1, int t0, int t1) {
        for (int o = o0; o < o1; ++o) cpu::gelu_tanh_row(f1.row(o) + t0, t1 - t0);
    });
    run.apply(blk.fc2, f1, y, N, gated_add(c, y, i, 5));
}

// Attention of batch item b, head hh in block i: q/k norms, this chunk's K/V into the cache (and
// the kept older frames after them), softmax(q K^T / sqrt(hd)) V.
void DitCpu::Impl::attend(const Call & c, int i, int b, int hh, int worker) {
    const Block & blk = blocks[i];
    const int hd = d.head_dim, inner = d.heads * hd, T = c.T, T2 = c.T2, c0 = b * T;
    for (int which = 0; which < 2; ++which) {
        const std::vector<float> & nw = which == 0 ? blk.qn_w : blk.kn_w;
        const std::vector<float> & nb = which == 0 ? blk.qn_b : blk.kn_b;
        const int r0 = which * inner + hh * hd;
        cpu::norm_columns_rows(qkv, r0, hd, c0, c0 + T, 1e-5f,
                               [&](int r, int col, float v) { qkv.row(r0 + r)[col] = v * nw[r] + nb[r]; });
    }
    float * scr = scratch[worker].data();
    float * S = scr;
    float * K;
    float * Vt;
    int ldv;
    kv_buffers(c, i, b, hh, scr, &K, &Vt, &ldv);
    for (int e = 0; e < hd; ++e) {
        const float * kr = qkv.row(inner + hh * hd + e) + c0;
        for (int tt = 0; tt < T; ++tt) K[static_cast<size_t>(tt) * hd + e] = kr[tt];
        std::memcpy(Vt + static_cast<size_t>(e) * ldv, qkv.row(2 * inner + hh * hd + e) + c0, sizeof(float) * T);
    }
    OMNI_SGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, T2, T, hd, 1.0f / std::sqrt(static_cast<float>(hd)), K, hd,
               qkv.row(hh * hd) + c0, qkv.ld, 0.0f, S, T);
    cpu::softmax_columns(S, T2, T, scr + static_cast<size_t>(T2) * T + 2 * static_cast<size_t>(T) * hd);
    OMNI_SGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, hd, T, T2, 1.0f, Vt, ldv, S, T, 0.0f, att.row(hh * hd) + c0,
               att.ld);
}

// Where (b, hh)'s keys [T2][hd] and transposed values [hd][ldv] of block i go. With a resident
// cache: its slab, in place, the kept older frames moved behind this chunk's first; without
// one: the worker's scratch after the scores.
void DitCpu::Impl::kv_buffers(const Call & c, int i, int b, int hh, float * scr, float ** K, float ** Vt,
                              int * ldv) const {
    const int hd = d.head_dim, slab = i * d.heads + hh, DH = d.depth * d.heads, cap = c.cap;
    if (!c.dev) {
        *K = scr + static_cast<size_t>(c.T2) * c.T;
        *Vt = *K + static_cast<size_t>(c.T) * hd;
        *ldv = c.T;
        return;
    }
    *K = static_cast<float *>(c.dev->k->data) + (static_cast<size_t>(b) * DH + slab) * cap * hd;
    *Vt = static_cast<float *>(c.dev->vt->data) + (static_cast<size_t>(b) * DH + slab) * hd * cap;
    *ldv = cap;
    for (auto & mv : c.moves) {
        const int from = c.old_ranges[mv.first].first, n = c.old_ranges[mv.first].second, to = mv.second;
        std::memmove(*K + static_cast<size_t>(to) * hd, *K + static_cast<size_t>(from) * hd, sizeof(float) * n * hd);
        for (int e = 0; e < hd; ++e)
            std::memmove(*Vt + static_cast<size_t>(e) * cap + to, *Vt + static_cast<size_t>(e) * cap + from,
                         sizeof(float) * n);
    }
}

// Causal conv block: modulate -> conv(k=3) -> LayerNorm -> Mish -> conv(k=3), each conv
// continuing from its 2 cached input frames, added back gated.
void DitCpu::Impl::conv_branch(const Call & c, int i) {
    const Block & blk = blocks[i];
    const int h = d.hidden, T = c.T, Tp = c.Tp;
    cache_cols(c, cin, i, 0, false);
    norm_mod(c, i, 6, 7, cin, Tp, 2);
    cache_cols(c, cin, i, 0, true);
    run.apply(blk.conv1, cin, c1, T, nullptr, c.B, Tp, T);
    cache_cols(c, cin2, i, 1, false);
    cpu::for_column_blocks(run.pool(), c.B, T, [&](int b, int col0, int col1) {
        float tmp[cpu::kColBlock];
        cpu::norm_column_rows(c1, 0, h, b * T + col0, b * T + col1, 1e-5f, tmp, [&](int o, const float * v, int n) {
            cpu::mish_affine_row(v, blk.cn_w[o], blk.cn_b[o], cin2.row(o) + b * Tp + 2 + col0, n);
        });
    });
    cache_cols(c, cin2, i, 1, true);
    run.apply(blk.conv2, cin2, y, T, gated_add(c, y, i, 8), c.B, Tp, T);
}

std::vector<float> DitCpu::run(const float * x, const float * mu, const float * t, const float * spks,
                               const float * cond, int B, int T, DitDeviceState * dev, int keep_head, int keep_tail) {
    Impl & m = *impl_;
    std::lock_guard<std::mutex> lock(m.mutex);
    const int C = m.d.out_channels, N = B * T;
    const Impl::Call c = m.begin_call(t, B, T, dev, keep_head, keep_tail);
    m.shape_buffers(c);
    m.load_inputs(c, x, mu, spks, cond);
    m.run.apply(m.in_proj, m.xin, m.xh, N);
    for (int i = 0; i < m.d.depth; ++i) m.block(c, i);
    m.norm_mod(c, -1, 0, 1, m.a, T, 0);
    m.run.apply(m.final_linear, m.a, m.out, N);
    std::vector<float> res(static_cast<size_t>(B) * C * T);
    for (int b = 0; b < B; ++b)
        for (int ch = 0; ch < C; ++ch)
            std::copy_n(m.out.row(ch) + b * T, T, res.data() + (static_cast<size_t>(b) * C + ch) * T);
    return res;
}

}  // namespace omni
