// Small ggml graph helpers shared by the Token2Wav graphs. Tensors are [channels, frames, batch]
// (channels fastest).
#pragma once

#include <ggml.h>

#include <functional>
#include <vector>

namespace omni::gu {

// Conv1d weight [out][in][k] -> [out][k][in]: a conv becomes one matmul over k-major stacked
// shifted copies of the input.
std::function<void(std::vector<float> &)> conv_k_major(int in, int out, int k);

// Valid (unpadded) conv with stride 1 on x [C, T, B] with a k-major weight [k*C, out]:
// output [out, T-k+1, B].
ggml_tensor * conv_valid(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, ggml_tensor * b, int k);

// Rows [first, first+n) of dimension 1, as a contiguous tensor.
ggml_tensor * frames(ggml_context * ctx, ggml_tensor * x, int64_t first, int64_t n);

// LayerNorm over dimension 0 with affine weight/bias (either may be null).
ggml_tensor * layer_norm(ggml_context * ctx, ggml_tensor * x, float eps, ggml_tensor * w, ggml_tensor * b);

}  // namespace omni::gu
