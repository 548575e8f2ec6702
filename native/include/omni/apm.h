// The audio encoder (APM, docs/model-files.md): Whisper log-mel front end with the filter bank
// stored in the file, conv1 + conv2 (stride 2) with GELU, learned positions, pre-LN Whisper
// layers, final LayerNorm, projector (ReLU) and average pooling by 5 -> 10 LLM embeddings per
// second, as a ggml graph on the session's device.
#pragma once

#include "omni/backend.h"

#include <memory>
#include <string>
#include <vector>

namespace omni {

struct ApmDims {
    int d_model = 0, heads = 0, layers = 0, ff = 0, n_mel = 80, n_fft_bins = 201, positions = 1500, llm_embd = 0,
        pool = 5;
};

class Apm {
public:
    static constexpr int kSampleRate = 16000, kHop = 160, kNfft = 400;

    // exact: widen F16 weights to F32 (exact arithmetic); else they stay F16.
    Apm(const std::string & audio_gguf, const std::string & device, int threads, bool exact = false);
    ~Apm();
    // Another Apm over the same weights with a streaming history of its own (a session slot's).
    std::unique_ptr<Apm> new_stream() const;
    // Bytes of this Apm's streaming cache once allocated (on its first streaming chunk).
    size_t stream_bytes() const;
    // The GELU of the conv front end and the MLPs: the exact (erf) one of the reference, or with
    // tanh_gelu the tanh approximation llama.cpp-omni's audio encoder uses.
    void set_tanh_gelu(bool on);
    bool tanh_gelu() const;
    // The convolutions read their input rounded to F16, as llama.cpp-omni's do (ggml_conv_1d
    // unfolds its input into F16); else they read it in F32. On a stationary input (a pure tone)
    // the rounding is the same in every frame, so it does not average out (docs/fidelity.md).
    void set_f16_conv_input(bool on);
    bool f16_conv_input() const;
    const ApmDims & dims() const;

    // Whisper log-mel of 16 kHz audio: (n_mel, frames) with frames = samples / 160.
    // zero_tail: the last frame's window reaches past the end into zeros (llama.cpp-omni's front
    // end) instead of the reflected samples of torch.stft's centring (the reference's).
    std::vector<float> log_mel(const float * samples, int n, int * frames_out, bool zero_tail = false) const;
    // Encodes 9 to positions*2 mel frames (30 s): (tokens, llm_embd), tokens = (frames + 1) / 2 / 5.
    // chunk > 0: block-causal attention over blocks of `chunk` encoder positions (50 per second),
    // each attending to itself and every block before it (the reference's chunked audio
    // attention); 0: full attention.
    std::vector<float> encode_mel(const float * mel, int frames, int * tokens_out, int chunk = 0);
    // Streaming (llama.cpp-omni's mode, fed 1 s chunks): the chunk attends over the history kept
    // since the last reset. A chunk that would pass the position table (1500 = 30 s) clears the
    // history first, counted in stream_resets().
    //   consecutive (ours): the chunk takes the positions after the ones encoded before it.
    //   chunk_count (llama.cpp-omni's rule): the k-th chunk since the last clear, of T positions,
    //     is written at k*T and attends over [0, (k+1)*T), as if every chunk had its length; rows
    //     in that range no chunk wrote since the clear read as zeros; the history is cleared
    //     when k reaches positions / T (docs/fidelity.md).
    std::vector<float> encode_mel_streaming(const float * mel, int frames, int * tokens_out, bool chunk_count = false);
    void reset_stream();
    int stream_position() const;
    int stream_resets() const;

private:
    struct Impl;
    struct Stream;
    explicit Apm(std::shared_ptr<Impl> impl);
    std::shared_ptr<Impl> impl_;
    std::unique_ptr<Stream> stream_;
};

}  // namespace omni
