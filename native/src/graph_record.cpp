#include "omni/graph_record.h"

#include "graph_check.h"

#include "omni/errors.h"

#include <ggml-backend.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <sstream>
#include <utility>

namespace omni {
namespace {

std::mutex g_mutex;
std::atomic<bool> g_on{false};
std::vector<RecordedGraph> g_graphs;
constexpr size_t kMaxVariants = 8;  // distinct node signatures kept per (module, graph)

GraphTensorInfo describe_tensor(const ggml_tensor * t) {
    GraphTensorInfo info;
    info.type = ggml_type_name(t->type);
    for (int i = 0; i < 4; ++i) info.ne[i] = t->ne[i];
    info.contiguous = ggml_is_contiguous(t);
    info.permuted = ggml_is_permuted(t) || ggml_is_transposed(t);
    return info;
}

std::string signature(const std::vector<GraphNode> & nodes) {
    std::string s;
    for (const auto & n : nodes) s += n.desc + ":" + n.dst.type + ";";
    return s;
}

bool is_view_op(ggml_op op) {
    return op == GGML_OP_NONE || op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE ||
        op == GGML_OP_TRANSPOSE;
}

}  // namespace

GraphNode describe_node(const ggml_tensor * t) {
    GraphNode n;
    n.name = t->name;
    n.op = ggml_op_name(t->op);
    n.desc = ggml_op_desc(t);
    n.dst = describe_tensor(t);
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        if (!t->src[i]) continue;
        n.src.push_back(describe_tensor(t->src[i]));
        n.src_slots.push_back(i);
    }
    n.op_params.assign(t->op_params, t->op_params + GGML_MAX_OP_PARAMS / sizeof(int32_t));
    return n;
}

void start_graph_recording() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_graphs.clear();
    g_on = true;
}

std::vector<RecordedGraph> stop_graph_recording() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_on = false;
    return std::exchange(g_graphs, {});
}

bool graph_recording() { return g_on; }

void record_graph_nodes(const std::string & module, const std::string & graph, const std::string & device,
                        std::vector<GraphNode> nodes) {
    if (!g_on) return;
    const std::string sig = signature(nodes);
    std::lock_guard<std::mutex> lock(g_mutex);
    size_t variants = 0;
    for (auto & g : g_graphs) {
        if (g.module != module || g.graph != graph) continue;
        if (signature(g.nodes) == sig) {
            ++g.calls;
            return;
        }
        ++variants;
    }
    if (variants >= kMaxVariants) return;
    g_graphs.push_back(RecordedGraph{module, graph, device, 1, std::move(nodes)});
}

void record_graph(const std::string & module, const std::string & graph, const std::string & device,
                  const ggml_cgraph * gf) {
    if (!g_on) return;
    std::vector<GraphNode> nodes;
    const int n = ggml_graph_n_nodes(const_cast<ggml_cgraph *>(gf));
    nodes.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) nodes.push_back(describe_node(ggml_graph_node(const_cast<ggml_cgraph *>(gf), i)));
    record_graph_nodes(module, graph, device, std::move(nodes));
}

void require_supported(ggml_backend_t backend, const ggml_cgraph * gf, const std::string & what) {
    const int n = ggml_graph_n_nodes(const_cast<ggml_cgraph *>(gf));
    for (int i = 0; i < n; ++i) {
        ggml_tensor * t = ggml_graph_node(const_cast<ggml_cgraph *>(gf), i);
        if (is_view_op(t->op) || ggml_backend_supports_op(backend, t)) continue;
        std::ostringstream msg;
        msg << what << ": the " << ggml_backend_name(backend) << " backend does not support node " << i << " ("
            << ggml_op_desc(t) << ", " << ggml_type_name(t->type) << " [" << t->ne[0] << "," << t->ne[1] << ","
            << t->ne[2] << "," << t->ne[3] << "]";
        for (int s = 0; s < GGML_MAX_SRC && t->src[s]; ++s)
            msg << (s ? ", " : " from ") << ggml_type_name(t->src[s]->type);
        msg << "); this graph is bound to one device, so it would abort there. Run `llama-omni info --cann-audit` "
               "to list such nodes, or choose another device.";
        throw DeviceError(msg.str());
    }
}

}  // namespace omni
