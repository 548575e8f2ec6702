// The flow-matching estimator of Token2Wav (DiT, engine-spec §2.5.3) as a ggml graph on the
// session's device: in_proj -> depth x [adaLN-modulated attention, causal conv block, GELU-tanh
// MLP] -> final adaLN + linear. Dimensions come from flow_matching.gguf.
//
// Only ops the CANN backend supports are used (MUL_MAT, ADD, MUL, NORM, SOFT_MAX, PAD, CONCAT,
// EXP, LOG, TANH, SILU, SCALE without bias, views); GELU and Mish are composed from them, which
// also keeps the CPU result exact (ggml's CPU GELU goes through an fp16 table).
#pragma once

#include "omni/backend.h"

#include <memory>
#include <string>
#include <vector>

namespace omni {

struct DitDims {
    int in_channels = 320, out_channels = 80, hidden = 0, heads = 0, head_dim = 0, depth = 0, mlp = 0;
};

class DitEstimator {
public:
    // device: "cpu", "cuda:0", "cann:0", ...; threads applies to the CPU backend.
    DitEstimator(const std::string & flow_matching_gguf, const std::string & device, int threads);
    ~DitEstimator();
    DitEstimator(const DitEstimator &) = delete;
    DitEstimator & operator=(const DitEstimator &) = delete;

    const DitDims & dims() const;
    const DeviceInfo & device() const;

    // One estimator call without caches (full attention over the T frames).
    // x, mu, cond: [B][80][T]; t: [B] (flow time in [0, 1]); spks: [B][80]. Returns [B][80][T].
    std::vector<float> forward(const float * x, const float * mu, const float * t, const float * spks,
                               const float * cond, int batch, int frames);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace omni
