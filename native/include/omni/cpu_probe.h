// What the CPU kernels run on: the BLAS they call and the rate it reaches on this host, for
// benchmarks (the roofline the vocoder is compared with) and environment manifests.
#pragma once

#include <string>

namespace omni {

// Which sgemm the kernels call, e.g. "scipy-openblas 0.3.x (Haswell)".
std::string blas_description();

// Measured sgemm GFLOP/s on `threads` workers: each multiplies its own m x k by k x n matrices
// `reps` times.
double sgemm_gflops(int threads, int m, int n, int k, int reps);

// Measured GFLOP/s of the packed direct-convolution kernel (the vocoder's and the native
// Token2Mel engine's) on one conv of `out` x `in` channels, k taps, n output columns, over a
// pool of `threads`; bf16 uses the BF16 kernel.
double conv_gflops(int threads, int out, int in, int k, int n, int reps, bool bf16);

// The kernel set in use ("avx512" or "generic"), whether the CPU has BF16 dot products, and a
// switch for tests and comparisons ("auto", "avx512", "generic").
std::string cpu_isa();
bool cpu_bf16();
void force_cpu_isa(const std::string & name);

}  // namespace omni
