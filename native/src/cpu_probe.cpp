#include "omni/cpu_probe.h"

#include "cpu_kernels.h"
#include "omni/errors.h"
#include "packed_conv.h"

#include <chrono>
#include "omni/threadpool.h"

namespace omni {

std::string blas_description() { return cpu::blas_description(); }

double sgemm_gflops(int threads, int m, int n, int k, int reps) {
    ThreadPool pool(threads);
    return cpu::sgemm_gflops(pool, m, n, k, reps);
}

double conv_gflops(int threads, int out, int in, int k, int n, int reps, bool bf16, const std::string & route) {
    if (out < 1 || in < 1 || k < 1 || n < 1 || reps < 1) throw InvalidArgument("conv_gflops: sizes must be positive");
    ThreadPool pool(threads);
    std::vector<float> w(static_cast<size_t>(out) * in * k, 0.01f);
    if (route != "auto" && route != "tiles" && route != "sgemm")
        throw InvalidArgument("route must be 'auto', 'tiles' or 'sgemm', got '" + route + "'");
    const cpu::PackedConv pc = cpu::pack_conv(w.data(), nullptr, out, in, k, 1, (k - 1) / 2, bf16, route == "sgemm");
    cpu::Rows x, y;
    x.shape(in, n);
    y.shape(out, n);
    std::fill_n(x.data(), static_cast<size_t>(in) * x.ld - x.margin, 0.5f);
    std::vector<uint16_t> pairs;
    cpu::ConvArgs a = cpu::rows_conv_args(pc, x, y, n, bf16 ? cpu::Precision::BF16 : cpu::Precision::F32, pairs, pool);
    a.route = route == "sgemm" ? cpu::ConvArgs::Route::Sgemm
        : route == "tiles"     ? cpu::ConvArgs::Route::Tiles
                               : cpu::ConvArgs::Route::Auto;
    cpu::conv(pc, a, pool);  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) cpu::conv(pc, a, pool);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return 2.0 * out * in * k * static_cast<double>(n) * reps / s / 1e9;
}

std::string cpu_isa() { return cpu::isa_name(); }
bool cpu_bf16() { return cpu::cpu_has_bf16(); }
void force_cpu_isa(const std::string & name) { cpu::force_isa(name); }
std::vector<std::string> cpu_isas() { return cpu::available_isas(); }

}  // namespace omni
