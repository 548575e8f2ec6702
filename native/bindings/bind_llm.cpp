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
                         int flash_attn, bool record_graph, int n_seq) {
                 LlmOptions o;
                 o.n_seq = n_seq;
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
             py::arg("n_seq") = 1, py::call_guard<py::gil_scoped_release>())
        .def(
            "n_past_of", [](const Llm & l, int seq) { return l.n_past(seq); }, py::arg("seq"))
        .def_property_readonly("n_past", [](const Llm & l) { return l.n_past(0); })
        .def_property_readonly("n_ctx", &Llm::n_ctx)
        .def_property_readonly("n_seq", &Llm::n_seq)
        .def_property_readonly("kv_bytes_per_seq", &Llm::kv_bytes_per_seq)
        .def("eval_tokens", &Llm::eval_tokens, py::arg("tokens"), py::arg("all_outputs") = false, py::arg("seq") = 0,
             py::call_guard<py::gil_scoped_release>())
        .def(
            "eval_embeddings",
            [](Llm & l, py::array_t<float, py::array::c_style | py::array::forcecast> rows, bool all, int seq) {
                const int n_embd = l.model().info().n_embd_inp;
                if (rows.ndim() != 2 || rows.shape(1) != n_embd)
                    throw InvalidArgument("rows must be (n, " + std::to_string(n_embd) + ")");
                py::gil_scoped_release release;
                l.eval_embeddings(rows.data(), static_cast<int>(rows.shape(0)), all, seq);
            },
            py::arg("rows"), py::arg("all_outputs") = false, py::arg("seq") = 0)
        .def("decode_many", &Llm::decode_many, py::arg("seqs"), py::arg("tokens"),
             py::call_guard<py::gil_scoped_release>(),
             "One token for each of the distinct `seqs` in one libllama batch.")
        .def(
            "logits", [](const Llm & l, int i, int seq) { return floats(l.logits(i, seq)); }, py::arg("i") = -1,
            py::arg("seq") = 0)
        .def(
            "hidden", [](const Llm & l, int i, int seq) { return floats(l.hidden(i, seq)); }, py::arg("i") = -1,
            py::arg("seq") = 0)
        .def("set_sampling", &Llm::set_sampling, py::arg("options"), py::arg("seq") = 0)
        .def("sample", &Llm::sample, py::arg("seq") = 0, py::call_guard<py::gil_scoped_release>())
        .def(
            "decode_step",
            [](Llm & l, int32_t token, int seq) {
                std::vector<float> h;
                int32_t next;
                {
                    py::gil_scoped_release release;
                    next = l.decode_step(token, &h, seq);
                }
                return py::make_tuple(next, floats(std::move(h)));
            },
            py::arg("token"), py::arg("seq") = 0,
            "Evaluate `token`; returns (next sampled token, hidden state of `token`).")
        .def("keep", &Llm::keep, py::arg("n_keep"), py::arg("seq") = 0, py::call_guard<py::gil_scoped_release>())
        .def("slide", &Llm::slide, py::arg("n_keep"), py::arg("n_discard"), py::arg("seq") = 0,
             py::call_guard<py::gil_scoped_release>())
        .def("copy_seq", &Llm::copy_seq, py::arg("src"), py::arg("dst"),
             "Makes sequence `dst` a copy of `src` (KV cache and position); libllama copies the stream "
             "whole at the start of the next decode.");
}

}  // namespace omni::bindings
