#include "bindings.h"

#include "omni/errors.h"
#include "omni/vpm.h"

#include <cstring>
#include <optional>

namespace omni::bindings {

void register_vpm(py::module_ & m) {
    using f32array = py::array_t<float, py::array::c_style | py::array::forcecast>;
    py::class_<VpmDims>(m, "VpmDims", "Dimensions of the vision encoder read from its file.")
        .def_readonly("hidden", &VpmDims::hidden)
        .def_readonly("layers", &VpmDims::layers)
        .def_readonly("heads", &VpmDims::heads)
        .def_readonly("resampler_heads", &VpmDims::res_heads)
        .def_readonly("patch", &VpmDims::patch)
        .def_readonly("grid", &VpmDims::grid)
        .def_readonly("llm_embd", &VpmDims::llm_embd)
        .def_readonly("queries", &VpmDims::queries)
        .def_property_readonly("max_side", &VpmDims::max_side)
        .def_property_readonly("mean", [](const VpmDims & d) { return std::vector<float>(d.mean, d.mean + 3); })
        .def_property_readonly("std", [](const VpmDims & d) { return std::vector<float>(d.std, d.std + 3); });
    py::class_<Vpm>(m, "Vpm", "The vision encoder (SigLIP + resampler): a normalised image -> 64 LLM embeddings.")
        .def(py::init([](const std::string & path, const std::string & device, int threads, bool exact,
                         std::optional<std::vector<int>> flash_attn_dims) {
                 py::gil_scoped_release release;
                 return std::make_unique<Vpm>(path, device, threads, exact,
                                              flash_attn_dims.value_or(std::vector<int>{}),
                                              flash_attn_dims.has_value());
             }),
             py::arg("path"), py::arg("device") = "cpu", py::arg("threads") = 1, py::arg("exact") = false,
             py::arg("flash_attn_dims") = py::none(),
             "flash_attn_dims: head sizes that use fused attention (None: those the device supports).")
        .def_property_readonly("dims", &Vpm::dims)
        .def(
            "encode",
            [](Vpm & v, f32array pixels) {
                const bool batched = pixels.ndim() == 4;
                const py::ssize_t c = batched ? 1 : 0;
                if ((pixels.ndim() != 3 && !batched) || pixels.shape(c) != 3)
                    throw InvalidArgument("pixels must be (3, height, width) or (batch, 3, height, width)");
                const int batch = batched ? static_cast<int>(pixels.shape(0)) : 1;
                std::vector<float> out;
                {
                    py::gil_scoped_release release;
                    out = v.encode_batch(pixels.data(), batch, static_cast<int>(pixels.shape(c + 1)),
                                         static_cast<int>(pixels.shape(c + 2)));
                }
                const auto q = static_cast<py::ssize_t>(v.dims().queries),
                           e = static_cast<py::ssize_t>(v.dims().llm_embd);
                return batched ? to_numpy(out, {static_cast<py::ssize_t>(batch), q, e}) : to_numpy(out, {q, e});
            },
            py::arg("pixels"),
            "Normalised (3, h, w) image, sides multiples of the patch -> (64, llm_embd); (batch, 3, h, w) images "
            "of one size in one graph evaluation -> (batch, 64, llm_embd).");
    m.def("bucketed_position_ids", &bucketed_position_ids, py::arg("rows"), py::arg("cols"), py::arg("grid") = 70);
    m.def(
        "resampler_positions",
        [](int rows, int cols, int dim) {
            return to_numpy(resampler_positions(rows, cols, dim),
                            {static_cast<py::ssize_t>(rows) * cols, static_cast<py::ssize_t>(dim)});
        },
        py::arg("rows"), py::arg("cols"), py::arg("dim"));
}

}  // namespace omni::bindings
