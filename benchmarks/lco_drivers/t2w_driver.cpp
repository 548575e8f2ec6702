// Drives llama.cpp-omni's Token2Wav (a build the user made from its source) the way its omni
// pipeline does: 28-token windows advancing by 25, three silence tokens first, the vocoder on
// the CPU. Compiled at benchmark time by benchmarks/lco.py against the user's
// tree; nothing of llama.cpp-omni is part of this project.
//
//   t2w_driver <token2wav-gguf dir> <threads: 0 = as shipped> <tokens file>
//   stdin:  "run N"  -> one line: wall ms of each of the next N windows
//           "quit"
//
// Threads: its Token2Wav has no public thread setting (as shipped, Token2Mel runs on 1 thread
// and the vocoder on ggml's default of 4); to compare at equal thread counts the driver reaches
// the two CPU backends through their private members, hence the access override below.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#define private public
#include "token2wav-impl.h"
#undef private

int main(int argc, char ** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s <token2wav-gguf dir> <threads, 0 = as shipped> <tokens file>\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    const int threads = std::atoi(argv[2]);
    std::vector<int32_t> tokens;
    {
        std::ifstream f(argv[3]);
        for (int32_t t; f >> t;) tokens.push_back(t);
    }
    if (tokens.size() < 28) {
        std::fprintf(stderr, "need at least 28 tokens\n");
        return 2;
    }
    omni::flow::Token2WavSession s;
    // n_timesteps / temperature -1: the values prompt_cache.gguf was built with.
    if (!s.init_from_prompt_cache_gguf(dir + "/encoder.gguf", dir + "/flow_matching.gguf", dir + "/flow_extra.gguf",
                                       dir + "/prompt_cache.gguf", dir + "/hifigan2.gguf", "cpu", "cpu", -1, -1.0f)) {
        std::fprintf(stderr, "llama.cpp-omni Token2Wav failed to load %s\n", dir.c_str());
        return 3;
    }
    if (threads > 0) {
        s.t2w.t2m_.runner_.set_num_threads(threads);
        ggml_backend_cpu_set_n_threads(s.t2w.voc_model_.backend, threads);
    }
    std::vector<int32_t> buf = {4218, 4218, 4218};
    size_t next = 0;
    std::vector<float> wav;
    auto window = [&]() {
        while (buf.size() < 28) {
            buf.push_back(tokens[next]);
            next = (next + 1) % tokens.size();
        }
        wav.clear();
        if (!s.feed_window(buf.data(), 28, false, wav)) throw std::runtime_error("feed_window failed");
        buf.erase(buf.begin(), buf.begin() + 25);
    };
    std::string line;
    std::printf("ready\n");
    std::fflush(stdout);
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd;
        int n = 0;
        in >> cmd >> n;
        if (cmd == "quit") break;
        try {
            for (int i = 0; i < n; ++i) {
                const auto t0 = std::chrono::steady_clock::now();
                window();
                const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                std::printf("%s%.3f", i ? " " : "", ms);
            }
        } catch (const std::exception & e) {
            std::printf("error %s\n", e.what());
        }
        std::printf("\n");
        std::fflush(stdout);
    }
    return 0;
}
