#include "omni/token2mel_impl.h"

#include "omni/errors.h"

namespace omni {

Token2MelImpl parse_token2mel_impl(const std::string & name) {
    if (name == "auto") return Token2MelImpl::Auto;
    if (name == "graph") return Token2MelImpl::Graph;
    if (name == "native") return Token2MelImpl::Native;
    throw InvalidArgument("token2mel must be 'auto', 'graph' or 'native', got '" + name + "'");
}

const char * token2mel_impl_name(Token2MelImpl impl) {
    switch (impl) {
        case Token2MelImpl::Graph:
            return "graph";
        case Token2MelImpl::Native:
            return "native";
        default:
            return "auto";
    }
}

Token2MelImpl resolve_token2mel_impl(Token2MelImpl impl, bool device_is_cpu) {
    if (impl == Token2MelImpl::Auto) return device_is_cpu ? Token2MelImpl::Native : Token2MelImpl::Graph;
    if (impl == Token2MelImpl::Native && !device_is_cpu) {
        throw InvalidArgument(
            "the native Token2Mel runs on the CPU only; use token2mel='graph' (or 'auto') on an accelerator");
    }
    return impl;
}

}  // namespace omni
