// The extension module llama_omni_py._core: registers every bound class.
#include "bindings.h"

#include "omni/log.h"

PYBIND11_MODULE(_core, m) {
    m.doc() = "Native core of llama-omni-py (ggml/llama.cpp); use the llama_omni_py package API.";
    omni::install_log_handler();
    omni::bindings::register_errors(m);
    omni::bindings::register_log(m);
    omni::bindings::register_backend(m);
    omni::bindings::register_gguf_file(m);
    omni::bindings::register_llm_model(m);
    omni::bindings::register_token2wav(m);
    omni::bindings::register_llm(m);
    omni::bindings::register_tts(m);
    omni::bindings::register_apm(m);
    omni::bindings::register_vpm(m);
    omni::bindings::register_graph_record(m);
    // Pieces of the modules, bound for the parity tests and benchmarks: not a stable API.
    py::module_ internal = m.def_submodule("internal", "Module internals for parity tests and benchmarks (unstable).");
    omni::bindings::register_hift(internal);
    omni::bindings::register_dit(internal);
    omni::bindings::register_conformer(internal);
    omni::bindings::register_token2mel(internal);
}
