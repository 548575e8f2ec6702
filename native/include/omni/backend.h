// Devices and backends of the linked ggml build.
//
// Device ids are our own, stable spelling: "cpu", "<backend>:<index>" for accelerators
// ("cuda:0", "cann:0", "vulkan:1", "metal:0"), the index counting devices of that backend.
// Nothing here falls back to another device: asking for a device that is not present throws.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

struct ggml_backend;
struct ggml_backend_device;

namespace omni {

struct DeviceInfo {
    std::string id;  // "cpu", "cuda:0", "cann:0", ...
    std::string backend;  // lower-case backend name: "cpu", "cuda", "cann", ...
    int index = 0;  // index among the devices of that backend
    std::string ggml_name;  // ggml's device name ("CPU", "CUDA0", "CANN0")
    std::string description;
    std::string pci_bus_id;  // lower-case "dddd:bb:dd.f" when the backend reports it, else ""
    size_t memory_free = 0;
    size_t memory_total = 0;
};

// Selectable compute devices (the CPU plus every GPU-type device), in ggml's order.
std::vector<DeviceInfo> list_devices();

// Lower-case names of the backends compiled into the linked ggml ("cpu", "cuda", "blas", ...),
// whether or not a device of that backend is present.
std::vector<std::string> compiled_backends();

// Looks up a device by id. Throws DeviceError naming what is available when it is absent.
DeviceInfo find_device(const std::string & id);

// An initialised ggml backend on one device (RAII).
class Backend {
public:
    static constexpr int kMaxThreads = 1024;  // per backend; more is a mistake, not a setting

    // n_threads applies to the CPU backend only (<= 0 keeps ggml's default).
    Backend(const std::string & device_id, int n_threads);
    ~Backend();
    Backend(const Backend &) = delete;
    Backend & operator=(const Backend &) = delete;

    const DeviceInfo & device() const { return info_; }
    ggml_backend * get() const { return backend_; }
    bool is_cpu() const { return info_.backend == "cpu"; }
    void set_threads(int n_threads);
    int threads() const { return n_threads_; }

private:
    DeviceInfo info_;
    ggml_backend * backend_ = nullptr;
    int n_threads_ = 0;
};

// Runs a small fixed graph (matmul + bias + GELU + softmax) on the device and returns its
// output; comparing it with the CPU result proves that the backend computes, not just loads.
std::vector<float> run_probe_graph(Backend & backend, int n);

// Version strings of the linked libraries.
std::string ggml_version_string();
std::string llama_system_info_string();

}  // namespace omni
