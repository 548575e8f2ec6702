// Which code computes Token2Mel (conformer + DiT) on the CPU: the `token2mel` option.
//
// Graph: ggml graphs, the same ones every device runs (CANN, CUDA, CPU). Native: our own CPU
// code -- packed direct-convolution kernels on a work-sharing thread pool, a few fork-joins per
// layer instead of one barrier per graph node (docs/performance.md). Auto: Native on the CPU,
// Graph on an accelerator.
#pragma once

#include <string>

namespace omni {

enum class Token2MelImpl { Auto, Graph, Native };

// "auto", "graph" or "native"; throws InvalidArgument otherwise.
Token2MelImpl parse_token2mel_impl(const std::string & name);
const char * token2mel_impl_name(Token2MelImpl impl);
// Auto resolved for a device; Native off the CPU throws InvalidArgument.
Token2MelImpl resolve_token2mel_impl(Token2MelImpl impl, bool device_is_cpu);

}  // namespace omni
