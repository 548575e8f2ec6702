#include "bindings.h"

#include "omni/conformer.h"
#include "omni/errors.h"

#include <cstring>

namespace omni::bindings {

namespace {}  // namespace

void register_conformer(py::module_ & m) {
    using f32array = py::array_t<float, py::array::c_style | py::array::forcecast>;
    py::class_<ConformerDims>(m, "ConformerDims", "Dimensions of the Token2Wav conformer encoder.")
        .def_readonly("d", &ConformerDims::d)
        .def_readonly("heads", &ConformerDims::heads)
        .def_readonly("d_head", &ConformerDims::d_head)
        .def_readonly("ff", &ConformerDims::ff)
        .def_readonly("blocks", &ConformerDims::blocks)
        .def_readonly("up_blocks", &ConformerDims::up_blocks);

    py::class_<ConformerEncoder>(m, "ConformerEncoder", "The Token2Wav conformer encoder alone, in its streaming form.")
        .def(py::init([](const std::string & path, const std::string & device, int threads,
                         const std::string & token2mel, bool bf16) {
                 return std::make_unique<ConformerEncoder>(path, std::make_shared<Backend>(device, threads), nullptr,
                                                           parse_token2mel_impl(token2mel), bf16);
             }),
             py::arg("path"), py::arg("device") = "cpu", py::arg("threads") = 1, py::arg("token2mel") = "auto",
             py::arg("bf16") = false, py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("dims", &ConformerEncoder::dims)
        .def_property_readonly("token2mel",
                               [](const ConformerEncoder & e) { return token2mel_impl_name(e.token2mel()); })
        .def(
            "forward_chunk",
            [](ConformerEncoder & e, f32array xs, bool last_chunk, py::object cnn_cache, py::object att_cache) {
                const ConformerDims & d = e.dims();
                if (xs.ndim() != 2 || xs.shape(1) != d.in)
                    throw InvalidArgument("xs must be (frames, " + std::to_string(d.in) + ")");
                f32array cnn, att;
                const float * cnn_p = nullptr;
                const float * att_p = nullptr;
                int att_frames = 0;
                if (!cnn_cache.is_none()) {
                    cnn = cnn_cache.cast<f32array>();
                    if (cnn.ndim() != 2 || cnn.shape(0) != 6 || cnn.shape(1) != d.d)
                        throw InvalidArgument("cnn_cache must be (6, d)");
                    cnn_p = cnn.data();
                }
                if (!att_cache.is_none()) {
                    att = att_cache.cast<f32array>();
                    if (att.ndim() != 4 || att.shape(0) != d.blocks + d.up_blocks || att.shape(1) != d.heads ||
                        att.shape(3) != 2 * d.d_head)
                        throw InvalidArgument("att_cache must be (layers, heads, frames, 2*d_head)");
                    att_p = att.data();
                    att_frames = static_cast<int>(att.shape(2));
                }
                ConformerChunk out;
                {
                    py::gil_scoped_release release;
                    out =
                        e.forward_chunk(xs.data(), static_cast<int>(xs.shape(0)), last_chunk, cnn_p, att_p, att_frames);
                }
                return py::make_tuple(
                    to_numpy(out.h, {out.frames, d.d}), to_numpy(out.cnn_cache, {6, d.d}),
                    to_numpy(out.att_cache, {d.blocks + d.up_blocks, d.heads, out.att_frames, 2 * d.d_head}));
            },
            py::arg("xs"), py::arg("last_chunk") = false, py::arg("cnn_cache") = py::none(),
            py::arg("att_cache") = py::none(),
            "Streaming encoder chunk -> (h (2*frames', d), cnn_cache (6, d), att_cache (layers, heads, T, 2*d_head)).");
    m.def("rel_position_table", &rel_position_table, py::arg("d"), py::arg("size"));
}

}  // namespace omni::bindings
