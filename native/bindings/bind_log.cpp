#include "bindings.h"

#include "omni/log.h"

namespace omni::bindings {

void register_log(py::module_ & m) {
    py::enum_<LogLevel>(m, "LogLevel")
        .value("DEBUG", LogLevel::Debug)
        .value("INFO", LogLevel::Info)
        .value("WARN", LogLevel::Warn)
        .value("ERROR", LogLevel::Error)
        .value("SILENT", LogLevel::Silent);
    m.def("set_log_level", &set_log_level, py::arg("level"),
          "Minimum level of ggml/llama.cpp messages written to stderr.");
    m.def("log_level", &log_level);
    m.def("recent_log_problems", &recent_log_problems, "Recent ggml/llama.cpp warnings and errors.");
}

}  // namespace omni::bindings
