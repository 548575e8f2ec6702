#include "bindings.h"

#include "omni/llm_model.h"

namespace omni::bindings {

void register_llm_model(py::module_ & m) {
    py::class_<LlmModelInfo>(m, "LlmModelInfo", "Dimensions and device of a loaded LLM.")
        .def_readonly("architecture", &LlmModelInfo::architecture)
        .def_readonly("description", &LlmModelInfo::description)
        .def_readonly("n_embd", &LlmModelInfo::n_embd)
        .def_readonly("n_embd_inp", &LlmModelInfo::n_embd_inp)
        .def_readonly("n_layer", &LlmModelInfo::n_layer)
        .def_readonly("n_head", &LlmModelInfo::n_head)
        .def_readonly("n_head_kv", &LlmModelInfo::n_head_kv)
        .def_readonly("n_vocab", &LlmModelInfo::n_vocab)
        .def_readonly("bos", &LlmModelInfo::bos)
        .def_readonly("eos", &LlmModelInfo::eos)
        .def_readonly("n_params", &LlmModelInfo::n_params)
        .def_readonly("size_bytes", &LlmModelInfo::size_bytes)
        .def_readonly("device", &LlmModelInfo::device);

    py::class_<LlmModel, std::shared_ptr<LlmModel>>(
        m, "LlmModel", "An LLM loaded through libllama: vocabulary, tokenizer and weights on one device.")
        .def(py::init<const std::string &, const std::string &, bool>(), py::arg("path"), py::arg("device") = "cpu",
             py::arg("vocab_only") = false, py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("info", &LlmModel::info)
        .def("tokenize", &LlmModel::tokenize, py::arg("text"), py::arg("parse_special") = true,
             py::call_guard<py::gil_scoped_release>())
        .def("token_text", &LlmModel::token_text, py::arg("token"))
        .def(
            "detokenize",
            [](const LlmModel & self, const std::vector<int32_t> & tokens) {
                const std::string s = self.detokenize(tokens);
                // A token boundary can split a UTF-8 sequence; replace rather than raise.
                return py::reinterpret_steal<py::str>(
                    PyUnicode_DecodeUTF8(s.data(), static_cast<py::ssize_t>(s.size()), "replace"));
            },
            py::arg("tokens"))
        .def(
            "detokenize_bytes",
            [](const LlmModel & self, const std::vector<int32_t> & tokens) {
                return py::bytes(self.detokenize(tokens));  // the exact bytes, for streams of pieces
            },
            py::arg("tokens"))
        .def("is_eog", &LlmModel::is_eog, py::arg("token"))
        .def("find_token", &LlmModel::find_token, py::arg("text"));
}

}  // namespace omni::bindings
