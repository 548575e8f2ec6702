// Pieces the native CPU engines (DiT, conformer) share: reading weights, and running a packed
// layer on activation rows in F32 or BF16.
#pragma once

#include "omni/gguf_file.h"
#include "omni/threadpool.h"
#include "packed_conv.h"

#include <memory>
#include <string>
#include <vector>

namespace omni::cpu {

// A tensor as float32 with exactly `count` elements (ModelFileError otherwise).
std::vector<float> read_exact(const GgufFile & g, const std::string & name, size_t count);
// "<p>.weight" [out][in] and, with bias, "<p>.bias" [out], packed.
PackedConv load_linear(const GgufFile & g, const std::string & p, int in, int out, bool bf16, bool bias = true);

class LayerRunner {
public:
    LayerRunner(std::shared_ptr<ThreadPool> pool, bool bf16);
    ThreadPool & pool() { return *pool_; }
    bool bf16() const { return precision_ == Precision::BF16; }

    // out[:, y_col + s*y_seg + t] = w(in[:, x_col + s*x_seg + t...]) for t < n, s < segs;
    // epilogue per finished block (columns relative to the segment).
    void apply(const PackedConv & w, Rows & in, Rows & out, int n, const BlockFn & epilogue = nullptr, int segs = 1,
               int x_seg = 0, int y_seg = 0, int x_col = 0, int y_col = 0);

private:
    std::shared_ptr<ThreadPool> pool_;
    Precision precision_;
    std::vector<uint16_t> pairs_;  // BF16 copy of the input rows
};

}  // namespace omni::cpu
