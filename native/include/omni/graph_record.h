// A record of the ggml graphs the core computes: every node's op, types, shapes and op
// parameters. The CANN audit (llama_omni_py/cann_audit.py) matches these against ggml's per-op
// support table; nothing here depends on a device being present.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace omni {

struct GraphTensorInfo {
    std::string type;  // ggml type name: "f32", "f16", "i32", ...
    std::array<int64_t, 4> ne{};  // elements per dimension
    bool contiguous = true;
    bool permuted = false;  // strides not in increasing order (a permuted or transposed view)
};

struct GraphNode {
    std::string name;  // tensor name (libllama names its nodes; ours are mostly empty)
    std::string op;  // ggml_op_name: "MUL_MAT", "UNARY", "GLU", ...
    std::string desc;  // ggml_op_desc: the sub-op for UNARY/GLU ("GELU", "SWIGLU"), else op
    GraphTensorInfo dst;
    std::vector<GraphTensorInfo> src;  // present sources, in order (absent ones skipped)
    std::vector<int> src_slots;  // their slot numbers in ggml's src[] array
    std::vector<int32_t> op_params;  // raw op_params words (interpretation depends on op)
};

struct RecordedGraph {
    std::string module;  // "apm", "vpm", "tts", "conformer", "dit", "llm"
    std::string graph;  // "encode", "step", "prefill", ...
    std::string device;  // device id the graph ran on
    int calls = 0;  // computes seen with this node signature
    std::vector<GraphNode> nodes;
};

// Recording is off until started; while on, every graph computed by a module (and by an Llm
// created with LlmOptions::record_graph) is kept once per (module, graph, node signature).
void start_graph_recording();
std::vector<RecordedGraph> stop_graph_recording();
bool graph_recording();
void record_graph_nodes(const std::string & module, const std::string & graph, const std::string & device,
                        std::vector<GraphNode> nodes);

}  // namespace omni
