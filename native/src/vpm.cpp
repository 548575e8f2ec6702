#include "omni/vpm.h"

#include <algorithm>

#include "ggml_weights.h"
#include "graph_util.h"
#include "omni/errors.h"
#include "omni/gguf_file.h"

#include <cmath>
#include <cstring>

namespace omni {

std::vector<int32_t> bucketed_position_ids(int rows, int cols, int grid) {
    // NaViT buckets fractional coordinates i/n onto the grid: bucketize(i/n, k/grid, right=True),
    // which in exact arithmetic is floor(grid * i / n). Integer maths, as llama.cpp-omni does it;
    // PyTorch's float32 arange rounds exact ties (e.g. 15/50 = 21/70) to either side, CPU-dependently.
    std::vector<int32_t> ids(static_cast<size_t>(rows) * cols);
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j)
            ids[static_cast<size_t>(i) * cols + j] = (grid * i / rows) * grid + grid * j / cols;
    return ids;
}

struct Vpm::Impl : GraphModule {
    VpmDims d;
    bool exact = false;  // exact: composed GELU and plain softmax attention (parity tests)
    bool override_fa = false;
    std::vector<int> fa_dims;
    Impl() : GraphModule("vpm", 1024) {}
    // Fused F16 attention where the device has a kernel for the head size (the CPU has one for
    // every size; CANN's lacks SigLIP's 72), else matmul + softmax.
    bool use_flash_attn(int head_dim) {
        if (exact) return false;
        if (override_fa) return std::find(fa_dims.begin(), fa_dims.end(), head_dim) != fa_dims.end();
        return flash_attn_supported(head_dim);
    }

    static constexpr int kEncodeNodes = 4096;
    // One batch: B images of H x Wd pixels, rows x cols = N patches each; table_positions: both
    // sides within the file's position grid (else the resampler's key positions are computed).
    struct Batch {
        int B, H, Wd, rows, cols, N;
        bool table_positions;
    };
    // The encode graph and its tensors (grid_ids or key_pos is an input, per table_positions).
    struct EncodeGraph {
        ggml_cgraph * gf;
        ggml_tensor *patches, *pos_ids, *grid_ids, *key_pos, *out;
    };
    EncodeGraph build_encode(ggml_context * ctx, const Batch & b);
    ggml_tensor * attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, int heads, int B);
    ggml_tensor * layer(ggml_context * ctx, int i, ggml_tensor * x, int B);
    ggml_tensor * resampler(ggml_context * ctx, ggml_tensor * x, ggml_tensor * positions, int B);
    void set_inputs(const EncodeGraph & g, const Batch & b, const float * pixels) const;
    // The tanh GELU: computed exactly when exact, else ggml's (an F16 table on the CPU).
    ggml_tensor * gelu(ggml_context * ctx, ggml_tensor * t) const {
        return exact ? gu::gelu_tanh(ctx, t) : ggml_gelu(ctx, t);
    }
};

Vpm::Vpm(const std::string & path, const std::string & device, int threads, bool exact,
         std::vector<int> flash_attn_dims, bool override_flash_attn)
    : impl_(std::make_unique<Impl>()) {
    Impl & m = *impl_;
    m.w.keep_f16 = !exact;
    m.exact = exact;
    m.override_fa = override_flash_attn;
    m.fa_dims = std::move(flash_attn_dims);
    GgufFile g(path);
    if (g.get_string("general.architecture") != "clip")
        throw ModelFileError(path, "not a vision encoder file (architecture is not 'clip')");
    VpmDims & d = m.d;
    d.hidden = static_cast<int>(g.get_int("clip.vision.embedding_length"));
    d.layers = static_cast<int>(g.get_int("clip.vision.block_count"));
    d.heads = static_cast<int>(g.get_int("clip.vision.attention.head_count"));
    d.ff = static_cast<int>(g.get_int("clip.vision.feed_forward_length"));
    d.patch = static_cast<int>(g.get_int("clip.vision.patch_size"));
    d.eps = g.has_key("clip.vision.attention.layer_norm_epsilon")
        ? static_cast<float>(g.get_float("clip.vision.attention.layer_norm_epsilon"))
        : 1e-6f;
    const GgufValue & mean = g.value("clip.vision.image_mean");
    const GgufValue & stdv = g.value("clip.vision.image_std");
    if (mean.floats.size() != 3 || stdv.floats.size() != 3)
        throw ModelFileError(path, "image_mean/image_std must hold 3 floats");
    for (int c = 0; c < 3; ++c) {
        d.mean[c] = static_cast<float>(mean.floats[c]);
        d.std[c] = static_cast<float>(stdv.floats[c]);
    }
    const GgufTensorInfo & pe = g.tensor("v.position_embd.weight");
    d.grid = static_cast<int>(std::lround(std::sqrt(static_cast<double>(pe.ne[1]))));
    if (d.grid * d.grid != pe.ne[1])
        throw ModelFileError(path, "v.position_embd.weight is not a square grid of positions");
    const GgufTensorInfo & q = g.tensor("resampler.query");
    d.llm_embd = static_cast<int>(q.ne[0]);
    d.queries = static_cast<int>(q.ne[1]);
    d.res_heads = std::max(1, d.llm_embd / 128);
    if (d.hidden % d.heads || d.llm_embd % d.res_heads) throw ModelFileError(path, "inconsistent vision dimensions");
    const int h = d.hidden, E = d.llm_embd, P = d.patch;
    m.w.add(g, "v.patch_embd.weight", {P * P * 3, h});
    m.w.add(g, "v.patch_embd.bias", {h});
    m.w.add(g, "v.position_embd.weight", {h, d.grid * d.grid});
    for (int i = 0; i < d.layers; ++i) {
        const std::string b = "v.blk." + std::to_string(i);
        for (const char * n : {".attn_q", ".attn_k", ".attn_v", ".attn_out"}) m.w.add_linear(g, b + n, h, h);
        m.w.add_norm(g, b + ".ln1", h);
        m.w.add_norm(g, b + ".ln2", h);
        m.w.add_linear(g, b + ".ffn_down", h, d.ff);  // the converter's name for fc1
        m.w.add_linear(g, b + ".ffn_up", d.ff, h);  // ... and for fc2
    }
    m.w.add_norm(g, "v.post_ln", h);
    m.w.add(g, "resampler.query", {E, d.queries});
    m.w.add_linear(g, "resampler.kv", h, E, false);
    for (const char * n : {"q", "k", "v", "out"}) m.w.add_linear(g, std::string("resampler.attn.") + n, E, E);
    for (const char * n : {"ln_q", "ln_kv", "ln_post"}) m.w.add_norm(g, std::string("resampler.") + n, E);
    m.w.add(g, "resampler.proj.weight", {E, E});
    m.w.add(g, "resampler.pos_embed_k", {E, d.grid * d.grid});
    m.finish_loading(std::make_shared<Backend>(device, threads));
}

Vpm::~Vpm() = default;
const VpmDims & Vpm::dims() const { return impl_->d; }

std::vector<float> resampler_positions(int rows, int cols, int dim) {
    // MiniCPM-V's resampler keys: the first dim/2 channels encode the column, the last dim/2 the
    // row, each half [sin(p w_k), cos(p w_k)] with w_k = 10000^(-k / (dim/4)); row-major.
    const int quarter = dim / 4;
    std::vector<float> out(static_cast<size_t>(rows) * cols * dim);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
            float * o = out.data() + (static_cast<size_t>(r) * cols + c) * dim;
            for (int k = 0; k < quarter; ++k) {
                const double w = 1.0 / std::pow(10000.0, static_cast<double>(k) / quarter);
                o[k] = static_cast<float>(std::sin(c * w));
                o[quarter + k] = static_cast<float>(std::cos(c * w));
                o[2 * quarter + k] = static_cast<float>(std::sin(r * w));
                o[3 * quarter + k] = static_cast<float>(std::cos(r * w));
            }
        }
    return out;
}

std::vector<float> Vpm::encode(const float * pixels, int H, int Wd) { return encode_batch(pixels, 1, H, Wd); }

namespace {

// Patches flattened as the conv weight is: channel, then row, then column within the patch;
// [B][rows * cols][P * P * 3].
std::vector<float> patch_rows(const float * pixels, int B, int H, int Wd, int P) {
    const int rows = H / P, cols = Wd / P, N = rows * cols;
    const size_t image_floats = static_cast<size_t>(3) * H * Wd, patch_floats = static_cast<size_t>(P) * P * 3;
    std::vector<float> pt(patch_floats * N * B);
    for (int n = 0; n < B; ++n)
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c) {
                const float * img = pixels + n * image_floats;
                float * dst =
                    pt.data() + ((static_cast<size_t>(n) * N) + static_cast<size_t>(r) * cols + c) * patch_floats;
                for (int ch = 0; ch < 3; ++ch)
                    for (int y = 0; y < P; ++y)
                        std::memcpy(dst + (static_cast<size_t>(ch) * P + y) * P,
                                    img + (static_cast<size_t>(ch) * H + r * P + y) * Wd + c * P, P * sizeof(float));
            }
    return pt;
}

// Each patch's row of the resampler's key position table (grid x grid, row-major).
std::vector<int32_t> grid_rows(int rows, int cols, int grid) {
    std::vector<int32_t> gi(static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) gi[static_cast<size_t>(r) * cols + c] = r * grid + c;
    return gi;
}

}  // namespace

// Built in the reference's order: patch embedding and positions, the SigLIP layers, the post
// norm, the resampler; the graph itself comes last.
Vpm::Impl::EncodeGraph Vpm::Impl::build_encode(ggml_context * ctx, const Batch & b) {
    const int P = d.patch, E = d.llm_embd;
    EncodeGraph g{};
    g.patches = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, P * P * 3, b.N, b.B);
    g.pos_ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, b.N);
    g.grid_ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, b.N);
    g.key_pos = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, E, b.N);
    for (ggml_tensor * t : {g.patches, g.pos_ids, b.table_positions ? g.grid_ids : g.key_pos}) ggml_set_input(t);

    ggml_tensor * x = linear(ctx, g.patches, "v.patch_embd");  // [h, N, B]
    x = ggml_add(ctx, x, ggml_get_rows(ctx, W("v.position_embd.weight"), g.pos_ids));
    for (int i = 0; i < d.layers; ++i) x = layer(ctx, i, x, b.B);
    x = gu::layer_norm(ctx, x, d.eps, W("v.post_ln.weight"), W("v.post_ln.bias"));
    ggml_tensor * positions =
        b.table_positions ? ggml_get_rows(ctx, W("resampler.pos_embed_k"), g.grid_ids) : g.key_pos;
    g.out = resampler(ctx, x, positions, b.B);
    ggml_set_output(g.out);
    g.gf = ggml_new_graph_custom(ctx, kEncodeNodes, false);
    ggml_build_forward_expand(g.gf, g.out);
    return g;
}

// q [C, Tq, 1 or B], k/v [C, Tk, B]: heads and images share the batch dimension of the
// matmuls (and of fused attention), so every backend sees the 3-D shapes of one image.
ggml_tensor * Vpm::Impl::attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, int heads,
                                   int B) {
    const int C = static_cast<int>(q->ne[0]), dh = C / heads, Tq = static_cast<int>(q->ne[1]),
              Tk = static_cast<int>(k->ne[1]);
    const float scale = 1.0f / std::sqrt(float(dh));
    if (q->ne[2] != B) q = ggml_repeat(ctx, q, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, C, Tq, B));
    auto split = [&](ggml_tensor * t, int T) {  // [C, T, B] -> [dh, T, heads * B]
        ggml_tensor * s = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_4d(ctx, t, dh, heads, T, B), 0, 2, 1, 3));
        return ggml_reshape_3d(ctx, s, dh, T, heads * B);
    };
    ggml_tensor * o;
    if (use_flash_attn(dh)) {  // fused attention with F16 K/V, as upstream's clip graph runs it
        ggml_tensor * K = ggml_cast(ctx, split(k, Tk), GGML_TYPE_F16);
        ggml_tensor * V = ggml_cast(ctx, split(v, Tk), GGML_TYPE_F16);
        o = ggml_flash_attn_ext(ctx, split(q, Tq), K, V, nullptr, scale, 0.0f, 0.0f);  // [dh, heads*B, Tq]
        if (B == 1) return ggml_reshape_3d(ctx, o, C, Tq, 1);
        o = ggml_permute(ctx, ggml_reshape_4d(ctx, o, dh, heads, B, Tq), 0, 1, 3, 2);
    } else {
        ggml_tensor * VT = ggml_reshape_3d(
            ctx, ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_4d(ctx, v, dh, heads, Tk, B), 1, 2, 0, 3)), Tk, dh,
            heads * B);
        ggml_tensor * att = ggml_soft_max_ext(ctx, ggml_mul_mat(ctx, split(k, Tk), split(q, Tq)), nullptr, scale, 0.0f);
        o = ggml_permute(ctx, ggml_reshape_4d(ctx, ggml_mul_mat(ctx, VT, att), dh, Tq, heads, B), 0, 2, 1, 3);
    }
    return ggml_reshape_3d(ctx, ggml_cont(ctx, o), C, Tq, B);
}

// SigLIP layer i: pre-norm attention, then the pre-norm GELU MLP, each added back.
ggml_tensor * Vpm::Impl::layer(ggml_context * ctx, int i, ggml_tensor * x, int B) {
    const std::string b = "v.blk." + std::to_string(i);
    ggml_tensor * a = gu::layer_norm(ctx, x, d.eps, W(b + ".ln1.weight"), W(b + ".ln1.bias"));
    a = attention(ctx, linear(ctx, a, b + ".attn_q"), linear(ctx, a, b + ".attn_k"), linear(ctx, a, b + ".attn_v"),
                  d.heads, B);
    x = ggml_add(ctx, x, linear(ctx, a, b + ".attn_out"));
    ggml_tensor * f = gu::layer_norm(ctx, x, d.eps, W(b + ".ln2.weight"), W(b + ".ln2.bias"));
    f = linear(ctx, gelu(ctx, linear(ctx, f, b + ".ffn_down")), b + ".ffn_up");
    return ggml_add(ctx, x, f);
}

// Resampler: learned queries attend over the patches (keys carry 2-D sin-cos positions), then
// the projection into the LLM's embedding: [llm_embd, queries, B].
ggml_tensor * Vpm::Impl::resampler(ggml_context * ctx, ggml_tensor * x, ggml_tensor * positions, int B) {
    ggml_tensor * kv = gu::layer_norm(ctx, ggml_mul_mat(ctx, W("resampler.kv.weight"), x), 1e-6f,
                                      W("resampler.ln_kv.weight"), W("resampler.ln_kv.bias"));
    ggml_tensor * keys = ggml_add(ctx, kv, positions);
    ggml_tensor * q =
        gu::layer_norm(ctx, W("resampler.query"), 1e-6f, W("resampler.ln_q.weight"), W("resampler.ln_q.bias"));
    ggml_tensor * o = attention(ctx, linear(ctx, q, "resampler.attn.q"), linear(ctx, keys, "resampler.attn.k"),
                                linear(ctx, kv, "resampler.attn.v"), d.res_heads, B);
    o = gu::layer_norm(ctx, linear(ctx, o, "resampler.attn.out"), 1e-6f, W("resampler.ln_post.weight"),
                       W("resampler.ln_post.bias"));
    return ggml_mul_mat(ctx, W("resampler.proj.weight"), o);  // x @ proj (the file stores proj transposed)
}

// The patches, their SigLIP position buckets, and the resampler's key positions (rows of the
// file's table, or computed past it).
void Vpm::Impl::set_inputs(const EncodeGraph & g, const Batch & b, const float * pixels) const {
    const std::vector<float> pt = patch_rows(pixels, b.B, b.H, b.Wd, d.patch);
    ggml_backend_tensor_set(g.patches, pt.data(), 0, ggml_nbytes(g.patches));
    const auto ids = bucketed_position_ids(b.rows, b.cols, d.grid);
    ggml_backend_tensor_set(g.pos_ids, ids.data(), 0, ggml_nbytes(g.pos_ids));
    if (b.table_positions) {
        const std::vector<int32_t> gi = grid_rows(b.rows, b.cols, d.grid);
        ggml_backend_tensor_set(g.grid_ids, gi.data(), 0, ggml_nbytes(g.grid_ids));
    } else {
        const auto kp = resampler_positions(b.rows, b.cols, d.llm_embd);
        ggml_backend_tensor_set(g.key_pos, kp.data(), 0, ggml_nbytes(g.key_pos));
    }
}

std::vector<float> Vpm::encode_batch(const float * pixels, int B, int H, int Wd) {
    Impl & m = *impl_;
    const VpmDims & d = m.d;
    const int P = d.patch;
    if (B < 1) throw InvalidArgument("a batch needs at least one image");
    if (H < P || Wd < P || H % P || Wd % P)
        throw InvalidArgument("image sides must be positive multiples of the patch size");
    const int rows = H / P, cols = Wd / P;
    if (rows > d.max_side() || cols > d.max_side()) {
        throw InvalidArgument("the image has more than " + std::to_string(d.max_side()) +
                              " patches per side (4x the position table)");
    }
    const bool table_positions = rows <= d.grid && cols <= d.grid;  // else computed here
    const Impl::Batch b{B, H, Wd, rows, cols, rows * cols, table_positions};
    std::lock_guard<std::mutex> lock(m.mutex);
    ggml_init_params p{
        ggml_tensor_overhead() * Impl::kEncodeNodes + ggml_graph_overhead_custom(Impl::kEncodeNodes, false), nullptr,
        true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> holder(ggml_init(p), ggml_free);
    const Impl::EncodeGraph g = m.build_encode(holder.get(), b);
    if (!ggml_gallocr_alloc_graph(m.galloc, g.gf)) throw DeviceError("cannot allocate the vision graph");
    m.set_inputs(g, b, pixels);
    m.compute(g.gf, "encode");
    std::vector<float> out(static_cast<size_t>(d.llm_embd) * d.queries * B);
    ggml_backend_tensor_get(g.out, out.data(), 0, ggml_nbytes(g.out));
    return out;
}

}  // namespace omni
