#include "bindings.h"

#include "omni/apm.h"
#include "omni/errors.h"
#include "omni/resample.h"

#include <cstring>

namespace omni::bindings {

namespace {

using f32mel = py::array_t<float, py::array::c_style | py::array::forcecast>;

template <typename Fn>
py::array_t<float> encode(Apm & a, const f32mel & mel, Fn fn) {
    if (mel.ndim() != 2 || mel.shape(0) != a.dims().n_mel) throw InvalidArgument("mel must be (n_mel, frames)");
    std::vector<float> out;
    int n = 0;
    {
        py::gil_scoped_release release;
        out = fn(a, mel.data(), static_cast<int>(mel.shape(1)), &n);
    }
    return to_numpy(out, {static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(a.dims().llm_embd)});
}

}  // namespace

void register_apm(py::module_ & m) {
    using f32array = py::array_t<float, py::array::c_style | py::array::forcecast>;
    py::class_<ApmDims>(m, "ApmDims", "Dimensions of the audio encoder read from its file.")
        .def_readonly("d_model", &ApmDims::d_model)
        .def_readonly("layers", &ApmDims::layers)
        .def_readonly("positions", &ApmDims::positions)
        .def_readonly("llm_embd", &ApmDims::llm_embd)
        .def_readonly("n_mel", &ApmDims::n_mel);
    py::class_<Apm>(
        m, "Apm",
        "The audio encoder (Whisper-style APM + projector + pooling): 16 kHz audio -> 10 LLM embeddings per second.")
        .def(py::init<const std::string &, const std::string &, int, bool>(), py::arg("path"),
             py::arg("device") = "cpu", py::arg("threads") = 1, py::arg("exact") = false,
             py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("dims", &Apm::dims)
        .def_property("tanh_gelu", &Apm::tanh_gelu, &Apm::set_tanh_gelu,
                      "GELU as llama.cpp-omni computes it (tanh approximation) instead of the exact erf one.")
        .def_property("f16_conv_input", &Apm::f16_conv_input, &Apm::set_f16_conv_input,
                      "The convolutions read their input rounded to F16, as llama.cpp-omni's do.")
        .def(
            "log_mel",
            [](const Apm & a, f32array audio, bool zero_tail) {
                if (audio.ndim() != 1) throw InvalidArgument("audio must be 1-D 16 kHz samples");
                std::vector<float> mel;
                int frames = 0;
                {
                    py::gil_scoped_release release;
                    mel = a.log_mel(audio.data(), static_cast<int>(audio.shape(0)), &frames, zero_tail);
                }
                return to_numpy(mel, {static_cast<py::ssize_t>(a.dims().n_mel), static_cast<py::ssize_t>(frames)});
            },
            py::arg("audio"), py::arg("zero_tail") = false,
            "16 kHz samples -> log-mel (n_mel, samples / 160); zero_tail: zeros past the end, not reflection.")
        .def(
            "encode_mel",
            [](Apm & a, f32array mel, int chunk) {
                return encode(
                    a, mel, [chunk](Apm & x, const float * m, int f, int * n) { return x.encode_mel(m, f, n, chunk); });
            },
            py::arg("mel"), py::arg("chunk") = 0,
            "Mel (n_mel, 9..3000 frames) -> LLM embeddings ((frames+1)//2//5, llm_embd); chunk > 0: block-causal "
            "attention over blocks of that many encoder positions (50 per second).")
        .def(
            "encode_mel_streaming",
            [](Apm & a, f32array mel, bool chunk_count) {
                return encode(a, mel, [chunk_count](Apm & x, const float * m, int f, int * n) {
                    return x.encode_mel_streaming(m, f, n, chunk_count);
                });
            },
            py::arg("mel"), py::arg("chunk_count") = false,
            "Next chunk of a stream (attends over the history) -> (frames/10, llm_embd); chunk_count: positioned "
            "by llama.cpp-omni's rule (the k-th chunk since the last clear at k * its length).")
        .def("reset_stream", &Apm::reset_stream, py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("stream_position", &Apm::stream_position)
        .def_property_readonly("stream_resets", &Apm::stream_resets)
        .def_property_readonly("stream_bytes", &Apm::stream_bytes)
        .def("new_stream", &Apm::new_stream, "Another Apm over the same weights with its own streaming history.");
    m.def(
        "resample_linear",
        [](f32array audio, int rate_in, int rate_out) {
            if (audio.ndim() != 1) throw InvalidArgument("audio must be 1-D samples");
            std::vector<float> y;
            {
                py::gil_scoped_release release;
                y = resample_linear(audio.data(), audio.shape(0), rate_in, rate_out);
            }
            return to_numpy(y, {static_cast<py::ssize_t>(y.size())});
        },
        py::arg("audio"), py::arg("rate_in"), py::arg("rate_out"),
        "Mono samples resampled as llama.cpp-omni's audio decoder does: linear interpolation with a 4th-order "
        "low-pass at the lower rate's Nyquist frequency.");
}

}  // namespace omni::bindings
