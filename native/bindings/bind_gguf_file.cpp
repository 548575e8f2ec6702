#include "bindings.h"

#include "omni/errors.h"
#include "omni/gguf_file.h"

#include <ggml.h>

#include <cstring>

namespace omni::bindings {

namespace {

py::object value_to_py(const GgufValue & v) {
    using T = GgufValue::Type;
    switch (v.type) {
        case T::STRING:
            return py::str(v.s);
        case T::BOOL:
            return py::bool_(v.i != 0);
        case T::F32:
        case T::F64:
            return py::float_(v.f);
        case T::ARRAY:
            if (v.array_type == T::STRING) return py::cast(v.strings);
            if (v.array_type == T::F32 || v.array_type == T::F64) return py::cast(v.floats);
            if (v.array_type == T::BOOL) {
                py::list out;
                for (auto x : v.ints) out.append(py::bool_(x != 0));
                return std::move(out);
            }
            return py::cast(v.ints);
        default:
            return py::int_(v.i);
    }
}

// numpy dtype for ggml types that map 1:1; quantized types come back as raw uint8 rows.
py::dtype dtype_for(uint32_t type, bool & raw) {
    raw = false;
    switch (type) {
        case GGML_TYPE_F32:
            return py::dtype::of<float>();
        case GGML_TYPE_F16:
            return py::dtype("float16");
        case GGML_TYPE_F64:
            return py::dtype::of<double>();
        case GGML_TYPE_I8:
            return py::dtype::of<int8_t>();
        case GGML_TYPE_I16:
            return py::dtype::of<int16_t>();
        case GGML_TYPE_I32:
            return py::dtype::of<int32_t>();
        case GGML_TYPE_I64:
            return py::dtype::of<int64_t>();
        case GGML_TYPE_BF16:
            return py::dtype::of<uint16_t>();  // raw bits; read_f32 converts
        default:
            raw = true;
            return py::dtype::of<uint8_t>();
    }
}

}  // namespace

void register_gguf_file(py::module_ & m) {
    py::class_<GgufTensorInfo>(m, "GgufTensorInfo",
                               "Name, type, shape (ggml order) and offset of one tensor of a GGUF file.")
        .def_readonly("name", &GgufTensorInfo::name)
        .def_readonly("ne", &GgufTensorInfo::ne, "Dimensions in ggml order (ne[0] fastest).")
        .def_readonly("type", &GgufTensorInfo::type)
        .def_property_readonly("type_name", [](const GgufTensorInfo & t) { return ggml_type_label(t.type); })
        .def_property_readonly(
            "shape", [](const GgufTensorInfo & t) { return std::vector<int64_t>(t.ne.rbegin(), t.ne.rend()); },
            "numpy order (the reverse of ne)")
        .def_readonly("offset", &GgufTensorInfo::offset)
        .def_readonly("nbytes", &GgufTensorInfo::nbytes)
        .def("__repr__", [](const GgufTensorInfo & t) {
            std::string s = "<GgufTensorInfo " + t.name + " " + ggml_type_label(t.type) + " ne=[";
            for (size_t i = 0; i < t.ne.size(); ++i) s += (i ? "," : "") + std::to_string(t.ne[i]);
            return s + "]>";
        });

    py::class_<GgufFile>(m, "GgufFile", "A validating, memory-mapped GGUF reader: every defect raises ModelFileError.")
        .def(py::init<const std::string &>(), py::arg("path"), py::call_guard<py::gil_scoped_release>())
        .def_property_readonly("path", &GgufFile::path)
        .def_property_readonly("version", &GgufFile::version)
        .def_property_readonly("alignment", &GgufFile::alignment)
        .def_property_readonly("data_offset", &GgufFile::data_offset)
        .def_property_readonly("file_size", &GgufFile::file_size)
        .def_property_readonly("keys", &GgufFile::keys)
        .def("has_key", &GgufFile::has_key)
        .def("value", [](const GgufFile & f, const std::string & key) { return value_to_py(f.value(key)); })
        .def("metadata",
             [](const GgufFile & f) {
                 py::dict d;
                 for (const auto & k : f.keys()) d[py::str(k)] = value_to_py(f.value(k));
                 return d;
             })
        .def_property_readonly("tensors", &GgufFile::tensors)
        .def("find_tensor",
             [](const GgufFile & f, const std::string & name) -> py::object {
                 const GgufTensorInfo * t = f.find_tensor(name);
                 return t ? py::cast(*t) : py::none();
             })
        .def(
            "read",
            [](const GgufFile & f, const std::string & name) {
                const GgufTensorInfo & t = f.tensor(name);
                bool raw = false;
                py::dtype dt = dtype_for(t.type, raw);
                std::vector<py::ssize_t> shape;
                if (raw) {
                    // Rows of packed blocks: (rows, bytes per row).
                    const size_t row = ggml_row_size(static_cast<ggml_type>(t.type), t.ne[0]);
                    shape = {static_cast<py::ssize_t>(t.nbytes / row), static_cast<py::ssize_t>(row)};
                } else {
                    shape.assign(t.ne.rbegin(), t.ne.rend());
                }
                py::array out(dt, shape);
                {
                    py::gil_scoped_release release;
                    std::memcpy(out.mutable_data(), f.tensor_data(t), t.nbytes);
                }
                return out;
            },
            py::arg("name"), "Copy of the tensor in numpy order; quantized types as raw uint8 rows.")
        .def(
            "read_f32",
            [](const GgufFile & f, const std::string & name) {
                const GgufTensorInfo & t = f.tensor(name);
                std::vector<float> v;
                {
                    py::gil_scoped_release release;
                    v = f.read_f32(name);
                }
                return to_numpy(v, std::vector<py::ssize_t>(t.ne.rbegin(), t.ne.rend()));
            },
            py::arg("name"));

    m.def("ggml_type_name", &ggml_type_label);
}

}  // namespace omni::bindings
