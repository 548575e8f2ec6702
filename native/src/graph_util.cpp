#include "graph_util.h"

namespace omni::gu {

std::function<void(std::vector<float> &)> conv_tap(int in, int out, int k, int tap) {
    return [=](std::vector<float> & w) {
        std::vector<float> r(static_cast<size_t>(in) * out);
        for (int o = 0; o < out; ++o)
            for (int i = 0; i < in; ++i)
                r[static_cast<size_t>(o) * in + i] = w[(static_cast<size_t>(o) * in + i) * k + tap];
        w.swap(r);
    };
}

ggml_tensor * frames(ggml_context * ctx, ggml_tensor * x, int64_t first, int64_t n) {
    return ggml_cont(ctx, ggml_view_3d(ctx, x, x->ne[0], n, x->ne[2], x->nb[1], x->nb[2], first * x->nb[1]));
}

ggml_tensor * conv_valid(ggml_context * ctx, ggml_tensor * x, const std::vector<ggml_tensor *> & taps,
                         ggml_tensor * b) {
    const int k = static_cast<int>(taps.size());
    const int64_t out_t = x->ne[1] - k + 1;
    ggml_tensor * y = nullptr;
    for (int kk = 0; kk < k; ++kk) {
        ggml_tensor * v = ggml_view_3d(ctx, x, x->ne[0], out_t, x->ne[2], x->nb[1], x->nb[2], kk * x->nb[1]);
        ggml_tensor * p = ggml_mul_mat(ctx, taps[kk], ggml_cont(ctx, v));
        y = y ? ggml_add(ctx, y, p) : p;
    }
    return b ? ggml_add(ctx, y, b) : y;
}

ggml_tensor * gelu_tanh(ggml_context * ctx, ggml_tensor * x) {
    ggml_tensor * x3 = ggml_mul(ctx, ggml_mul(ctx, x, x), x);
    ggml_tensor * z2 = ggml_scale(ctx, ggml_add(ctx, x, ggml_scale(ctx, x3, 0.044715f)), 2.0f * 0.7978845608028654f);
    return ggml_mul(ctx, x, ggml_sigmoid(ctx, z2));
}

ggml_tensor * layer_norm(ggml_context * ctx, ggml_tensor * x, float eps, ggml_tensor * w, ggml_tensor * b) {
    ggml_tensor * y = ggml_norm(ctx, x, eps);
    if (w) y = ggml_mul(ctx, y, w);
    if (b) y = ggml_add(ctx, y, b);
    return y;
}

}  // namespace omni::gu
