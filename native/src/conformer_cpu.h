// The Token2Wav conformer encoder computed natively on the CPU (token2mel "native"): the arithmetic
// of the ggml graph in conformer.cpp on packed direct-convolution kernels and the shared pool,
// eight fork-joins per layer.
#pragma once

#include "omni/conformer.h"
#include "omni/gguf_file.h"
#include "omni/threadpool.h"

#include <memory>

namespace omni {

class ConformerCpu {
public:
    ConformerCpu(const GgufFile & g, const ConformerDims & dims, std::shared_ptr<ThreadPool> pool, bool bf16);
    ~ConformerCpu();

    // As ConformerEncoder::forward_chunk (arguments already checked).
    ConformerChunk forward_chunk(const float * xs, int frames, bool last_chunk, const float * cnn_cache,
                                 const float * att_cache, int att_frames);
    // Bytes of the packed weights and norms (shared by every stream of a Token2Wav).
    size_t weight_bytes() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace omni
