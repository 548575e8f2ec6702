// Internal: what GraphModule::compute does around ggml_backend_graph_compute.
#pragma once

#include "omni/graph_record.h"

#include <ggml-backend.h>
#include <ggml.h>

#include <string>

namespace omni {

GraphNode describe_node(const ggml_tensor * t);
// Keeps the graph's nodes when recording is on (graph_record.h).
void record_graph(const std::string & module, const std::string & graph, const std::string & device,
                  const ggml_cgraph * gf);
// Throws DeviceError naming the first node `backend` cannot run: a graph bound to one backend
// (no scheduler) would otherwise abort inside ggml on such a node.
void require_supported(ggml_backend_t backend, const ggml_cgraph * gf, const std::string & what);

}  // namespace omni
