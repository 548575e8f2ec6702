// The estimator's streaming caches as they live next to the compute (device tensors, or host
// memory on the CPU), shared by the ggml graph and the native CPU engine.
#pragma once

#include <ggml-backend.h>
#include <ggml.h>

#include <utility>
#include <vector>

namespace omni {

// Estimator caches resident on the device. Keys as [head_dim, frames, depth*heads, batch], values
// transposed as [frames, head_dim, depth*heads, batch] so attention reads both in place; two
// copies ping-pong. `stored` frames are held (this chunk first, then the bounded older ones);
// the bounding of the stored frames happens when the next call copies them forward.
struct DitDeviceState {
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buffer = nullptr;
    ggml_tensor * k[2] = {nullptr, nullptr};
    ggml_tensor * vt[2] = {nullptr, nullptr};
    ggml_tensor * cnn[2] = {nullptr, nullptr};
    int cur = 0, capacity = 0, batch = 0, stored = 0;
    ~DitDeviceState() {
        if (buffer) ggml_backend_buffer_free(buffer);
        if (ctx) ggml_free(ctx);
    }
};

// The frames of a new-first sequence of `total` frames that the bounding keeps, as (start, len).
inline std::vector<std::pair<int, int>> kept_ranges(int total, int head, int tail) {
    if (tail <= 0 || total <= head + tail) return {{0, total}};
    if (head <= 0) return {{total - tail, tail}};  // the oldest frames only
    return {{0, head}, {total - tail, tail}};
}

}  // namespace omni
