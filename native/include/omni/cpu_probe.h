// What the CPU kernels run on: the BLAS they call and the rate it reaches on this host, for
// benchmarks (the roofline the vocoder is compared with) and environment manifests.
#pragma once

#include <string>
#include <vector>

namespace omni {

// Which sgemm the kernels call, e.g. "scipy-openblas 0.3.x (Haswell)".
std::string blas_description();

// Measured sgemm GFLOP/s on `threads` workers: each multiplies its own m x k by k x n matrices
// `reps` times.
double sgemm_gflops(int threads, int m, int n, int k, int reps);

// Measured GFLOP/s of the packed direct-convolution kernel (the vocoder's and the native
// Token2Mel's) on one conv of `out` x `in` channels, k taps, n output columns, over a
// pool of `threads`; bf16 uses the BF16 kernel. route: "auto" (as the active kernel set runs
// convolutions), "tiles" (its register tiles) or "sgemm" (im2col + the BLAS's sgemm).
double conv_gflops(int threads, int out, int in, int k, int n, int reps, bool bf16, const std::string & route = "auto");

// The CPU kernel set in use ("generic", "avx2", "avx512" or "neon"), whether it has BF16 dot
// products, a switch for tests and comparisons ("auto" or a set's name; DeviceError for a set
// this CPU cannot run), and the sets this build has that this CPU runs (best last).
std::string cpu_isa();
bool cpu_bf16();
void force_cpu_isa(const std::string & name);
std::vector<std::string> cpu_isas();

}  // namespace omni
