#include "omni/engine.h"

#include "omni/errors.h"

namespace omni {

Engine parse_engine(const std::string & name) {
    if (name == "auto") return Engine::Auto;
    if (name == "graph") return Engine::Graph;
    if (name == "native") return Engine::Native;
    throw InvalidArgument("engine must be 'auto', 'graph' or 'native', got '" + name + "'");
}

const char * engine_name(Engine e) {
    switch (e) {
        case Engine::Graph:
            return "graph";
        case Engine::Native:
            return "native";
        default:
            return "auto";
    }
}

Engine resolve_engine(Engine e, bool device_is_cpu) {
    if (e == Engine::Auto) return device_is_cpu ? Engine::Native : Engine::Graph;
    if (e == Engine::Native && !device_is_cpu) {
        throw InvalidArgument(
            "the native engine runs on the CPU only; use engine='graph' (or 'auto') on an accelerator");
    }
    return e;
}

}  // namespace omni
