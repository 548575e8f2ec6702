// Small ggml graph helpers shared by the Token2Wav graphs. Tensors are [channels, frames, batch]
// (channels fastest).
#pragma once

#include <ggml.h>

#include <functional>
#include <vector>

namespace omni::gu {

// Tap `tap` of a Conv1d weight [out][in][k] as a matrix [out][in] (ggml [in, out]): a conv is
// the sum over taps of a matmul with the input shifted by the tap. (ggml's CPU concat of F32 is
// an element-by-element loop, so stacking shifted copies for one big matmul costs more.)
std::function<void(std::vector<float> &)> conv_tap(int in, int out, int k, int tap);

// Valid (unpadded) conv with stride 1 on x [C, T, B]: sum_k taps[k] x[:, t+k], plus bias.
// Output [out, T-k+1, B].
ggml_tensor * conv_valid(ggml_context * ctx, ggml_tensor * x, const std::vector<ggml_tensor *> & taps, ggml_tensor * b);

// Rows [first, first+n) of dimension 1, as a contiguous tensor.
ggml_tensor * frames(ggml_context * ctx, ggml_tensor * x, int64_t first, int64_t n);

// GELU, tanh form, exactly: x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3). (ggml's CPU GELU
// goes through an fp16 table; this keeps parity with PyTorch and uses CANN-supported ops.)
ggml_tensor * gelu_tanh(ggml_context * ctx, ggml_tensor * x);

// LayerNorm over dimension 0 with affine weight/bias (either may be null).
ggml_tensor * layer_norm(ggml_context * ctx, ggml_tensor * x, float eps, ggml_tensor * w, ggml_tensor * b);

}  // namespace omni::gu
