// Typed errors of the native core. The core never calls exit()/abort() on bad input:
// it throws one of these, and the bindings translate them to llama_omni_py.errors.
#pragma once

#include <stdexcept>
#include <string>

namespace omni {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string & what) : std::runtime_error(what) {}
};

// A model file is missing, truncated, corrupt or does not match what the module needs.
class ModelFileError : public Error {
public:
    ModelFileError(std::string path, std::string problem)
        : Error(path + ": " + problem), path_(std::move(path)), problem_(std::move(problem)) {}
    const std::string & path() const { return path_; }
    const std::string & problem() const { return problem_; }

private:
    std::string path_;
    std::string problem_;
};

// A device string is malformed, names a backend this build lacks, or the device failed.
class DeviceError : public Error {
public:
    explicit DeviceError(const std::string & what) : Error(what) {}
};

// A caller passed an argument the core cannot use (wrong size, out of range, ...).
class InvalidArgument : public Error {
public:
    explicit InvalidArgument(const std::string & what) : Error(what) {}
};

}  // namespace omni
