// C++ exceptions -> the Python hierarchy in llama_omni_py.errors.
#include "bindings.h"

#include "omni/errors.h"

namespace omni::bindings {

namespace {

[[noreturn]] void raise_py(const char * cls, py::tuple args) {
    py::object errors = py::module_::import("llama_omni_py.errors");
    py::object exc = errors.attr(cls)(*args);
    PyErr_SetObject(exc.get_type().ptr(), exc.ptr());
    throw py::error_already_set();
}

}  // namespace

void register_errors(py::module_ &) {
    py::register_exception_translator([](std::exception_ptr p) {
        if (!p) return;
        try {
            std::rethrow_exception(p);
        } catch (const ModelFileError & e) {
            raise_py("ModelFileError", py::make_tuple(e.problem(), e.path()));
        } catch (const DeviceError & e) {
            raise_py("DeviceError", py::make_tuple(e.what()));
        } catch (const InvalidArgument & e) {
            raise_py("InvalidArgumentError", py::make_tuple(e.what()));
        } catch (const Error & e) {
            raise_py("OmniError", py::make_tuple(e.what()));
        }
    });
}

}  // namespace omni::bindings
