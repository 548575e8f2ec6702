#include "bindings.h"

#include "omni/backend.h"

namespace omni::bindings {

void register_backend(py::module_ & m) {
    py::class_<DeviceInfo>(m, "DeviceInfo", "A compute device of this build (id such as 'cpu', 'cuda:0', 'cann:0').")
        .def_readonly("id", &DeviceInfo::id)
        .def_readonly("backend", &DeviceInfo::backend)
        .def_readonly("index", &DeviceInfo::index)
        .def_readonly("ggml_name", &DeviceInfo::ggml_name)
        .def_readonly("description", &DeviceInfo::description)
        .def_readonly("pci_bus_id", &DeviceInfo::pci_bus_id)
        .def_readonly("memory_free", &DeviceInfo::memory_free)
        .def_readonly("memory_total", &DeviceInfo::memory_total)
        .def("__repr__", [](const DeviceInfo & d) { return "<DeviceInfo " + d.id + ": " + d.description + ">"; });

    m.def("list_devices", &list_devices, py::call_guard<py::gil_scoped_release>());
    m.def("compiled_backends", &compiled_backends);
    m.def("ggml_version", &ggml_version_string);
    m.def("llama_system_info", &llama_system_info_string);

    py::class_<Backend>(m, "Backend", "A ggml backend on one device with its CPU thread count.")
        .def(py::init<const std::string &, int>(), py::arg("device"), py::arg("n_threads") = 0,
             py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("device", &Backend::device)
        .def_property_readonly("threads", &Backend::threads)
        .def("set_threads", &Backend::set_threads, py::arg("n_threads"))
        .def(
            "run_probe_graph",
            [](Backend & b, int n) {
                std::vector<float> out;
                {
                    py::gil_scoped_release release;
                    out = run_probe_graph(b, n);
                }
                return py::array_t<float>(static_cast<py::ssize_t>(out.size()), out.data());
            },
            py::arg("n") = 64, "Run a small fixed graph on this device and return its output.");
}

}  // namespace omni::bindings
