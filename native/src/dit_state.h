// The estimator's streaming caches as they live next to the compute (device tensors, or host
// memory on the CPU), shared by the ggml graph and the native CPU code.
#pragma once

#include <ggml-backend.h>
#include <ggml.h>

#include <utility>
#include <vector>

namespace omni {

// Estimator caches resident on the device. Keys as [head_dim, frames, depth*heads, batch], values
// transposed as [frames, head_dim, depth*heads, batch] so attention reads both in place. One copy,
// updated in place: a call first moves the kept older frames back behind this chunk's frames
// (through a temporary of one block's size in the graph, with memmove on the CPU), then writes
// the chunk's at the front; each block's conv cache is read before it is overwritten. `stored`
// frames are held (this chunk first, then the bounded older ones); the bounding of the stored
// frames happens when the next call moves them.
struct DitDeviceState {
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buffer = nullptr;
    ggml_tensor * k = nullptr;
    ggml_tensor * vt = nullptr;
    ggml_tensor * cnn = nullptr;
    int capacity = 0, batch = 0, stored = 0;
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

// Where the kept ranges go: packed one after the other from frame `first`.
// Moving them in this order within one buffer never overwrites a range not yet moved: the
// shift (destination - source) falls from range to range, so the ranges moving later in the
// buffer come first (last to first), then those moving earlier (first to last).
inline std::vector<std::pair<int, int>> kept_moves(const std::vector<std::pair<int, int>> & ranges, int first) {
    std::vector<std::pair<int, int>> dst;  // (range index, destination frame), in a safe order
    int off = first;
    for (size_t j = 0; j < ranges.size(); ++j) {
        dst.emplace_back(static_cast<int>(j), off);
        off += ranges[j].second;
    }
    std::vector<std::pair<int, int>> later, earlier;
    for (auto & m : dst) (m.second > ranges[m.first].first ? later : earlier).push_back(m);
    std::vector<std::pair<int, int>> order(later.rbegin(), later.rend());
    order.insert(order.end(), earlier.begin(), earlier.end());
    return order;
}

}  // namespace omni
