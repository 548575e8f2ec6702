#include "omni/cpu_probe.h"

#include "cpu_kernels.h"
#include "omni/threadpool.h"

namespace omni {

std::string blas_description() { return cpu::blas_description(); }

double sgemm_gflops(int threads, int m, int n, int k, int reps) {
    ThreadPool pool(threads);
    return cpu::sgemm_gflops(pool, m, n, k, reps);
}

}  // namespace omni
