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
    py::class_<Token2WavOptions>(m, "Token2WavOptions",
                                 "Token2Wav settings as the core takes them (Token2WavConfig.to_native() fills them).")
        .def(py::init<>())
        .def_readwrite("device", &Token2WavOptions::device)
        .def_readwrite("steps", &Token2WavOptions::steps)
        .def_readwrite("threads", &Token2WavOptions::threads)
        .def_readwrite("cpus", &Token2WavOptions::cpus)
        .def_readwrite("temperature", &Token2WavOptions::temperature)
        .def_readwrite("seed", &Token2WavOptions::seed)
        .def_property(
            "cache_policy", [](const Token2WavOptions & o) { return cache_policy_name(o.cache_policy); },
            [](Token2WavOptions & o, const std::string & v) { o.cache_policy = parse_cache_policy(v); })
        .def_property(
            "token2mel", [](const Token2WavOptions & o) { return token2mel_impl_name(o.token2mel); },
            [](Token2WavOptions & o, const std::string & v) { o.token2mel = parse_token2mel_impl(v); })
        .def_readwrite("bf16", &Token2WavOptions::bf16)
        .def_readwrite("first_window_codes", &Token2WavOptions::first_window_codes);
    py::class_<Token2Wav>(m, "Token2Wav")
        .def(py::init<const std::string &, const Token2WavOptions &>(), py::arg("token2wav_dir"), py::arg("options"),
             py::call_guard<py::gil_scoped_release>())
        .def(
            "push",
            [](Token2Wav & t, i32array tokens, bool final) {
                if (tokens.ndim() != 1) throw InvalidArgument("tokens must be a 1-D integer array");
                std::vector<float> audio;
                {
                    py::gil_scoped_release release;
                    audio = t.push(tokens.data(), static_cast<int>(tokens.shape(0)), final);
                }
                return to_numpy(audio, {static_cast<py::ssize_t>(audio.size())});
            },
            py::arg("tokens"), py::arg("final") = false)
        .def(
            "flush",
            [](Token2Wav & t) {
                std::vector<float> audio;
                {
                    py::gil_scoped_release release;
                    audio = t.flush();
                }
                return to_numpy(audio, {static_cast<py::ssize_t>(audio.size())});
            },
            "Audio of what the buffer holds now (windows of up to 28 tokens), the stream going on.")
        .def(
            "push_mel",
            [](Token2Wav & t, i32array tokens, bool final) {
                if (tokens.ndim() != 1) throw InvalidArgument("tokens must be a 1-D integer array");
                py::gil_scoped_release release;
                return t.push_mel(tokens.data(), static_cast<int>(tokens.shape(0)), final);
            },
            py::arg("tokens"), py::arg("final") = false, "The Token2Mel half of push: the mel windows now ready.")
        .def("flush_mel", &Token2Wav::flush_mel, py::call_guard<py::gil_scoped_release>(),
             "The Token2Mel half of flush.")
        .def(
            "vocode",
            [](Token2Wav & t, const MelWindow & w) {
                std::vector<float> audio;
                {
                    py::gil_scoped_release release;
                    audio = t.vocode(w);
                }
                return to_numpy(audio, {static_cast<py::ssize_t>(audio.size())});
            },
            py::arg("window"), "The vocoder half: one mel window (in stream order) -> audio.")
        .def("reset", &Token2Wav::reset, py::call_guard<py::gil_scoped_release>())
        .def("new_stream", &Token2Wav::new_stream, py::call_guard<py::gil_scoped_release>(),
             "Another stream over the same weights, pools and voice prompt, with its own state.")
        .def_property_readonly("weight_bytes", &Token2Wav::weight_bytes)
        .def_property_readonly("stream_bytes", &Token2Wav::stream_bytes)
        .def_property_readonly("steps", &Token2Wav::steps)
        .def_property_readonly("threads", &Token2Wav::threads)
        .def_property_readonly("finished", &Token2Wav::finished)
        .def_property_readonly("cache_policy", [](const Token2Wav & t) { return cache_policy_name(t.cache_policy()); })
        .def_property_readonly("token2mel", [](const Token2Wav & t) { return token2mel_impl_name(t.token2mel()); })
        .def_property_readonly("bf16", &Token2Wav::bf16)
        .def_property_readonly("last_timings", [](const Token2Wav & t) { return timings_dict(t.last_timings()); })
        .def_property_readonly("total_timings", [](const Token2Wav & t) { return timings_dict(t.total_timings()); });
}

}  // namespace omni::bindings
