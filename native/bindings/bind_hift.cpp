#include "bindings.h"

#include "omni/cpu_probe.h"
#include "omni/errors.h"
#include "omni/hift.h"

namespace omni::bindings {

namespace {

using f32array = py::array_t<float, py::array::c_style | py::array::forcecast>;

int mel_frames(const f32array & mel) {
    if (mel.ndim() != 2 || mel.shape(0) != HiftVocoder::kMel) {
        throw InvalidArgument("mel must be a float32 array of shape (80, frames)");
    }
    if (mel.shape(1) < 1 || mel.shape(1) > 1 << 20) throw InvalidArgument("mel must have 1 to 2^20 frames");
    return static_cast<int>(mel.shape(1));
}

py::array_t<float> to_numpy(std::vector<float> && v) {
    auto * heap = new std::vector<float>(std::move(v));
    py::capsule owner(heap, [](void * p) { delete static_cast<std::vector<float> *>(p); });
    return py::array_t<float>(static_cast<py::ssize_t>(heap->size()), heap->data(), owner);
}

}  // namespace

void register_hift(py::module_ & m) {
    m.def("blas_description", &blas_description, "The sgemm the CPU kernels call.");
    m.def("sgemm_gflops", &sgemm_gflops, py::arg("threads"), py::arg("m") = 512, py::arg("n") = 512,
          py::arg("k") = 2048, py::arg("reps") = 20, py::call_guard<py::gil_scoped_release>(),
          "Measured sgemm GFLOP/s of the vocoder's BLAS on `threads` workers.");
    m.def("conv_gflops", &conv_gflops, py::arg("threads"), py::arg("out"), py::arg("in_"), py::arg("k") = 1,
          py::arg("n") = 112, py::arg("reps") = 20, py::arg("bf16") = false, py::arg("route") = "auto",
          py::call_guard<py::gil_scoped_release>(),
          "Measured GFLOP/s of one packed convolution shape: route 'auto' (as the active kernel set runs it), "
          "'tiles' (its register tiles) or 'sgemm' (im2col + the BLAS's sgemm).");
    m.def("cpu_isa", &cpu_isa, "The CPU kernel set in use: 'generic', 'avx2', 'avx512' or 'neon'.");
    m.def("cpu_isas", &cpu_isas, "The CPU kernel sets this build has and this CPU runs, best last.");
    m.def("cpu_bf16", &cpu_bf16, "Whether this CPU has BF16 dot products (AVX512_BF16).");
    m.def("force_cpu_isa", &force_cpu_isa, py::arg("name"), "Forces the CPU kernel set: 'auto' or one of cpu_isas().");
    py::class_<HiftVocoder>(m, "HiftVocoder",
                            "The HiFT vocoder alone: mel (80, frames) -> 24 kHz audio, on its CPU pool.")
        .def(py::init<const std::string &, int, const std::vector<int> &, bool>(), py::arg("path"),
             py::arg("threads") = 1, py::arg("cpus") = std::vector<int>{}, py::arg("bf16") = false,
             py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("threads", &HiftVocoder::threads)
        .def_property_readonly("bf16", &HiftVocoder::bf16)
        .def_property_readonly("base_channels", &HiftVocoder::base_channels)
        .def(
            "f0",
            [](HiftVocoder & v, f32array mel) {
                const int frames = mel_frames(mel);
                std::vector<float> out;
                {
                    py::gil_scoped_release release;
                    out = v.f0(mel.data(), frames);
                }
                return to_numpy(std::move(out));
            },
            py::arg("mel"))
        .def(
            "source",
            [](HiftVocoder & v, f32array f0) {
                if (f0.ndim() != 1 || f0.shape(0) < 1)
                    throw InvalidArgument("f0 must be a non-empty 1-D float32 array");
                std::vector<float> in(f0.data(), f0.data() + f0.shape(0)), out;
                {
                    py::gil_scoped_release release;
                    out = v.source(in);
                }
                return to_numpy(std::move(out));
            },
            py::arg("f0"))
        .def(
            "decode",
            [](HiftVocoder & v, f32array mel, f32array source) {
                const int frames = mel_frames(mel);
                if (source.ndim() != 1 ||
                    source.shape(0) != static_cast<py::ssize_t>(frames) * HiftVocoder::kSamplesPerFrame) {
                    throw InvalidArgument("source must be 1-D with 480 samples per mel frame");
                }
                std::vector<float> out;
                {
                    py::gil_scoped_release release;
                    out = v.decode(mel.data(), frames, source.data());
                }
                return to_numpy(std::move(out));
            },
            py::arg("mel"), py::arg("source"))
        .def(
            "forward",
            [](HiftVocoder & v, f32array mel, py::object cache_source) {
                const int frames = mel_frames(mel);
                std::vector<float> cache;
                if (!cache_source.is_none()) {
                    auto c = cache_source.cast<f32array>();
                    if (c.ndim() != 1) throw InvalidArgument("cache_source must be 1-D");
                    cache.assign(c.data(), c.data() + c.shape(0));
                }
                std::vector<float> audio, src;
                {
                    py::gil_scoped_release release;
                    audio = v.forward(mel.data(), frames, cache, &src);
                }
                return py::make_tuple(to_numpy(std::move(audio)), to_numpy(std::move(src)));
            },
            py::arg("mel"), py::arg("cache_source") = py::none(),
            "Vocode a mel chunk; returns (audio, excitation). cache_source replaces the excitation's first samples.");
}

}  // namespace omni::bindings
