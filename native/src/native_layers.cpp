#include "native_layers.h"

#include "blas.h"

#include "omni/errors.h"

namespace omni::cpu {

std::vector<float> read_exact(const GgufFile & g, const std::string & name, size_t count) {
    std::vector<float> v = g.read_f32(name);
    if (v.size() != count) {
        throw ModelFileError(g.path(), "tensor '" + name + "' has " + std::to_string(v.size()) + " elements, expected " +
                                           std::to_string(count));
    }
    return v;
}

PackedConv load_linear(const GgufFile & g, const std::string & p, int in, int out, bool bf16, bool bias) {
    const auto w = read_exact(g, p + ".weight", static_cast<size_t>(in) * out);
    const auto b = bias ? read_exact(g, p + ".bias", out) : std::vector<float>();
    return pack_linear(w.data(), bias ? b.data() : nullptr, out, in, bf16);
}

LayerRunner::LayerRunner(std::shared_ptr<ThreadPool> pool, bool bf16)
    : pool_(std::move(pool)), precision_(bf16 ? Precision::BF16 : Precision::F32) {
    single_threaded_blas();  // the engines built on this call OMNI_SGEMM from the pool's workers
}

void LayerRunner::apply(const PackedConv & w, Rows & in, Rows & out, int n, const BlockFn & epilogue, int segs, int x_seg,
                        int y_seg, int x_col, int y_col) {
    ConvArgs a;
    a.x = in.data() + x_col;
    a.x_ld = in.ld;
    a.y = out.data() + y_col;
    a.y_ld = out.ld;
    a.n = n;
    a.segments = segs;
    a.x_seg = x_seg;
    a.y_seg = y_seg;
    if (precision_ == Precision::BF16) {
        // Whole rows, margins included (their zeros stay zeros).
        const size_t need = static_cast<size_t>(w.in / 2) * in.ld * 2;
        if (pairs_.size() < need) pairs_.resize(need);
        to_bf16_pairs(in.buf.data(), in.ld, w.in, 0, in.ld, pairs_.data(), in.ld, *pool_);
        a.precision = Precision::BF16;
        a.x_bf16 = pairs_.data() + 2 * (static_cast<size_t>(in.margin) + x_col);
    }
    conv(w, a, *pool_, epilogue);
}

}  // namespace omni::cpu
