// The flow-matching estimator of Token2Wav (DiT, docs/model-files.md) as a ggml graph on the
// session's device: in_proj -> depth x [adaLN-modulated attention, causal conv block, GELU-tanh
// MLP] -> final adaLN + linear. Dimensions come from flow_matching.gguf.
//
// Only ops the CANN backend supports are used (MUL_MAT, ADD, MUL, NORM, SOFT_MAX, PAD, CONCAT,
// EXP, CLAMP, DIV, SIGMOID, SILU, SCALE without bias, views); GELU and Mish are composed from them, which
// also keeps the CPU result exact (ggml's CPU GELU goes through an fp16 table).
#pragma once

#include "omni/backend.h"
#include "omni/token2mel_impl.h"
#include "omni/threadpool.h"

#include <memory>
#include <string>
#include <vector>

namespace omni {

struct DitDims {
    int in_channels = 320, out_channels = 80, hidden = 0, heads = 0, head_dim = 0, depth = 0, mlp = 0;
};

// Per-block streaming caches of one estimator call (one CFM step), ggml layouts:
// cnn [2*hidden, 2, depth, batch] (the two causal convs' last 2 input frames, conv1 channels
// first); att [2*head_dim, frames, depth*heads, batch] (K then V; the newest chunk first, as the
// reference concatenates them).
struct DitDeviceState;  // cache tensors resident on the estimator's device (see to_device)

struct DitCache {
    std::vector<float> cnn, att;  // host copies (empty while the cache lives on the device)
    int att_frames = 0;
    // Bounding applied after every call once the attention frames exceed head + tail: keep the
    // first `keep_head` and the last `keep_tail` frames (0, 0: unbounded).
    int keep_head = 0, keep_tail = 0;
    std::shared_ptr<DitDeviceState> device;
    size_t bytes() const;  // host vectors plus the resident device buffer
};

// Keeps the first `head` and last `tail` frames of each slab of a [slabs][frames][row] buffer.
std::vector<float> keep_head_tail(const std::vector<float> & v, size_t slabs, int frames, int row, int head, int tail);

class DitEstimator {
public:
    // device: "cpu", "cuda:0", "cann:0", ...; threads applies to the CPU backend (and the native
    // code's pool). token2mel: graphs or native CPU code (omni/token2mel_impl.h); bf16 (native
    // only) runs its linear layers and convolutions in BF16.
    DitEstimator(const std::string & flow_matching_gguf, const std::string & device, int threads,
                 Token2MelImpl token2mel = Token2MelImpl::Auto, bool bf16 = false);
    // pool: the native code's workers (shared with the conformer); null makes one.
    DitEstimator(const std::string & flow_matching_gguf, std::shared_ptr<Backend> backend,
                 std::shared_ptr<ThreadPool> pool = nullptr, Token2MelImpl token2mel = Token2MelImpl::Auto,
                 bool bf16 = false);
    ~DitEstimator();
    DitEstimator(const DitEstimator &) = delete;
    DitEstimator & operator=(const DitEstimator &) = delete;

    const DitDims & dims() const;
    Token2MelImpl token2mel() const;
    const DeviceInfo & device() const;
    // Bytes of the weights: the device buffer of the graphs, or the native code's packed copies.
    size_t weight_bytes() const;

    // One estimator call without caches (full attention over the T frames).
    // x, mu, cond: [B][80][T]; t: [B] (flow time in [0, 1]); spks: [B][80]. Returns [B][80][T].
    std::vector<float> forward(const float * x, const float * mu, const float * t, const float * spks,
                               const float * cond, int batch, int frames);

    // One streaming call: attends over the cached frames plus this chunk and continues the
    // causal convs from their cache. `cache` may be empty (first chunk); it is replaced by the
    // new cache (frames = cached + this chunk).
    std::vector<float> forward_chunk(const float * x, const float * mu, const float * t, const float * spks,
                                     const float * cond, int batch, int frames, DitCache & cache);

    // Moves a cache onto the device (capacity: the most attention frames it will ever hold
    // before bounding, i.e. keep_head + keep_tail + the longest chunk). Later calls then read
    // and update it there in place (one copy), with no host copies.
    void to_device(DitCache & cache, int batch, int capacity_frames);
    // Copies a device cache back into its host vectors (for inspection and tests).
    void to_host(DitCache & cache);

private:
    std::vector<float> run(const float * x, const float * mu, const float * t, const float * spks, const float * cond,
                           int batch, int frames, DitCache * cache);

    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace omni
