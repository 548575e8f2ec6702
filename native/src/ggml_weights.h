// Model weights copied from a GGUF file into one ggml backend buffer on the chosen device.
#pragma once

#include "omni/backend.h"
#include "omni/gguf_file.h"

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml.h>

#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

namespace omni {

class WeightStore {
public:
    explicit WeightStore(size_t max_tensors);
    ~WeightStore();
    WeightStore(const WeightStore &) = delete;
    WeightStore & operator=(const WeightStore &) = delete;

    // Declares a tensor of shape `ne` filled from `file` tensor `name` (same element count). F32
    // sources stay F32 (`transform` may reorder the host copy first); F16 sources stay F16 when
    // keep_f16 is set (and no transform is given), else they are widened to F32.
    bool keep_f16 = false;
    ggml_tensor * add(const GgufFile & file, const std::string & name, std::vector<int64_t> ne,
                      std::function<void(std::vector<float> &)> transform = nullptr);
    // A linear layer: "<p>.weight" [n_in, n_out] and, with bias, "<p>.bias" [n_out].
    void add_linear(const GgufFile & file, const std::string & p, int64_t n_in, int64_t n_out, bool bias = true);
    // A norm: "<p>.weight" and "<p>.bias", both [n].
    void add_norm(const GgufFile & file, const std::string & p, int64_t n);
    // As add(), but the tensor gets its own `stored_name` and the transform may change the
    // element count (the file tensor must have `file_ne`).
    ggml_tensor * add_derived(const GgufFile & file, const std::string & name, const std::vector<int64_t> & file_ne,
                              const std::string & stored_name, std::vector<int64_t> ne,
                              std::function<void(std::vector<float> &)> transform);
    // Declares the k taps of Conv1d weight `name` ([out][in][k] in the file) as [in, out] matrices
    // named "<name>.tap<k>".
    std::vector<ggml_tensor *> add_conv_taps(const GgufFile & file, const std::string & name, int in, int out, int k);
    std::vector<ggml_tensor *> taps(const std::string & name, int k) const;
    // Allocates the buffer on `backend` and uploads every declared tensor.
    void upload(ggml_backend_t backend);
    ggml_tensor * get(const std::string & name) const;
    size_t bytes() const;

private:
    struct Pending {
        ggml_tensor * t;
        std::vector<float> data;
        const uint8_t * raw = nullptr;  // F16 bytes in the file's mapping (kept alive by the caller)
    };
    ggml_context * ctx_ = nullptr;
    ggml_backend_buffer_t buffer_ = nullptr;
    std::map<std::string, ggml_tensor *> tensors_;
    std::vector<Pending> pending_;
};

// The parts every ggml-graph module shares: its device, weights, graph allocator and a lock
// (one graph at a time per module).
struct GraphModule {
    const char * name;  // "apm", "vpm", ...: names the module in errors and graph records
    std::shared_ptr<Backend> backend;
    WeightStore w;
    ggml_gallocr_t galloc = nullptr;
    std::mutex mutex;

    GraphModule(const char * module_name, size_t max_tensors) : name(module_name), w(max_tensors) {}
    ~GraphModule();
    GraphModule(const GraphModule &) = delete;
    GraphModule & operator=(const GraphModule &) = delete;

    // Uploads the weights to `backend` and creates the graph allocator.
    void finish_loading(std::shared_ptr<Backend> b);
    ggml_tensor * W(const std::string & n) const { return w.get(n); }
    ggml_tensor * linear(ggml_context * ctx, ggml_tensor * x, const std::string & p, bool bias = true) const;
    // Computes an allocated graph on the module's device. Off the CPU, every node is first checked
    // against the backend (a clear DeviceError instead of an abort inside ggml); the graph is
    // recorded for the CANN audit when recording is on. `graph` names it ("encode", "step").
    void compute(ggml_cgraph * gf, const char * graph);
    // Whether the device runs fused attention (ggml_flash_attn_ext) for this head size with F16
    // K/V and no mask; answered once per head size by the backend itself.
    bool flash_attn_supported(int head_dim);

private:
    std::map<int, bool> flash_attn_support_;
};

}  // namespace omni
