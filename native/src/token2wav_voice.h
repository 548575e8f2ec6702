// The voice prompt of a Token2Wav (prompt_cache.gguf): loaded once, read by every stream.
#pragma once

#include "omni/token2wav.h"

#include <vector>

namespace omni {

constexpr int kRecentFrames = 100;  // reference policy: mel frames kept beside the prompt's

struct Token2Wav::Voice {
    std::vector<float> spk;  // speaker vector (192)
    Token2MelCache prompt;  // the caches computed on the voice prompt, host copies
    int conf_window = 0;  // conformer frames a stream keeps (the prompt's length)
    int est_window = 0;  // estimator frames kept besides the recent ones (policy-dependent)
    int est_capacity = 0;  // the most estimator frames a window attends to (the device caches' size)
    size_t bytes() const { return spk.size() * sizeof(float) + prompt.bytes(); }
};

}  // namespace omni
