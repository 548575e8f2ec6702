// CPU kernels of the vocoder: 1-D convolution (im2col + sgemm), transposed convolution
// (sgemm + overlap-add) and fused elementwise ops, parallelised on an omni::ThreadPool.
// Tensors are channel-major float32: x[c * len + t].
#pragma once

#include "omni/threadpool.h"

#include <vector>

namespace omni::cpu {

// Conv1d weights as PyTorch stores them: w[out][in][k], bias[out].
struct Conv1d {
    int in = 0, out = 0, k = 0, stride = 1, pad = 0, dilation = 1;
    std::vector<float> w, b;
    int out_len(int in_len) const { return (in_len + 2 * pad - dilation * (k - 1) - 1) / stride + 1; }
};

// ConvTranspose1d weights as PyTorch stores them: w[in][out][k], bias[out].
struct ConvTranspose1d {
    int in = 0, out = 0, k = 0, stride = 1, pad = 0;
    std::vector<float> w, b;
    int out_len(int in_len) const { return (in_len - 1) * stride - 2 * pad + k; }
};

// Per-worker scratch buffers, grown on demand and reused across calls (no per-op allocation
// once warm).
class Scratch {
public:
    float * get(int worker, size_t n);
    void reserve_workers(int n) {
        if (static_cast<int>(bufs_.size()) < n) bufs_.resize(n);
    }

private:
    std::vector<std::vector<float>> bufs_;
};

// y[out][out_len] = conv(x[in][len]); y must not alias x. x_ld / y_ld: row strides (0: dense).
void conv1d(const Conv1d & c, const float * x, int len, float * y, ThreadPool & pool, Scratch & scratch, int x_ld = 0,
            int y_ld = 0);
void conv_transpose1d(const ConvTranspose1d & c, const float * x, int len, float * y, ThreadPool & pool,
                      Scratch & scratch, int x_ld = 0, int y_ld = 0);

// y = x + sin(alpha * x)^2 / (alpha + 1e-9), per channel alpha. y may alias x.
void snake(const float * x, const float * alpha, int channels, int len, float * y, ThreadPool & pool, int x_ld = 0,
           int y_ld = 0);
// One channel of it (for fused epilogues).
void snake_row(const float * x, float alpha, int len, float * y);

// Measured sgemm rate (GFLOP/s) with `pool`: each worker multiplies its own m x k by k x n
// matrices `reps` times; the roofline the vocoder's achieved rate is compared with.
double sgemm_gflops(ThreadPool & pool, int m, int n, int k, int reps);

// Which sgemm the kernels call ("scipy-openblas 0.3.x (Haswell)" ...), for manifests.
const char * blas_description();

}  // namespace omni::cpu
