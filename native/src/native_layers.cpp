#include "native_layers.h"

#include "blas.h"

#include "omni/errors.h"

namespace omni::cpu {

std::vector<float> read_exact(const GgufFile & g, const std::string & name, size_t count) {
    std::vector<float> v = g.read_f32(name);
    if (v.size() != count) {
        throw ModelFileError(
            g.path(),
            "tensor '" + name + "' has " + std::to_string(v.size()) + " elements, expected " + std::to_string(count));
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

void LayerRunner::apply(const PackedConv & w, Rows & in, Rows & out, int n, const BlockFn & epilogue, int segs,
                        int x_seg, int y_seg, int x_col, int y_col) {
    ConvArgs a = rows_conv_args(w, in, out, n, precision_, pairs_, *pool_, x_col, y_col);
    a.segments = segs;
    a.x_seg = x_seg;
    a.y_seg = y_seg;
    conv(w, a, *pool_, epilogue);
}

}  // namespace omni::cpu
