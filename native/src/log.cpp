#include "omni/log.h"

#include <ggml.h>
#include <llama.h>

#include <atomic>
#include <cstdio>
#include <deque>
#include <mutex>

namespace omni {

namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::Error)};
std::mutex g_mutex;
std::deque<std::string> g_problems;
std::string g_partial;  // ggml may emit one line in several calls
constexpr size_t kKeep = 32;

int rank(ggml_log_level level) {
    switch (level) {
        case GGML_LOG_LEVEL_DEBUG:
            return 0;
        case GGML_LOG_LEVEL_INFO:
            return 1;
        case GGML_LOG_LEVEL_WARN:
            return 2;
        case GGML_LOG_LEVEL_ERROR:
            return 3;
        default:
            return -1;  // NONE / CONT: continuation of the previous message
    }
}

std::atomic<int> g_last_rank{1};

void on_log(ggml_log_level level, const char * text, void *) {
    if (!text) return;
    int r = rank(level);
    if (r < 0)
        r = g_last_rank.load();
    else
        g_last_rank.store(r);
    if (r >= g_level.load()) std::fputs(text, stderr);
    if (r < static_cast<int>(LogLevel::Warn)) return;
    std::lock_guard<std::mutex> lock(g_mutex);
    g_partial += text;
    size_t nl;
    while ((nl = g_partial.find('\n')) != std::string::npos) {
        std::string line = g_partial.substr(0, nl);
        g_partial.erase(0, nl + 1);
        if (line.empty()) continue;
        g_problems.push_back(std::move(line));
        if (g_problems.size() > kKeep) g_problems.pop_front();
    }
}

}  // namespace

void install_log_handler() {
    static std::once_flag once;
    std::call_once(once, [] { llama_log_set(on_log, nullptr); });  // also sets ggml's handler
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

std::vector<std::string> recent_log_problems() {
    std::lock_guard<std::mutex> lock(g_mutex);
    return {g_problems.begin(), g_problems.end()};
}

void clear_recent_log_problems() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_problems.clear();
    g_partial.clear();
}

std::string log_problem_suffix() {
    auto lines = recent_log_problems();
    if (lines.empty()) return "";
    std::string s = "; llama.cpp said: ";
    const size_t first = lines.size() > 3 ? lines.size() - 3 : 0;
    for (size_t i = first; i < lines.size(); ++i) s += (i > first ? " | " : "") + lines[i];
    return s;
}

}  // namespace omni
