// The TTS backbone graph over the rows of one or several slots (tts_shared.h).
#include "omni/errors.h"
#include "tts_shared.h"

#include <cmath>
#include <numeric>

namespace omni {

namespace {

int round16(int n) { return (n + 15) / 16 * 16; }

// Where one slot's rows sit in the graph: columns [col, col + n) of the activations.
struct SlotView {
    const TtsRows * part;
    int col, t2p;  // t2p: the cache positions its attention reads (n_past + n, padded to 16)
    ggml_tensor * mask;
};

// The graph over the rows of every part: N rows in all, the parts' columns one after another.
struct RowsGraph {
    const TtsShared & m;
    const TtsDims & d;
    ggml_context * ctx;
    ggml_cgraph * gf;
    int N;
    ggml_tensor *x, *pos, *last_rows, *logits = nullptr;
    std::vector<SlotView> views;
    // ggml's CPU backend hands a matmul of two or more contiguous columns to its tiled GEMM, which
    // sums in another order than the one-column dot products of a lone step. With batch_invariant,
    // a strided right-hand side already in the weight's type keeps every column on the dot-product
    // path, so a batched step gives each slot the bits of its lone step, at a cost in speed
    // (docs/slots.md#tts). Condition rows (several rows of one slot) keep the GEMM.
    bool one_row_each;

    // The graph and its inputs: the rows, their positions, each part's last row and causal mask.
    RowsGraph(const TtsShared & shared, ggml_context * c, size_t nodes, const std::vector<TtsRows> & parts, int n_rows)
        : m(shared), d(shared.d), ctx(c), N(n_rows) {
        const int B = static_cast<int>(parts.size());
        gf = ggml_new_graph_custom(ctx, nodes, false);
        x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d.hidden, N);
        pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, N);
        last_rows = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, B);
        for (ggml_tensor * t : {x, pos, last_rows}) ggml_set_input(t);
        for (int i = 0, col = 0; i < B; col += parts[i].n, ++i) {
            const int t2p = round16(parts[i].slot->n_past + parts[i].n);
            views.push_back({&parts[i], col, t2p, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, t2p, parts[i].n)});
            ggml_set_input(views.back().mask);
        }
        one_row_each = B > 1 && m.batch_invariant && m.backend->is_cpu();
        for (const TtsRows & part : parts) one_row_each = one_row_each && part.n == 1;
    }

    // [hd, H, N] -> the slot's [hd, H, n].
    ggml_tensor * cols(ggml_tensor * t, const SlotView & s) const {
        return ggml_view_3d(ctx, t, d.head_dim, d.heads, s.part->n, t->nb[1], t->nb[2],
                            static_cast<size_t>(s.col) * t->nb[2]);
    }
    // A matmul's right-hand side t (contiguous [k, N]), strided and in `type` when one_row_each.
    ggml_tensor * rhs(ggml_tensor * t, ggml_type type) const {
        if (!one_row_each) return t;
        ggml_tensor * padded = ggml_pad(ctx, t, 16, 0, 0, 0);
        if (type != GGML_TYPE_F32) padded = ggml_cast(ctx, padded, type);
        return ggml_view_2d(ctx, padded, t->ne[0], t->ne[1], padded->nb[1], 0);
    }
    // Weight w times t, through rhs.
    ggml_tensor * mm(const std::string & w, ggml_tensor * t) const {
        ggml_tensor * W = m.W(w);
        return ggml_mul_mat(ctx, W, rhs(t, W->type));
    }
    // LLaMA's interleaved RoPE (the GGUF's q/k rows are permuted for it).
    ggml_tensor * rope(ggml_tensor * t) const {
        return ggml_rope_ext(ctx, ggml_reshape_3d(ctx, t, d.head_dim, d.heads, N), pos, nullptr, d.head_dim, 0, 0,
                             d.rope_theta, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
    }

    // The layers, then the head on each slot's last row only: logits [codes, B].
    void build() {
        ggml_tensor * cur = x;
        for (int l = 0; l < d.layers; ++l) cur = layer(l, cur);
        ggml_tensor * last = ggml_get_rows(ctx, cur, last_rows);  // [h, B]
        last = ggml_mul(ctx, ggml_rms_norm(ctx, last, d.rms_eps), m.W("output_norm.weight"));
        logits = mm("head", last);  // [codes, B]
        ggml_set_output(logits);
        ggml_build_forward_expand(gf, logits);
    }

    // Layer l: attention (shared projections, per-slot caches), then the SwiGLU MLP.
    ggml_tensor * layer(int l, ggml_tensor * cur) {
        const int hd = d.head_dim, H = d.heads;
        const std::string b = "blk." + std::to_string(l);
        ggml_tensor * a = ggml_mul(ctx, ggml_rms_norm(ctx, cur, d.rms_eps), m.W(b + ".attn_norm.weight"));
        a = rhs(a, m.W(b + ".attn_q.weight")->type);  // q, k and v share one right-hand side
        ggml_tensor * q = rope(ggml_mul_mat(ctx, m.W(b + ".attn_q.weight"), a));  // [hd, H, N]
        ggml_tensor * k = rope(ggml_mul_mat(ctx, m.W(b + ".attn_k.weight"), a));
        ggml_tensor * v = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, m.W(b + ".attn_v.weight"), a), hd, H, N);
        ggml_tensor * o_all = nullptr;
        for (const SlotView & s : views) {
            ggml_tensor * o = slot_attention(l, s, q, k, v);
            o_all = o_all ? ggml_concat(ctx, o_all, o, 1) : o;
        }
        cur = ggml_add(ctx, cur, mm(b + ".attn_output.weight", o_all));
        ggml_tensor * f = ggml_mul(ctx, ggml_rms_norm(ctx, cur, d.rms_eps), m.W(b + ".ffn_norm.weight"));
        f = rhs(f, m.W(b + ".ffn_gate.weight")->type);  // gate and up share one right-hand side
        f = ggml_mul(ctx, ggml_silu(ctx, ggml_mul_mat(ctx, m.W(b + ".ffn_gate.weight"), f)),
                     ggml_mul_mat(ctx, m.W(b + ".ffn_up.weight"), f));
        return ggml_add(ctx, cur, mm(b + ".ffn_down.weight", f));
    }

    // One slot in layer l: its K/V written into its own cache at n_past, then attention over the
    // cache with its own causal mask. Returns [h, n].
    ggml_tensor * slot_attention(int l, const SlotView & s, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v) {
        const int hd = d.head_dim, H = d.heads;
        const Tts::Impl & slot = *s.part->slot;
        ggml_tensor * kc = slot.k_cache;
        ggml_tensor * vc = slot.vt_cache;
        const int n = s.part->n, n_past = slot.n_past;
        ggml_tensor * k_dst = ggml_view_3d(ctx, kc, hd, n, H, kc->nb[1], kc->nb[2], l * kc->nb[3] + n_past * kc->nb[1]);
        ggml_tensor * v_dst = ggml_view_3d(ctx, vc, n, hd, H, vc->nb[1], vc->nb[2], l * vc->nb[3] + n_past * vc->nb[0]);
        ggml_build_forward_expand(gf, ggml_cpy(ctx, ggml_permute(ctx, cols(k, s), 0, 2, 1, 3), k_dst));
        ggml_build_forward_expand(gf, ggml_cpy(ctx, ggml_permute(ctx, cols(v, s), 1, 2, 0, 3), v_dst));
        ggml_tensor * K = ggml_view_3d(ctx, kc, hd, s.t2p, H, kc->nb[1], kc->nb[2], l * kc->nb[3]);
        ggml_tensor * VT = ggml_view_3d(ctx, vc, s.t2p, hd, H, vc->nb[1], vc->nb[2], l * vc->nb[3]);
        ggml_tensor * Q = ggml_cont(ctx, ggml_permute(ctx, cols(q, s), 0, 2, 1, 3));  // [hd, n, H]
        ggml_tensor * att = ggml_soft_max_ext(ctx, ggml_mul_mat(ctx, K, Q), s.mask, 1.0f / std::sqrt(float(hd)), 0.0f);
        ggml_tensor * o = ggml_cont(ctx, ggml_permute(ctx, ggml_mul_mat(ctx, VT, att), 0, 2, 1, 3));  // [hd, H, n]
        return ggml_reshape_2d(ctx, o, d.hidden, n);
    }

    // Each part's rows, positions n_past.., last row index and causal mask.
    void set_inputs() const {
        const int h = d.hidden;
        std::vector<int32_t> pv(N), lv(views.size());
        for (size_t i = 0; i < views.size(); ++i) {
            const SlotView & s = views[i];
            const TtsRows & part = *s.part;
            ggml_backend_tensor_set(x, part.rows, static_cast<size_t>(s.col) * h * sizeof(float),
                                    static_cast<size_t>(part.n) * h * sizeof(float));
            std::iota(pv.begin() + s.col, pv.begin() + s.col + part.n, part.slot->n_past);
            lv[i] = s.col + part.n - 1;
            std::vector<float> mk(static_cast<size_t>(s.t2p) * part.n);
            for (int r = 0; r < part.n; ++r)  // causal: row r (position n_past + r) sees positions <= its own
                for (int c = 0; c < s.t2p; ++c)
                    mk[static_cast<size_t>(r) * s.t2p + c] = c <= part.slot->n_past + r ? 0.0f : -INFINITY;
            ggml_backend_tensor_set(s.mask, mk.data(), 0, ggml_nbytes(s.mask));
        }
        ggml_backend_tensor_set(pos, pv.data(), 0, ggml_nbytes(pos));
        ggml_backend_tensor_set(last_rows, lv.data(), 0, ggml_nbytes(last_rows));
    }
};

}  // namespace

void require_room(const Tts::Impl & slot, int n) {
    if (n < 1) throw InvalidArgument("no rows to evaluate");
    if (round16(slot.n_past + n) > slot.n_ctx)
        throw InvalidArgument("the TTS context is full (" + std::to_string(slot.n_ctx) +
                              " positions); start a new turn");
}

void evaluate_rows(TtsShared & m, const std::vector<TtsRows> & parts) {
    const TtsDims & d = m.d;
    const int B = static_cast<int>(parts.size());
    if (B < 1) throw InvalidArgument("no rows to evaluate");
    int N = 0;
    for (const TtsRows & p : parts) {
        require_room(*p.slot, p.n);
        N += p.n;
    }
    if (B > 1 && m.fail_next_batch.exchange(false)) throw DeviceError("tts batched step graph failed (injected)");
    std::lock_guard<std::mutex> lock(m.mutex);

    // Per layer: ~30 shared nodes and ~16 per slot.
    const size_t nodes = 64 + static_cast<size_t>(d.layers) * (40 + 20 * B);
    ggml_init_params p{ggml_tensor_overhead() * nodes * 2 + ggml_graph_overhead_custom(nodes, false), nullptr, true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> holder(ggml_init(p), ggml_free);
    RowsGraph g(m, holder.get(), nodes, parts, N);
    g.build();
    if (!ggml_gallocr_alloc_graph(m.galloc, g.gf)) throw DeviceError("cannot allocate the TTS graph");
    g.set_inputs();
    m.compute(g.gf, B > 1 ? "batched step" : "step");
    const size_t codes = static_cast<size_t>(d.audio_tokens);
    for (int i = 0; i < B; ++i) {
        parts[i].logits->resize(codes);
        ggml_backend_tensor_get(g.logits, parts[i].logits->data(), i * codes * sizeof(float), codes * sizeof(float));
        parts[i].slot->n_past += parts[i].n;
    }
}

}  // namespace omni
