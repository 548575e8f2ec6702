// Which code computes Token2Mel (conformer + DiT) on the CPU.
//
// Graph: ggml graphs, the same ones every device runs (CANN, CUDA, CPU). Native: our own CPU
// engine -- packed direct-convolution kernels on a work-sharing thread pool, a few fork-joins per
// layer instead of one barrier per graph node (docs/performance.md). Auto: Native on the CPU,
// Graph on an accelerator.
#pragma once

#include <string>

namespace omni {

enum class Engine { Auto, Graph, Native };

// "auto", "graph" or "native"; throws InvalidArgument otherwise.
Engine parse_engine(const std::string & name);
const char * engine_name(Engine e);
// Auto resolved for a device; Native off the CPU throws InvalidArgument.
Engine resolve_engine(Engine e, bool device_is_cpu);

}  // namespace omni
