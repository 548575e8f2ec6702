// The TTS split into what its slots share (weights, tables, dims, the step batcher) and what each
// slot owns (its KV cache and position). docs/slots.md#tts.
#pragma once

#include "ggml_weights.h"
#include "omni/gguf_file.h"
#include "omni/tts.h"
#include "tts_batch.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace omni {

// Loaded once; every slot holds it by shared_ptr, so it lives as long as its last slot.
struct TtsShared : GraphModule {
    TtsDims d;
    std::unique_ptr<GgufFile> file;  // emb_text / emb_code rows are read in place
    const float * emb_text = nullptr;
    const float * emb_code = nullptr;
    std::string proj;  // name prefix of the projector weights
    bool batch_invariant = false;
    TtsBatcher batcher;
    std::atomic<int64_t> step_graphs{0}, step_rows{0};
    std::atomic<bool> fail_next_batch{false};  // fault injection for tests (Tts::fail_next_batch)

    TtsShared();
};

struct Tts::Impl {
    std::shared_ptr<TtsShared> w;
    int n_ctx = 0, n_past = 0;
    ggml_context * kv_ctx = nullptr;
    ggml_backend_buffer_t kv_buf = nullptr;
    ggml_tensor * k_cache = nullptr;  // [head_dim, n_ctx, heads, layers]
    ggml_tensor * vt_cache = nullptr;  // [n_ctx, head_dim, heads, layers]

    Impl(std::shared_ptr<TtsShared> shared, int n_ctx);  // allocates an empty KV cache
    ~Impl();
    Impl(const Impl &) = delete;
    Impl & operator=(const Impl &) = delete;
};

// Throws InvalidArgument unless n more rows fit the slot's context.
void require_room(const Tts::Impl & slot, int n);

// Rows of one slot to evaluate at its positions n_past..; the head logits of its last row land
// in `logits` and its n_past advances.
struct TtsRows {
    Tts::Impl * slot;
    const float * rows;
    int n;
    std::vector<float> * logits;
};

// One graph for the rows of several slots sharing `w`: the matmuls over every row at once, RoPE
// at each row's own position, each slot's K/V into its own cache and attention over it. Takes
// the module lock. Checks that every slot's rows fit its context before anything runs.
void evaluate_rows(TtsShared & w, const std::vector<TtsRows> & parts);

}  // namespace omni
