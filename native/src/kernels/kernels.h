// The CPU kernels of the native engines (vocoder, DiT, conformer), one set per instruction set,
// chosen at run time from what the CPU reports (docs/cpu-kernels.md).
//
// Each set is the same source, kernels/variant.cpp, compiled once per ISA with that ISA's flags
// (x86-64: generic, avx2, avx512; aarch64: generic, neon). The hot loops of a set are either
// hand-written for its registers (the convolution tiles) or plain loops that the compiler
// vectorises for its width (exp, GELU, Mish, softmax, Snake, column statistics). Callers reach
// them through kernels(), the table of the active set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace omni::cpu {

enum class Isa { Generic, Avx2, Avx512, Neon };

constexpr int kPanel = 8;  // output channels per packed weight panel
constexpr int kTileCols = 48;  // columns per register tile (every set divides it into its vectors)
constexpr int kOffPad = 8;  // ConvBlock::off holds this many valid entries past K (prefetching)

// One task's share of a packed convolution (packed_conv.h): output channels [0, rows) (at most
// 8 panels) x columns [0, cols), every output summed over k = 0..K-1 in that order with one
// fused multiply-add per term, then + bias (then + y when accumulating). Because the order is
// fixed, every set with FMA gives the same bits, whatever the split.
struct ConvBlock {
    int K = 0;  // F32: in*k; BF16: (in/2)*k channel pairs
    const int * off = nullptr;  // per K index: offset of its input row and tap in x (K + kOffPad)
    const float * w = nullptr;  // F32 panels [rows/8][K][kPanel]
    const uint32_t * w_bf16 = nullptr;  // BF16 panels [rows/8][K][kPanel] of channel pairs
    const float * x = nullptr;  // F32 input at this block's first column
    const uint16_t * x_bf16 = nullptr;  // BF16 channel pairs at this block's first column
    float * y = nullptr;  // output at row 0, this block's first column
    int y_ld = 0;
    const float * bias = nullptr;  // [rows]
    int rows = 0, cols = 0;
    bool accumulate = false;
};

struct Kernels {
    Isa isa;
    const char * name;
    // The set's tiles lose to the BLAS's sgemm on convolution shapes (the portable set: an SSE2
    // tile against OpenBLAS's per-CPU kernels), so F32 convolutions go through im2col + sgemm.
    bool blas_convs;
    void (*conv_block)(const ConvBlock & b);
    void (*conv_block_bf16)(const ConvBlock & b);  // null where the set has no BF16 dot products
    void (*gelu_tanh_row)(float * x, int n);  // in place, tanh form
    void (*silu_row)(float * x, int n);  // in place
    void (*mish_affine_row)(const float * x, float w, float b, float * y, int n);  // y = mish(x*w + b)
    // Softmax down each column of s [rows][cols] (dense), in place; tmp holds 2 * cols floats.
    void (*softmax_columns)(float * s, int rows, int cols, float * tmp);
    // y = x + inv * sin(alpha * x)^2 (Snake, inv = 1 / (alpha + 1e-9)); y may alias x.
    void (*snake_row)(const float * x, float alpha, float inv, int n, float * y);
    // Mean and 1/sqrt(var + eps) of kColBlock (16) columns over `rows` rows of stride ld.
    void (*column_stats)(const float * x, size_t ld, int rows, float eps, float * mean, float * inv_std);
};

constexpr int kColBlock = 16;

// The active set: the best the CPU runs, unless forced.
const Kernels & kernels();
Isa active_isa();
const char * isa_name();
// "auto" (the best available), or one of available_isas(); throws DeviceError for a set this
// CPU cannot run or this build lacks, InvalidArgument for an unknown name.
void force_isa(const std::string & name);
// The sets this build has that this CPU runs, best last.
std::vector<std::string> available_isas();
// The active set has BF16 dot products (AVX512_BF16) and this CPU runs them.
bool cpu_has_bf16();

}  // namespace omni::cpu
