// The upsampling conformer encoder of Token2Wav (docs/model-files.md) as a ggml graph (or on the
// native CPU code, conformer_cpu.cpp), in its streaming form: pre-lookahead conv (3 tokens of look-ahead) -> N rel-pos conformer blocks at
// the token rate -> nearest x2 upsample + conv -> M blocks at the mel rate -> LayerNorm.
//
// Host layouts (batch 1): xs (frames, in); caches as in prompt_cache.gguf: cnn (6, d) = 2 frames
// of the pre-lookahead conv followed by 4 of the upsampler; att (layers, heads, frames, 2*d_head)
// with K then V, the token-rate layers' frames stored twice (tiled) so all layers share a length.
#pragma once

#include "omni/backend.h"
#include "omni/token2mel_impl.h"
#include "omni/threadpool.h"

#include <memory>
#include <string>
#include <vector>

namespace omni {

struct ConformerDims {
    int in = 0, d = 0, heads = 0, d_head = 0, ff = 0, blocks = 0, up_blocks = 0;
};

struct ConformerChunk {
    std::vector<float> h;  // (2 * frames_out_tokens, d)
    int frames = 0;  // rows of h
    std::vector<float> cnn_cache;  // (6, d)
    std::vector<float> att_cache;  // (layers, heads, att_frames, 2 * d_head)
    int att_frames = 0;
};

class ConformerEncoder {
public:
    // token2mel / pool / bf16: as DitEstimator (the native code shares Token2Mel's pool).
    ConformerEncoder(const std::string & encoder_gguf, std::shared_ptr<Backend> backend,
                     std::shared_ptr<ThreadPool> pool = nullptr, Token2MelImpl token2mel = Token2MelImpl::Auto,
                     bool bf16 = false);
    ~ConformerEncoder();
    ConformerEncoder(const ConformerEncoder &) = delete;
    ConformerEncoder & operator=(const ConformerEncoder &) = delete;

    const ConformerDims & dims() const;
    Token2MelImpl token2mel() const;
    // Bytes of the weights: the device buffer of the graph, or the native code's packed copies.
    size_t weight_bytes() const;

    // xs: (frames, in) token embeddings incl. 3 look-ahead tokens (not on the last chunk).
    // cnn_cache / att_cache may be null (first chunk); att_frames = cached frames (even).
    ConformerChunk forward_chunk(const float * xs, int frames, bool last_chunk, const float * cnn_cache,
                                 const float * att_cache, int att_frames);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// ESPnet relative positional encoding rows for `size` positions: (2*size - 1, d), relative
// position size-1 down to -(size-1), interleaved [sin, cos].
std::vector<float> rel_position_table(int d, int size);

}  // namespace omni
