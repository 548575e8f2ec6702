// The DiT estimator computed natively on the CPU (token2mel "native"): the same arithmetic as the
// ggml graph in dit.cpp, on packed direct-convolution kernels and a shared work-sharing pool,
// with the CFG pair as one batch of columns. Per block 9 fork-joins (the graph: ~100 nodes).
// The adaLN modulation depends on t only, so it is computed once per distinct t and reused
// (the 5 CFM times of a stream repeat every window).
#pragma once

#include "dit_state.h"
#include "omni/dit.h"
#include "omni/gguf_file.h"
#include "omni/threadpool.h"

#include <memory>
#include <vector>

namespace omni {

class DitCpu {
public:
    DitCpu(const GgufFile & g, const DitDims & dims, std::shared_ptr<ThreadPool> pool, bool bf16);
    ~DitCpu();

    // As DitEstimator::forward_chunk on a resident cache (dev) or without one (dev null). x, mu,
    // cond: [B][80][T]; t: [B]; spks: [B][80]. Returns [B][80][T].
    std::vector<float> run(const float * x, const float * mu, const float * t, const float * spks, const float * cond,
                           int B, int T, DitDeviceState * dev, int keep_head, int keep_tail);
    // Bytes of the packed weights and the small host ones (shared by every stream).
    size_t weight_bytes() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace omni
