#include "bindings.h"

#include "omni/dit.h"
#include "omni/errors.h"

#include <cstring>

namespace omni::bindings {

void register_dit(py::module_ & m) {
    using f32array = py::array_t<float, py::array::c_style | py::array::forcecast>;
    py::class_<DitDims>(m, "DitDims", "Dimensions of the Token2Wav flow-matching estimator (DiT).")
        .def_readonly("hidden", &DitDims::hidden)
        .def_readonly("heads", &DitDims::heads)
        .def_readonly("head_dim", &DitDims::head_dim)
        .def_readonly("depth", &DitDims::depth)
        .def_readonly("mlp", &DitDims::mlp);

    py::class_<DitEstimator>(m, "DitEstimator",
                             "The DiT estimator alone: one CFM velocity call, with or without streaming caches.")
        .def(py::init([](const std::string & path, const std::string & device, int threads,
                         const std::string & token2mel, bool bf16) {
                 return std::make_unique<DitEstimator>(path, device, threads, parse_token2mel_impl(token2mel), bf16);
             }),
             py::arg("path"), py::arg("device") = "cpu", py::arg("threads") = 1, py::arg("token2mel") = "auto",
             py::arg("bf16") = false, py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("token2mel", [](const DitEstimator & e) { return token2mel_impl_name(e.token2mel()); })
        .def_property_readonly("dims", &DitEstimator::dims)
        .def_property_readonly("device", &DitEstimator::device)
        .def(
            "forward",
            [](DitEstimator & e, f32array x, f32array mu, f32array t, f32array spks, f32array cond) {
                if (x.ndim() != 3 || x.shape(1) != 80) throw InvalidArgument("x must be (batch, 80, frames)");
                const auto B = x.shape(0), T = x.shape(2);
                auto same = [&](const f32array & a, const char * name) {
                    if (a.ndim() != 3 || a.shape(0) != B || a.shape(1) != 80 || a.shape(2) != T)
                        throw InvalidArgument(std::string(name) + " must have the shape of x");
                };
                same(mu, "mu");
                same(cond, "cond");
                if (t.ndim() != 1 || t.shape(0) != B) throw InvalidArgument("t must be (batch,)");
                if (spks.ndim() != 2 || spks.shape(0) != B || spks.shape(1) != 80)
                    throw InvalidArgument("spks must be (batch, 80)");
                std::vector<float> out;
                {
                    py::gil_scoped_release release;
                    out = e.forward(x.data(), mu.data(), t.data(), spks.data(), cond.data(), static_cast<int>(B),
                                    static_cast<int>(T));
                }
                return to_numpy(out, {B, static_cast<py::ssize_t>(80), T});
            },
            py::arg("x"), py::arg("mu"), py::arg("t"), py::arg("spks"), py::arg("cond"),
            "One estimator call without caches; arrays (batch, 80, frames), t (batch,), spks (batch, 80).")
        .def(
            "forward_chunk",
            [](DitEstimator & e, f32array x, f32array mu, f32array t, f32array spks, f32array cond,
               py::object cnn_cache, py::object att_cache) {
                if (x.ndim() != 3 || x.shape(1) != 80) throw InvalidArgument("x must be (batch, 80, frames)");
                const auto B = x.shape(0), T = x.shape(2);
                const DitDims & d = e.dims();
                DitCache cache;
                if (!cnn_cache.is_none() && !att_cache.is_none()) {
                    auto cnn = cnn_cache.cast<f32array>();
                    auto att = att_cache.cast<f32array>();
                    if (att.ndim() != 4 || att.shape(0) != B || att.shape(1) != d.depth * d.heads ||
                        att.shape(3) != 2 * d.head_dim)
                        throw InvalidArgument("att_cache must be (batch, depth*heads, frames, 2*head_dim)");
                    cache.cnn.assign(cnn.data(), cnn.data() + cnn.size());
                    cache.att.assign(att.data(), att.data() + att.size());
                    cache.att_frames = static_cast<int>(att.shape(2));
                }
                std::vector<float> out;
                {
                    py::gil_scoped_release release;
                    out = e.forward_chunk(x.data(), mu.data(), t.data(), spks.data(), cond.data(), static_cast<int>(B),
                                          static_cast<int>(T), cache);
                }
                return py::make_tuple(
                    to_numpy(out, {B, 80, T}),
                    to_numpy(cache.cnn,
                             {B, static_cast<py::ssize_t>(d.depth), 2, static_cast<py::ssize_t>(2 * d.hidden)}),
                    to_numpy(cache.att,
                             {B, static_cast<py::ssize_t>(d.depth * d.heads),
                              static_cast<py::ssize_t>(cache.att_frames), static_cast<py::ssize_t>(2 * d.head_dim)}));
            },
            py::arg("x"), py::arg("mu"), py::arg("t"), py::arg("spks"), py::arg("cond"),
            py::arg("cnn_cache") = py::none(), py::arg("att_cache") = py::none(),
            "Streaming call -> (out, cnn_cache (batch, depth, 2, 2*hidden), att_cache (batch, depth*heads, frames, "
            "2*head_dim)).");
}

}  // namespace omni::bindings
