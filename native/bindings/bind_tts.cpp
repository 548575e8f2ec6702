#include "bindings.h"

#include "omni/errors.h"
#include "omni/tts.h"

#include <cstring>

namespace omni::bindings {

namespace {

using f32array = py::array_t<float, py::array::c_style | py::array::forcecast>;

py::array_t<float> rows_of(const std::vector<float> & v, int width) {
    return to_numpy(v, {static_cast<py::ssize_t>(v.size() / width), static_cast<py::ssize_t>(width)});
}

// Tts.conditions: the TTS condition rows of LLM tokens and their hidden states.
py::array_t<float> conditions(Tts & t, std::vector<int32_t> tokens, f32array hidden, bool with_text_eos) {
    const TtsDims & d = t.dims();
    if (hidden.ndim() != 2 || hidden.shape(0) != static_cast<py::ssize_t>(tokens.size()) ||
        hidden.shape(1) != d.llm_embd)
        throw InvalidArgument("hidden must be (len(tokens), " + std::to_string(d.llm_embd) + ")");
    std::vector<float> out;
    {
        py::gil_scoped_release release;
        out = t.conditions(tokens.data(), hidden.data(), static_cast<int>(tokens.size()), with_text_eos);
    }
    return rows_of(out, d.hidden);
}

// Tts.forward: the audio-code logits of the last of the given rows.
py::array_t<float> forward(Tts & t, f32array rows) {
    const int h = t.dims().hidden;
    if (rows.ndim() != 2 || rows.shape(1) != h) throw InvalidArgument("rows must be (n, " + std::to_string(h) + ")");
    std::vector<float> logits;
    {
        py::gil_scoped_release release;
        logits = t.forward(rows.data(), static_cast<int>(rows.shape(0)));
    }
    return to_numpy(logits, {static_cast<py::ssize_t>(logits.size())});
}

// Tts.generate: the whole code loop in C++ without the GIL, which is taken back only to call on_group.
std::vector<int32_t> generate(Tts & t, f32array rows, TtsSampler & sampler, int limit, int group, py::object on_group,
                              int min_codes) {
    const int h = t.dims().hidden;
    if (rows.ndim() != 2 || rows.shape(1) != h || rows.shape(0) < 1) {
        throw InvalidArgument("rows must be (n >= 1, " + std::to_string(h) + ")");
    }
    std::function<bool(const int32_t *, int)> cb;
    if (!on_group.is_none()) {
        cb = [&on_group](const int32_t * codes, int n) {
            py::gil_scoped_acquire acquire;
            py::object go_on = on_group(std::vector<int32_t>(codes, codes + n));
            return go_on.is_none() || go_on.cast<bool>();
        };
    }
    py::gil_scoped_release release;
    return t.generate(rows.data(), static_cast<int>(rows.shape(0)), sampler, limit, group, cb, min_codes);
}

void register_dims(py::module_ & m) {
    py::class_<TtsDims>(m, "TtsDims", "Dimensions of the TTS decoder read from its file.")
        .def_readonly("hidden", &TtsDims::hidden)
        .def_readonly("layers", &TtsDims::layers)
        .def_readonly("heads", &TtsDims::heads)
        .def_readonly("audio_tokens", &TtsDims::audio_tokens)
        .def_readonly("text_vocab", &TtsDims::text_vocab)
        .def_readonly("llm_embd", &TtsDims::llm_embd)
        .def_readonly("audio_bos", &TtsDims::audio_bos)
        .def_readonly("text_eos", &TtsDims::text_eos);
}

void register_sampler(py::module_ & m) {
    py::class_<TtsSamplerOptions>(m, "TtsSamplerOptions",
                                  "Speech-code sampling settings (temperature, repetition window, top-k/top-p).")
        .def(py::init<>())
        .def_readwrite("temperature", &TtsSamplerOptions::temperature)
        .def_readwrite("repetition_penalty", &TtsSamplerOptions::repetition_penalty)
        .def_readwrite("window", &TtsSamplerOptions::window)
        .def_readwrite("top_k", &TtsSamplerOptions::top_k)
        .def_readwrite("top_p", &TtsSamplerOptions::top_p)
        .def_readwrite("count_penalty", &TtsSamplerOptions::count_penalty)
        .def_readwrite("top_p_first", &TtsSamplerOptions::top_p_first)
        .def_readwrite("seed", &TtsSamplerOptions::seed);
    py::class_<TtsSampler>(m, "TtsSampler",
                           "Samples speech codes from TTS logits with a seeded generator and a repetition window.")
        .def(py::init<const TtsSamplerOptions &>(), py::arg("options"))
        .def(
            "sample",
            [](TtsSampler & s, f32array logits) {
                return s.sample(std::vector<float>(logits.data(), logits.data() + logits.size()));
            },
            py::arg("logits"))
        .def("reset", &TtsSampler::reset)
        .def_property_readonly("history", &TtsSampler::history);
}

}  // namespace

void register_tts(py::module_ & m) {
    register_dims(m);
    py::class_<Tts>(m, "Tts", "The TTS decoder (projector + LLaMA backbone + audio-code head) with its own KV cache.")
        .def(py::init<const std::string &, const std::string &, const std::string &, int, int, bool, bool>(),
             py::arg("tts_path"), py::arg("projector_path") = "", py::arg("device") = "cpu", py::arg("threads") = 1,
             py::arg("n_ctx") = 4096, py::arg("exact") = false, py::arg("batch_invariant") = false,
             py::call_guard<py::gil_scoped_release>())
        .def("new_slot", &Tts::new_slot, py::arg("n_ctx") = 4096, py::call_guard<py::gil_scoped_release>(),
             "A new slot over the same weights with its own empty KV cache; slots decoding at the same time from "
             "different threads share graphs for their code steps.")
        .def_property_readonly("weight_bytes", &Tts::weight_bytes, "Bytes of the weights on the device (shared).")
        .def_property_readonly("kv_bytes", &Tts::kv_bytes, "Bytes of this slot's KV cache on the device.")
        .def_property_readonly("batch_invariant", &Tts::batch_invariant)
        .def_property_readonly("step_batches", &Tts::step_batches,
                               "(graphs, rows) of the code steps of all slots of these weights so far.")
        .def("_fail_next_batch", &Tts::fail_next_batch,
             "Tests: the next graph holding the code steps of two or more slots fails with DeviceError.")
        .def_property_readonly("dims", &Tts::dims)
        .def_property_readonly("n_past", &Tts::n_past)
        .def("clear", &Tts::clear)
        .def("conditions", &conditions, py::arg("tokens"), py::arg("hidden"), py::arg("with_text_eos") = false)
        .def("code_embedding", [](const Tts & t, int code) { return rows_of(t.code_embedding(code), t.dims().hidden); })
        .def("forward", &forward, py::arg("rows"),
             "Evaluate condition/code rows; returns the audio-code logits of the last row.")
        .def("generate", &generate, py::arg("rows"), py::arg("sampler"), py::arg("limit"), py::arg("group") = 25,
             py::arg("on_group") = py::none(), py::arg("min_codes") = 0,
             "Evaluate condition rows, then sample codes until the end code or `limit`, all in C++ with the GIL "
             "released; `on_group(codes)` gets every `group` codes (returning False stops). Returns every code.")
        .def("head_cost_ms", &Tts::head_cost_ms, py::arg("reps") = 20, py::call_guard<py::gil_scoped_release>(),
             "(llama.cpp-omni's plain C++ head, ours) in ms per audio token.");
    register_sampler(m);
}

}  // namespace omni::bindings
