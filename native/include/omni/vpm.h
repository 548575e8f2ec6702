// The vision encoder (VPM, docs/model-files.md): SigLIP (NaViT-style bucketed 70x70 positions) +
// the MiniCPM-V resampler (64 queries, 2-D sin-cos keys) -> 64 LLM embeddings per image, as a
// ggml graph on the session's device.
#pragma once

#include "omni/backend.h"

#include <memory>
#include <string>
#include <vector>

namespace omni {

struct VpmDims {
    int hidden = 0, layers = 0, heads = 0, ff = 0, patch = 14, grid = 70, llm_embd = 0, queries = 64, res_heads = 0;
    float eps = 1e-6f;
    float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};
    // Patches per side an image may have: past the position tables (grid) the SigLIP buckets
    // stretch and the resampler's sin-cos keys are computed, up to 4x the table.
    int max_side() const { return 4 * grid; }
};

class Vpm {
public:
    // flash_attn_dims: when given, fused attention is used for exactly these head sizes instead
    // of the ones the device reports (the CANN audit builds the graph a CANN device would get).
    Vpm(const std::string & vision_gguf, const std::string & device, int threads, bool exact = false,
        std::vector<int> flash_attn_dims = {}, bool override_flash_attn = false);
    ~Vpm();
    const VpmDims & dims() const;
    // pixels: normalised image (3, h, w), h and w multiples of the patch size -> (queries, llm_embd).
    std::vector<float> encode(const float * pixels, int height, int width);
    // `batch` images of one size (batch, 3, h, w) in one graph evaluation -> (batch, queries, llm_embd).
    std::vector<float> encode_batch(const float * pixels, int batch, int height, int width);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Position ids of a (rows x cols) patch grid bucketed onto a grid x grid table, as the NaViT
// SigLIP embedding computes them.
std::vector<int32_t> bucketed_position_ids(int rows, int cols, int grid);

// The resampler's 2-D sin-cos key positions of a (rows x cols) patch grid, (rows * cols, dim)
// row-major: what the file's table holds for grids that fit it.
std::vector<float> resampler_positions(int rows, int cols, int dim);

}  // namespace omni
