// Shared declarations of the binding files: one register_* function per bound class.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <stdexcept>
#include <vector>

namespace py = pybind11;

namespace omni::bindings {

// A float32 numpy array of `shape` holding a copy of `data`.
inline py::array_t<float> to_numpy(const std::vector<float> & data, std::vector<py::ssize_t> shape) {
    py::array_t<float> r(shape);
    if (static_cast<size_t>(r.size()) != data.size())
        throw std::logic_error("binding: array shape does not match the data");
    std::memcpy(r.mutable_data(), data.data(), data.size() * sizeof(float));
    return r;
}

void register_errors(py::module_ & m);
void register_log(py::module_ & m);
void register_backend(py::module_ & m);
void register_gguf_file(py::module_ & m);
void register_llm_model(py::module_ & m);
void register_hift(py::module_ & m);
void register_dit(py::module_ & m);
void register_conformer(py::module_ & m);
void register_token2mel(py::module_ & m);
void register_token2wav(py::module_ & m);
void register_llm(py::module_ & m);
void register_tts(py::module_ & m);
void register_apm(py::module_ & m);
void register_vpm(py::module_ & m);
void register_graph_record(py::module_ & m);

}  // namespace omni::bindings
