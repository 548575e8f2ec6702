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

}  // namespace omni
