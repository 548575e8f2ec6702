#include "bindings.h"

#include "omni/errors.h"
#include "omni/llm.h"

#include <cstring>

namespace omni::bindings {

namespace {

py::array_t<float> floats(const std::vector<float> & v) { return to_numpy(v, {static_cast<py::ssize_t>(v.size())}); }

}  // namespace

void register_llm(py::module_ & m) {
    py::class_<SamplingOptions>(m, "SamplingOptions", "The LLM's sampler chain settings (libllama samplers).")
        .def(py::init<>())
        .def_readwrite("temperature", &SamplingOptions::temperature)
        .def_readwrite("top_k", &SamplingOptions::top_k)
        .def_readwrite("top_p", &SamplingOptions::top_p)
        .def_readwrite("min_p", &SamplingOptions::min_p)
        .def_readwrite("repeat_penalty", &SamplingOptions::repeat_penalty)
        .def_readwrite("repeat_last_n", &SamplingOptions::repeat_last_n)
        .def_readwrite("seed", &SamplingOptions::seed);

    py::class_<Llm>(
        m, "Llm",
        "A libllama context: prefill from tokens or embedding rows, decode steps with hidden states, KV management.")
        .def(py::init([](std::shared_ptr<LlmModel> model, int n_ctx, int n_batch, int threads, bool kv_f32,
                         int flash_attn, bool record_graph) {
                 LlmOptions o;
                 o.kv_f32 = kv_f32;
                 o.flash_attn = flash_attn;
                 o.record_graph = record_graph;
                 o.n_ctx = n_ctx;
                 o.n_batch = n_batch;
                 o.threads = threads;
                 return std::make_unique<Llm>(std::move(model), o);
             }),
             py::arg("model"), py::arg("n_ctx") = 4096, py::arg("n_batch") = 512, py::arg("threads") = 0,
             py::arg("kv_f32") = false, py::arg("flash_attn") = -1, py::arg("record_graph") = false,
             py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("n_past", &Llm::n_past)
        .def_property_readonly("n_ctx", &Llm::n_ctx)
        .def("eval_tokens", &Llm::eval_tokens, py::arg("tokens"), py::arg("all_outputs") = false,
             py::call_guard<py::gil_scoped_release>())
        .def(
            "eval_embeddings",
            [](Llm & l, py::array_t<float, py::array::c_style | py::array::forcecast> rows, bool all) {
                const int n_embd = l.model().info().n_embd_inp;
                if (rows.ndim() != 2 || rows.shape(1) != n_embd)
                    throw InvalidArgument("rows must be (n, " + std::to_string(n_embd) + ")");
                py::gil_scoped_release release;
                l.eval_embeddings(rows.data(), static_cast<int>(rows.shape(0)), all);
            },
            py::arg("rows"), py::arg("all_outputs") = false)
        .def(
            "logits", [](const Llm & l, int i) { return floats(l.logits(i)); }, py::arg("i") = -1)
        .def(
            "hidden", [](const Llm & l, int i) { return floats(l.hidden(i)); }, py::arg("i") = -1)
        .def("set_sampling", &Llm::set_sampling, py::arg("options"))
        .def("sample", &Llm::sample, py::call_guard<py::gil_scoped_release>())
        .def(
            "decode_step",
            [](Llm & l, int32_t token) {
                std::vector<float> h;
                int32_t next;
                {
                    py::gil_scoped_release release;
                    next = l.decode_step(token, &h);
                }
                return py::make_tuple(next, floats(std::move(h)));
            },
            py::arg("token"), "Evaluate `token`; returns (next sampled token, hidden state of `token`).")
        .def("keep", &Llm::keep, py::arg("n_keep"), py::call_guard<py::gil_scoped_release>())
        .def("slide", &Llm::slide, py::arg("n_keep"), py::arg("n_discard"), py::call_guard<py::gil_scoped_release>());
}

}  // namespace omni::bindings
