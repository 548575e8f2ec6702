#include "omni/backend.h"

#include "omni/errors.h"

#include <ggml-backend.h>
#include <ggml.h>
#include <llama.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <memory>

namespace omni {

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

struct DeviceEntry {
    DeviceInfo info;
    ggml_backend_dev_t dev;
};

std::vector<DeviceEntry> enumerate() {
    std::vector<DeviceEntry> out;
    std::map<std::string, int> per_backend;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        const auto type = ggml_backend_dev_type(dev);
        // ACCEL devices (BLAS, AMX) extend the CPU backend; they are not places to run a graph.
        if (type != GGML_BACKEND_DEVICE_TYPE_CPU && type != GGML_BACKEND_DEVICE_TYPE_GPU &&
            type != GGML_BACKEND_DEVICE_TYPE_IGPU) {
            continue;
        }
        ggml_backend_dev_props props{};
        ggml_backend_dev_get_props(dev, &props);
        DeviceEntry e{DeviceInfo{}, dev};
        e.info.backend = lower(ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev)));
        e.info.index = per_backend[e.info.backend]++;
        e.info.id = type == GGML_BACKEND_DEVICE_TYPE_CPU ? std::string("cpu")
                                                         : e.info.backend + ":" + std::to_string(e.info.index);
        e.info.ggml_name = props.name ? props.name : "";
        e.info.description = props.description ? props.description : "";
        e.info.pci_bus_id = props.device_id ? lower(props.device_id) : "";
        e.info.memory_free = props.memory_free;
        e.info.memory_total = props.memory_total;
        out.push_back(std::move(e));
    }
    return out;
}

ggml_backend_dev_t find_dev(const std::string & id, DeviceInfo & info) {
    auto all = enumerate();
    for (auto & e : all) {
        if (e.info.id == id) {
            info = e.info;
            return e.dev;
        }
    }
    std::string have;
    for (auto & e : all) have += (have.empty() ? "" : ", ") + e.info.id;
    throw DeviceError("device '" + id + "' is not available (this build has: " + have + ")");
}

}  // namespace

std::vector<DeviceInfo> list_devices() {
    std::vector<DeviceInfo> out;
    for (auto & e : enumerate()) out.push_back(e.info);
    return out;
}

std::vector<std::string> compiled_backends() {
    std::vector<std::string> out;
    for (size_t i = 0; i < ggml_backend_reg_count(); ++i) {
        out.push_back(lower(ggml_backend_reg_name(ggml_backend_reg_get(i))));
    }
    return out;
}

DeviceInfo find_device(const std::string & id) {
    DeviceInfo info;
    find_dev(id, info);
    return info;
}

Backend::Backend(const std::string & device_id, int n_threads) {
    ggml_backend_dev_t dev = find_dev(device_id, info_);
    backend_ = ggml_backend_dev_init(dev, nullptr);
    if (!backend_) throw DeviceError("failed to initialise device '" + device_id + "' (" + info_.description + ")");
    set_threads(n_threads);
}

Backend::~Backend() {
    if (backend_) ggml_backend_free(backend_);
}

void Backend::set_threads(int n_threads) {
    // ggml starts one OS thread per count: an absurd count would exhaust the process.
    if (n_threads > kMaxThreads) {
        throw InvalidArgument("threads must be at most " + std::to_string(kMaxThreads) + ", got " +
                              std::to_string(n_threads));
    }
    if (!is_cpu() || n_threads <= 0) return;
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(ggml_backend_get_device(backend_));
    auto fn = reinterpret_cast<ggml_backend_set_n_threads_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads"));
    if (!fn) throw DeviceError("the CPU backend does not export ggml_backend_set_n_threads");
    fn(backend_, n_threads);
    n_threads_ = n_threads;
}

std::vector<float> run_probe_graph(Backend & backend, int n) {
    if (n <= 0 || n > 4096) throw InvalidArgument("probe size must be in 1..4096, got " + std::to_string(n));
    ggml_init_params params{ggml_tensor_overhead() * 16 + ggml_graph_overhead(), nullptr, true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> ctx(ggml_init(params), ggml_free);
    if (!ctx) throw Error("ggml_init failed");

    ggml_tensor * w = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F16, n, n);
    ggml_tensor * x = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, n, 4);
    ggml_tensor * b = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, n);
    ggml_tensor * y =
        ggml_soft_max(ctx.get(), ggml_gelu(ctx.get(), ggml_add(ctx.get(), ggml_mul_mat(ctx.get(), w, x), b)));
    ggml_cgraph * gf = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(gf, y);

    // One buffer holds inputs and intermediates: the graph is tiny, no allocator reuse needed.
    std::unique_ptr<ggml_backend_buffer, decltype(&ggml_backend_buffer_free)> buf(
        ggml_backend_alloc_ctx_tensors(ctx.get(), backend.get()), ggml_backend_buffer_free);
    if (!buf) throw DeviceError("cannot allocate probe tensors on " + backend.device().id);

    // Deterministic inputs with a simple closed form, so the host and device see the same values.
    std::vector<ggml_fp16_t> wv(static_cast<size_t>(n) * n);
    for (int r = 0; r < n; ++r)
        for (int c = 0; c < n; ++c)
            wv[r * n + c] = ggml_fp32_to_fp16(std::sin(0.37f * r + 0.11f * c) / std::sqrt(float(n)));
    std::vector<float> xv(static_cast<size_t>(n) * 4), bv(n);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::cos(0.05f * static_cast<float>(i));
    for (int i = 0; i < n; ++i) bv[i] = 0.01f * static_cast<float>(i % 7);
    ggml_backend_tensor_set(w, wv.data(), 0, ggml_nbytes(w));
    ggml_backend_tensor_set(x, xv.data(), 0, ggml_nbytes(x));
    ggml_backend_tensor_set(b, bv.data(), 0, ggml_nbytes(b));

    if (ggml_backend_graph_compute(backend.get(), gf) != GGML_STATUS_SUCCESS) {
        throw DeviceError("probe graph failed on " + backend.device().id);
    }
    std::vector<float> out(ggml_nelements(y));
    ggml_backend_tensor_get(y, out.data(), 0, ggml_nbytes(y));
    return out;
}

std::string ggml_version_string() { return std::string(ggml_version()) + " (" + ggml_commit() + ")"; }

std::string llama_system_info_string() { return llama_print_system_info(); }

}  // namespace omni
