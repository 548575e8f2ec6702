#include "ggml_weights.h"

#include "graph_check.h"

#include "graph_util.h"
#include "omni/errors.h"

namespace omni {

WeightStore::WeightStore(size_t max_tensors) {
    ggml_init_params p{ggml_tensor_overhead() * (max_tensors + 1), nullptr, true};
    ctx_ = ggml_init(p);
    if (!ctx_) throw Error("ggml_init failed for the weight context");
}

WeightStore::~WeightStore() {
    if (buffer_) ggml_backend_buffer_free(buffer_);
    if (ctx_) ggml_free(ctx_);
}

void WeightStore::add_linear(const GgufFile & file, const std::string & p, int64_t n_in, int64_t n_out, bool bias) {
    add(file, p + ".weight", {n_in, n_out});
    if (bias) add(file, p + ".bias", {n_out});
}

void WeightStore::add_norm(const GgufFile & file, const std::string & p, int64_t n) {
    add(file, p + ".weight", {n});
    add(file, p + ".bias", {n});
}

ggml_tensor * WeightStore::add(const GgufFile & file, const std::string & name, std::vector<int64_t> ne,
                               std::function<void(std::vector<float> &)> transform) {
    const GgufTensorInfo & info = file.tensor(name);
    if (info.type != GGML_TYPE_F32 && info.type != GGML_TYPE_F16) {
        throw ModelFileError(file.path(),
                             "tensor '" + name + "' is " + ggml_type_label(info.type) + ", expected f32 or f16");
    }
    int64_t want = 1, have = 1;
    for (auto v : ne) want *= v;
    for (auto v : info.ne) have *= v;
    if (want != have) {
        throw ModelFileError(
            file.path(),
            "tensor '" + name + "' has " + std::to_string(have) + " elements, expected " + std::to_string(want));
    }
    const bool raw_f16 = info.type == GGML_TYPE_F16 && keep_f16 && !transform;
    ggml_tensor * t =
        ggml_new_tensor(ctx_, raw_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32, static_cast<int>(ne.size()), ne.data());
    ggml_set_name(t, name.c_str());
    if (raw_f16) {
        pending_.push_back({t, {}, file.tensor_data(info)});
    } else {
        std::vector<float> data = file.read_f32(name);
        if (transform) transform(data);
        pending_.push_back({t, std::move(data)});
    }
    tensors_[name] = t;
    return t;
}

ggml_tensor * WeightStore::add_derived(const GgufFile & file, const std::string & name,
                                       const std::vector<int64_t> & file_ne, const std::string & stored_name,
                                       std::vector<int64_t> ne, std::function<void(std::vector<float> &)> transform) {
    const GgufTensorInfo & info = file.tensor(name);
    if ((info.type != GGML_TYPE_F32 && info.type != GGML_TYPE_F16) || info.ne != file_ne) {
        std::string want;
        for (auto v : file_ne) want += (want.empty() ? "" : ", ") + std::to_string(v);
        throw ModelFileError(file.path(), "tensor '" + name + "' must be f32 or f16 of shape [" + want + "]");
    }
    ggml_tensor * t = ggml_new_tensor(ctx_, GGML_TYPE_F32, static_cast<int>(ne.size()), ne.data());
    ggml_set_name(t, stored_name.c_str());
    std::vector<float> data = file.read_f32(name);
    transform(data);
    if (data.size() != static_cast<size_t>(ggml_nelements(t)))
        throw Error("internal: transform size mismatch for " + name);
    pending_.push_back({t, std::move(data)});
    tensors_[stored_name] = t;
    return t;
}

std::vector<ggml_tensor *> WeightStore::add_conv_taps(const GgufFile & file, const std::string & name, int in, int out,
                                                      int k) {
    std::vector<ggml_tensor *> out_taps;
    for (int kk = 0; kk < k; ++kk) {
        out_taps.push_back(add_derived(file, name, {k, in, out}, name + ".tap" + std::to_string(kk), {in, out},
                                       gu::conv_tap(in, out, k, kk)));
    }
    return out_taps;
}

std::vector<ggml_tensor *> WeightStore::taps(const std::string & name, int k) const {
    std::vector<ggml_tensor *> out;
    for (int kk = 0; kk < k; ++kk) out.push_back(get(name + ".tap" + std::to_string(kk)));
    return out;
}

void WeightStore::upload(ggml_backend_t backend) {
    buffer_ = ggml_backend_alloc_ctx_tensors(ctx_, backend);
    if (!buffer_) throw DeviceError("cannot allocate model weights on the device");
    ggml_backend_buffer_set_usage(buffer_, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    for (auto & p : pending_)
        ggml_backend_tensor_set(p.t, p.raw ? static_cast<const void *>(p.raw) : p.data.data(), 0, ggml_nbytes(p.t));
    pending_.clear();
    pending_.shrink_to_fit();
}

ggml_tensor * WeightStore::get(const std::string & name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw Error("internal: weight '" + name + "' was not declared");
    return it->second;
}

size_t WeightStore::bytes() const { return buffer_ ? ggml_backend_buffer_get_size(buffer_) : 0; }

GraphModule::~GraphModule() {
    if (galloc) ggml_gallocr_free(galloc);
}

void GraphModule::finish_loading(std::shared_ptr<Backend> b) {
    backend = std::move(b);
    w.upload(backend->get());
    galloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend->get()));
    if (!galloc) throw DeviceError("cannot create a graph allocator on " + backend->device().id);
}

ggml_tensor * GraphModule::linear(ggml_context * ctx, ggml_tensor * x, const std::string & p, bool bias) const {
    ggml_tensor * y = ggml_mul_mat(ctx, W(p + ".weight"), x);
    return bias ? ggml_add(ctx, y, W(p + ".bias")) : y;
}

void GraphModule::compute(ggml_cgraph * gf, const char * graph) {
    const std::string what = std::string(name) + " " + graph + " graph";
    record_graph(name, graph, backend->device().id, gf);
    if (!backend->is_cpu()) require_supported(backend->get(), gf, what);
    if (ggml_backend_graph_compute(backend->get(), gf) != GGML_STATUS_SUCCESS) {
        throw DeviceError(what + " failed on " + backend->device().id);
    }
}

bool GraphModule::flash_attn_supported(int head_dim) {
    auto it = flash_attn_support_.find(head_dim);
    if (it != flash_attn_support_.end()) return it->second;
    // A probe node with the shapes and types the graphs use ([dh, T, heads], F16 K/V); only
    // its description is built (no_alloc), the backend answers from that.
    ggml_init_params p{ggml_tensor_overhead() * 8, nullptr, true};
    std::unique_ptr<ggml_context, decltype(&ggml_free)> ctx(ggml_init(p), ggml_free);
    ggml_tensor * q = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, head_dim, 64, 4);
    ggml_tensor * k = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F16, head_dim, 64, 4);
    ggml_tensor * v = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F16, head_dim, 64, 4);
    ggml_tensor * o = ggml_flash_attn_ext(ctx.get(), q, k, v, nullptr, 1.0f, 0.0f, 0.0f);
    const bool ok = ggml_backend_supports_op(backend->get(), o);
    flash_attn_support_[head_dim] = ok;
    return ok;
}

}  // namespace omni
