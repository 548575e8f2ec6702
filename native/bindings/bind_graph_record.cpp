#include "bindings.h"

#include "omni/graph_record.h"

namespace omni::bindings {

namespace {

py::dict tensor_dict(const GraphTensorInfo & t) {
    py::dict d;
    d["type"] = t.type;
    d["ne"] = std::vector<int64_t>(t.ne.begin(), t.ne.end());
    d["contiguous"] = t.contiguous;
    d["permuted"] = t.permuted;
    return d;
}

py::dict graph_dict(const RecordedGraph & g) {
    py::list nodes;
    for (const auto & n : g.nodes) {
        py::dict d;
        d["name"] = n.name;
        d["op"] = n.op;
        d["desc"] = n.desc;
        d["dst"] = tensor_dict(n.dst);
        py::list src;
        for (const auto & s : n.src) src.append(tensor_dict(s));
        d["src"] = src;
        d["src_slots"] = n.src_slots;
        d["op_params"] = n.op_params;
        nodes.append(d);
    }
    py::dict d;
    d["module"] = g.module;
    d["graph"] = g.graph;
    d["device"] = g.device;
    d["calls"] = g.calls;
    d["nodes"] = nodes;
    return d;
}

}  // namespace

void register_graph_record(py::module_ & m) {
    m.def("start_graph_recording", &start_graph_recording,
          "Record every graph the core computes from now on (once per module, graph and node signature).");
    m.def(
        "stop_graph_recording",
        [] {
            std::vector<RecordedGraph> graphs = stop_graph_recording();
            py::list out;
            for (const auto & g : graphs) out.append(graph_dict(g));
            return out;
        },
        "Stop recording; returns [{module, graph, device, calls, nodes: [{op, desc, dst, src, op_params, ...}]}].");
    m.def("graph_recording", &graph_recording);
}

}  // namespace omni::bindings
