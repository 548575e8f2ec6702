#include "bindings.h"

#include "omni/errors.h"
#include "omni/token2wav.h"

#include <cstring>

namespace omni::bindings {

namespace {

py::dict timings_dict(const Token2WavTimings & t) {
    py::dict d;
    d["token2mel_ms"] = t.token2mel_ms;
    d["vocoder_ms"] = t.vocoder_ms;
    d["windows"] = t.windows;
    d["samples"] = t.samples;
    return d;
}

}  // namespace

void register_token2wav(py::module_ & m) {
    using i32array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
    py::class_<MelWindow>(m, "MelWindow", "One window's mel between the Token2Mel and vocoder halves of a stream.")
        .def_property_readonly("frames", [](const MelWindow & w) { return w.frames; })
        .def_property_readonly("last", [](const MelWindow & w) { return w.last; })
        .def_property_readonly("mel", [](const MelWindow & w) {
            std::vector<float> copy = w.mel;
            return to_numpy(copy, {80, static_cast<py::ssize_t>(w.frames)});
        });
    py::class_<Token2Wav>(m, "Token2Wav")
        .def(py::init([](const std::string & dir, const std::string & device, int steps, int threads, std::vector<int> cpus,
                         float temperature, uint32_t seed, const std::string & cache_policy, const std::string & engine,
                         bool bf16) {
                 Token2WavOptions o;
                 o.device = device;
                 o.steps = steps;
                 o.threads = threads;
                 o.cpus = std::move(cpus);
                 o.temperature = temperature;
                 o.seed = seed;
                 o.cache_policy = parse_cache_policy(cache_policy);
                 o.engine = parse_engine(engine);
                 o.bf16 = bf16;
                 return std::make_unique<Token2Wav>(dir, o);
             }),
             py::arg("token2wav_dir"), py::arg("device") = "cpu", py::arg("steps") = 5, py::arg("threads") = 1,
             py::arg("cpus") = std::vector<int>{}, py::arg("temperature") = 1.0f, py::arg("seed") = 42u,
             py::arg("cache_policy") = "llama.cpp-omni", py::arg("engine") = "auto", py::arg("bf16") = false,
             py::call_guard<py::gil_scoped_release>())
        .def("push", [](Token2Wav & t, i32array tokens, bool final) {
            if (tokens.ndim() != 1) throw InvalidArgument("tokens must be a 1-D integer array");
            std::vector<float> audio;
            {
                py::gil_scoped_release release;
                audio = t.push(tokens.data(), static_cast<int>(tokens.shape(0)), final);
            }
            return to_numpy(audio, {static_cast<py::ssize_t>(audio.size())});
        }, py::arg("tokens"), py::arg("final") = false)
        .def("flush", [](Token2Wav & t) {
            std::vector<float> audio;
            {
                py::gil_scoped_release release;
                audio = t.flush();
            }
            return to_numpy(audio, {static_cast<py::ssize_t>(audio.size())});
        }, "Audio of what the buffer holds now (windows of up to 28 tokens), the stream going on.")
        .def("push_mel", [](Token2Wav & t, i32array tokens, bool final) {
            if (tokens.ndim() != 1) throw InvalidArgument("tokens must be a 1-D integer array");
            py::gil_scoped_release release;
            return t.push_mel(tokens.data(), static_cast<int>(tokens.shape(0)), final);
        }, py::arg("tokens"), py::arg("final") = false, "The Token2Mel half of push: the mel windows now ready.")
        .def("flush_mel", &Token2Wav::flush_mel, py::call_guard<py::gil_scoped_release>(),
             "The Token2Mel half of flush.")
        .def("vocode", [](Token2Wav & t, const MelWindow & w) {
            std::vector<float> audio;
            {
                py::gil_scoped_release release;
                audio = t.vocode(w);
            }
            return to_numpy(audio, {static_cast<py::ssize_t>(audio.size())});
        }, py::arg("window"), "The vocoder half: one mel window (in stream order) -> audio.")
        .def("reset", &Token2Wav::reset, py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("steps", &Token2Wav::steps)
        .def_property_readonly("threads", &Token2Wav::threads)
        .def_property_readonly("finished", &Token2Wav::finished)
        .def_property_readonly("cache_policy", [](const Token2Wav & t) { return cache_policy_name(t.cache_policy()); })
        .def_property_readonly("engine", [](const Token2Wav & t) { return engine_name(t.engine()); })
        .def_property_readonly("bf16", &Token2Wav::bf16)
        .def_property_readonly("last_timings", [](const Token2Wav & t) { return timings_dict(t.last_timings()); })
        .def_property_readonly("total_timings", [](const Token2Wav & t) { return timings_dict(t.total_timings()); });
}

}  // namespace omni::bindings
