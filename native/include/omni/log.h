// Routing of ggml/llama.cpp log output.
//
// llama.cpp logs through one process-wide callback (its own API, not a file-descriptor hack).
// We install it once: messages at or above the chosen level go to stderr, and the most recent
// warnings and errors are kept so that a failure can quote what the library said.
#pragma once

#include <string>
#include <vector>

namespace omni {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Silent = 4 };

void install_log_handler();
void set_log_level(LogLevel level);
LogLevel log_level();

// Recent warning/error lines (oldest first), at most 32.
std::vector<std::string> recent_log_problems();
void clear_recent_log_problems();

// "; llama.cpp said: <last lines>" or "" when nothing was logged.
std::string log_problem_suffix();

}  // namespace omni
