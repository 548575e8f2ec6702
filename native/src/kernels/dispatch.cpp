// Which kernel set runs: the best one this build has and this CPU reports, or the one forced.
#include "kernels.h"

#include "omni/errors.h"

#include <atomic>

namespace omni::cpu {

// Defined by variant.cpp, once per set this build compiled (OMNI_HAVE_KERNELS_<NAME>).
const Kernels & kernels_generic();
#if defined(OMNI_HAVE_KERNELS_AVX2)
const Kernels & kernels_avx2();
#endif
#if defined(OMNI_HAVE_KERNELS_AVX512)
const Kernels & kernels_avx512();
#endif
#if defined(OMNI_HAVE_KERNELS_NEON)
const Kernels & kernels_neon();
#endif

namespace {

struct Candidate {
    const char * name;
    const Kernels * (*table)();  // null: not in this build
    bool (*runs)();  // whether this CPU runs it
};

#if defined(__x86_64__) && defined(__GNUC__)
bool cpu_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool cpu_avx512() {
    return cpu_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl");
}
bool cpu_avx512_bf16() { return cpu_avx512() && __builtin_cpu_supports("avx512bf16"); }
#else
bool cpu_avx2() { return false; }
bool cpu_avx512() { return false; }
bool cpu_avx512_bf16() { return false; }
#endif
#if defined(__aarch64__)
bool cpu_neon() { return true; }  // Advanced SIMD is part of every AArch64 Linux target
#else
bool cpu_neon() { return false; }
#endif
bool always() { return true; }

// Worst to best.
const Candidate kCandidates[] = {
    {"generic", [] { return &kernels_generic(); }, always},
#if defined(OMNI_HAVE_KERNELS_AVX2)
    {"avx2", [] { return &kernels_avx2(); }, cpu_avx2},
#else
    {"avx2", nullptr, cpu_avx2},
#endif
#if defined(OMNI_HAVE_KERNELS_AVX512)
    {"avx512", [] { return &kernels_avx512(); }, cpu_avx512},
#else
    {"avx512", nullptr, cpu_avx512},
#endif
#if defined(OMNI_HAVE_KERNELS_NEON)
    {"neon", [] { return &kernels_neon(); }, cpu_neon},
#else
    {"neon", nullptr, cpu_neon},
#endif
};

const Kernels * best() {
    const Kernels * t = nullptr;
    for (const Candidate & c : kCandidates)
        if (c.table && c.runs()) t = c.table();
    return t;
}

std::atomic<const Kernels *> g_active{nullptr};

}  // namespace

const Kernels & kernels() {
    const Kernels * t = g_active.load(std::memory_order_acquire);
    if (!t) {
        t = best();
        g_active.store(t, std::memory_order_release);
    }
    return *t;
}

Isa active_isa() { return kernels().isa; }
const char * isa_name() { return kernels().name; }

void force_isa(const std::string & name) {
    if (name == "auto") {
        g_active.store(best(), std::memory_order_release);
        return;
    }
    for (const Candidate & c : kCandidates) {
        if (name != c.name) continue;
        if (!c.runs()) throw DeviceError("this CPU cannot run the '" + name + "' CPU kernels");
        if (!c.table) throw DeviceError("this build has no '" + name + "' CPU kernels");
        g_active.store(c.table(), std::memory_order_release);
        return;
    }
    throw InvalidArgument("CPU kernels must be 'auto', 'generic', 'avx2', 'avx512' or 'neon', got '" + name + "'");
}

std::vector<std::string> available_isas() {
    std::vector<std::string> out;
    for (const Candidate & c : kCandidates)
        if (c.table && c.runs()) out.emplace_back(c.name);
    return out;
}

bool cpu_has_bf16() { return kernels().conv_block_bf16 != nullptr && cpu_avx512_bf16(); }

}  // namespace omni::cpu
