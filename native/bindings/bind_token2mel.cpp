#include "bindings.h"

#include "omni/errors.h"
#include "omni/token2mel.h"

#include <cstring>

namespace omni::bindings {

void register_token2mel(py::module_ & m) {
    using f32array = py::array_t<float, py::array::c_style | py::array::forcecast>;
    using i32array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

    py::class_<Token2MelCache>(m, "Token2MelCache", "Streaming state of one Token2Mel stream (caches + noise RNG).")
        .def(py::init<>())
        .def(py::init([](uint32_t seed) {
                 auto c = std::make_unique<Token2MelCache>();
                 c->rng.seed(seed);
                 return c;
             }),
             py::arg("seed"))
        .def_property_readonly("conformer_frames", [](const Token2MelCache & c) { return c.conformer_frames; })
        .def_property_readonly(
            "estimator_frames",
            [](const Token2MelCache & c) { return c.estimator.empty() ? 0 : c.estimator[0].att_frames; })
        .def("estimator_att", [](const Token2MelCache & c, int step) {
            const auto & v = c.estimator.at(step).att;
            return to_numpy(v, {static_cast<py::ssize_t>(v.size())});
        });

    py::class_<Token2Mel>(m, "Token2Mel")
        .def(py::init([](const std::string & dir, const std::string & device, int threads, int steps,
                         const std::string & token2mel, bool bf16) {
                 return std::make_unique<Token2Mel>(dir, device, threads, steps, parse_token2mel_impl(token2mel), bf16);
             }),
             py::arg("token2wav_dir"), py::arg("device") = "cpu", py::arg("threads") = 1, py::arg("steps") = 5,
             py::arg("token2mel") = "auto", py::arg("bf16") = false, py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("steps", &Token2Mel::steps)
        .def_property_readonly("token2mel", [](const Token2Mel & t) { return token2mel_impl_name(t.token2mel()); })
        .def_property_readonly("device", &Token2Mel::device)
        .def(
            "chunk",
            [](Token2Mel & t2m, i32array tokens, bool last_chunk, f32array spk, Token2MelCache & cache, py::object cond,
               py::object noise, float temperature) {
                if (tokens.ndim() != 1) throw InvalidArgument("tokens must be 1-D");
                if (spk.ndim() != 1 || spk.shape(0) != Token2Mel::kSpk)
                    throw InvalidArgument("spk must have 192 values");
                f32array c, z;
                const float * cond_p = nullptr;
                const float * noise_p = nullptr;
                if (!cond.is_none()) {
                    c = cond.cast<f32array>();
                    cond_p = c.data();
                }
                if (!noise.is_none()) {
                    z = noise.cast<f32array>();
                    noise_p = z.data();
                }
                // The output length is known only after the encoder; check the sizes against it.
                const int n = static_cast<int>(tokens.shape(0));
                const int expect = 2 * (n + (last_chunk ? Token2Mel::kLookahead : 0) - Token2Mel::kLookahead);
                if (cond_p && (c.ndim() != 2 || c.shape(0) != 80 || c.shape(1) != expect))
                    throw InvalidArgument("cond must be (80, " + std::to_string(expect) + ")");
                if (noise_p && (z.ndim() != 2 || z.shape(0) != 80 || z.shape(1) != expect))
                    throw InvalidArgument("noise must be (80, " + std::to_string(expect) + ")");
                std::vector<float> mel;
                int frames = 0;
                {
                    py::gil_scoped_release release;
                    mel = t2m.chunk(tokens.data(), n, last_chunk, spk.data(), cond_p, noise_p, temperature, cache,
                                    &frames);
                }
                return to_numpy(mel, {static_cast<py::ssize_t>(80), static_cast<py::ssize_t>(frames)});
            },
            py::arg("tokens"), py::arg("last_chunk"), py::arg("spk"), py::arg("cache"), py::arg("cond") = py::none(),
            py::arg("noise") = py::none(), py::arg("temperature") = 1.0f,
            "One streaming chunk -> mel (80, frames); updates `cache`.");
}

}  // namespace omni::bindings
