// HiFT vocoder (NSF-HiFiGAN + iSTFT) on the CPU: 80-bin mel at 50 Hz -> 24 kHz audio.
//
// Reads hifigan2.gguf (F32, weight norm folded; docs/model-files.md). Stage widths and the f0
// predictor width are taken from the file; the rest is the MiniCPM-o 4.5 configuration
// (upsample 8/5/3 with kernels 16/11/7, resblock kernels 3/7/11 with dilations 1/3/5, source
// resblocks 7/7/11, n_fft 16, hop 4). The sine source is deterministic (no noise, zero initial
// phase), as in llama.cpp-omni.
#pragma once

#include "omni/threadpool.h"

#include <memory>
#include <string>
#include <vector>

namespace omni {

class HiftVocoder {
public:
    static constexpr int kMel = 80;
    static constexpr int kSamplesPerFrame = 480;
    static constexpr int kSampleRate = 24000;

    // threads >= 1; cpus: empty or one CPU per thread (see ThreadPool). bf16: run the
    // convolutions in BF16 (AVX512_BF16; throws DeviceError on a CPU without it).
    HiftVocoder(const std::string & hifigan_gguf, int threads, const std::vector<int> & cpus = {}, bool bf16 = false);
    ~HiftVocoder();
    HiftVocoder(const HiftVocoder &) = delete;
    HiftVocoder & operator=(const HiftVocoder &) = delete;

    int threads() const;
    int base_channels() const;
    bool bf16() const;
    size_t weight_bytes() const;  // the packed convolutions and the small host tensors

    // Every call may come from any thread: calls take turns on the one pool and its buffers
    // (the streams of a Token2Wav share one vocoder).
    // mel: [80][frames] -> f0 (Hz) per frame.
    std::vector<float> f0(const float * mel, int frames);
    // f0 per frame -> excitation, frames * 480 samples.
    std::vector<float> source(const std::vector<float> & f0);
    // mel [80][frames] + excitation (frames * 480 samples) -> audio (frames * 480 samples).
    std::vector<float> decode(const float * mel, int frames, const float * source);
    // The whole vocoder: f0 -> source (its first cache_source.size() samples replaced by
    // cache_source) -> decode. Returns audio; *source_out receives the excitation used.
    std::vector<float> forward(const float * mel, int frames, const std::vector<float> & cache_source,
                               std::vector<float> * source_out = nullptr);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace omni
