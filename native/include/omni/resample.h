// Sample-rate conversion as llama.cpp-omni's audio decoder does it (docs/fidelity.md, "Audio:
// resampling"): linear interpolation between neighbouring samples, with a 4th-order Butterworth
// low-pass (two biquads) at the lower rate's Nyquist frequency, run over the input before
// interpolating when the rate goes down and over the output after it when it goes up.
#pragma once

#include <cstdint>
#include <vector>

namespace omni {

// Mono float samples at rate_in -> rate_out. The output has the decoder's frame count (about
// n * rate_out / rate_in); output sample k reads the input at k * rate_in / rate_out - 1 (one input
// sample late, the first from a zero), and outputs past the last input sample are zeros.
std::vector<float> resample_linear(const float * x, int64_t n, int rate_in, int rate_out);

// The decoder's output frame count for n input frames (its length estimate, which it then fills).
int64_t resampled_length(int64_t n, int rate_in, int rate_out);

}  // namespace omni
