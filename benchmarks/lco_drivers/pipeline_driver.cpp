// Runs one simplex request through llama.cpp-omni's own pipeline (a build the user made from its
// source) with greedy decoding, and records what its LLM received and produced, so that
// benchmarks/lco_compare.py can set our prompt, reply and speech codes beside its. Compiled at
// benchmark time by benchmarks/lco.py (shared builds: the driver's llama_decode stands in front
// of libllama's and forwards to it); nothing of llama.cpp-omni is part of this project.
//
//   pipeline_driver <model dir> <llm gguf> <threads> <out dir> <media type: 1 audio, 2 omni>
//                   <voice wav|-> <user wav|-> <user image|-> <user text file|-> <n_predict> <wait s>
//
// Writes into <out dir>:
//   prompt.txt     one line per llama_decode call of the prompt: "T id id ..." (tokens) or
//                  "E rows" (embedding rows, their floats in embd_<k>.f32 in call order)
//   reply.txt      the greedy reply's token ids, the end token included
//   run/           the pipeline's own output folder (round_000/tts_wav/audio_tokens_chunk_*.bin:
//                  the speech codes; round_000/llm_debug/chunk_*/llm_hidden_states.bin)
// Its pipeline has no user-text input: a text file's tokens are evaluated after the media, as
// our engine places them, and marked as such in prompt.txt ("T" lines after a "# text" line).
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "llama.h"
#include "omni.h"

void omni_set_language(struct omni_context *, const std::string &);  // exported by libomni

namespace {
std::mutex g_mu;
llama_context * g_llm = nullptr;
std::atomic<int> g_phase{0};  // 0: loading, 1: prompt, 2: reply
std::ofstream g_prompt, g_reply;
int g_embd_files = 0, g_reply_calls = 0;
std::string g_out;

void record(llama_context * ctx, const llama_batch & b) {
    if (ctx != g_llm || g_phase == 0) return;
    std::lock_guard<std::mutex> lock(g_mu);
    // the reply phase starts with the assistant prefix (a prompt call), then one token per step
    const bool prompt = g_phase == 1 || (g_reply_calls == 0 && b.n_tokens > 1);
    if (!prompt && b.n_tokens > 1) return;  // the next turn's user header, after the reply
    if (b.token) {
        std::ostream & o = prompt ? static_cast<std::ostream &>(g_prompt) : g_reply;
        if (prompt) o << "T";
        for (int i = 0; i < b.n_tokens; ++i) o << " " << b.token[i];
        if (prompt) o << "\n";
        if (!prompt) ++g_reply_calls;
    } else if (b.embd) {
        const int n_embd = llama_model_n_embd(llama_get_model(ctx));
        g_prompt << "E " << b.n_tokens << "\n";
        std::ofstream f(g_out + "/embd_" + std::to_string(g_embd_files++) + ".f32", std::ios::binary);
        f.write(reinterpret_cast<const char *>(b.embd), sizeof(float) * static_cast<size_t>(b.n_tokens) * n_embd);
    }
    g_prompt.flush();
    g_reply.flush();
}
}  // namespace

extern "C" int32_t llama_decode(llama_context * ctx, llama_batch batch) {
    static auto real = reinterpret_cast<int32_t (*)(llama_context *, llama_batch)>(dlsym(RTLD_NEXT, "llama_decode"));
    record(ctx, batch);
    return real(ctx, batch);
}

static std::string arg_or_empty(const char * a) { return std::string(a) == "-" ? "" : a; }

int main(int argc, char ** argv) {
    if (argc != 12) {
        std::fprintf(stderr,
                     "usage: %s <model dir> <llm gguf> <threads> <out dir> <media type> <voice wav|-> <user wav|-> "
                     "<user image|-> <user text file|-> <n_predict> <wait s>\n",
                     argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    g_out = argv[4];
    const int threads = std::atoi(argv[3]), media_type = std::atoi(argv[5]);
    const std::string voice = arg_or_empty(argv[6]), wav = arg_or_empty(argv[7]), img = arg_or_empty(argv[8]);
    const std::string text_file = arg_or_empty(argv[9]);
    g_prompt.open(g_out + "/prompt.txt");
    g_reply.open(g_out + "/reply.txt");

    static common_params p;  // the context keeps a pointer to it
    p.model.path = argv[2];
    p.apm_model = dir + "/audio/MiniCPM-o-4_5-audio-F16.gguf";
    p.vpm_model = dir + "/vision/MiniCPM-o-4_5-vision-F16.gguf";
    p.tts_model = dir + "/tts/MiniCPM-o-4_5-tts-F16.gguf";
    p.n_ctx = 4096;
    p.n_gpu_layers = 0;
    p.cpuparams.n_threads = p.cpuparams_batch.n_threads = threads;
    p.sampling.temp = 0.0f;  // greedy LLM, and argmax speech codes
    p.n_predict = std::atoi(argv[10]);
    omni_context * c = omni_init(&p, media_type, true, dir + "/tts", -1, "cpu", false, nullptr, nullptr, g_out + "/run");
    if (!c) {
        std::printf("error omni_init\n");
        return 1;
    }
    g_llm = c->ctx_llama;
    // no voice: a path that does not exist gives the empty voice slot
    c->ref_audio_path = voice.empty() ? g_out + "/no-voice.wav" : voice;
    c->async = false;  // the prompt on this thread, in order (its command-line tool does the same)
    g_phase = 1;
    if (!stream_prefill(c, "", "", 0)) return 1;
    if ((!wav.empty() || !img.empty()) && !stream_prefill(c, wav, img, 1)) return 1;
    if (!text_file.empty()) {
        std::ifstream f(text_file);
        std::stringstream ss;
        ss << f.rdbuf();
        const std::vector<llama_token> ids = common_tokenize(c->ctx_llama, ss.str(), false, false);
        {
            std::lock_guard<std::mutex> lock(g_mu);
            g_prompt << "# text\n";
        }
        std::vector<llama_token> tok(ids);
        std::vector<llama_pos> pos(ids.size());
        for (size_t i = 0; i < ids.size(); ++i) pos[i] = c->n_past + static_cast<llama_pos>(i);
        llama_batch b{static_cast<int32_t>(ids.size()), tok.data(), nullptr, pos.data(), nullptr, nullptr, nullptr};
        if (llama_decode(c->ctx_llama, b) != 0) return 1;
        c->n_past += static_cast<int>(ids.size());
    }
    c->async = true;  // the speech stages run only in its asynchronous mode
    g_phase = 2;
    if (!stream_decode(c, "./", 0)) return 1;
    // A reply cut by n_predict never ends its speech stage (it waits for a final chunk that does
    // not come): after the wait, the codes of the chunks it finished are on disk all the same.
    const int wait_ms = std::atoi(argv[11]) * 1000;
    for (int waited = 0; !c->speek_done && waited < wait_ms; waited += 10)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::printf(c->speek_done ? "done\n" : "cut\n");
    std::fflush(stdout);
    if (!c->speek_done) std::_Exit(0);
    omni_stop_threads(c);
    for (std::thread * t : {&c->llm_thread, &c->tts_thread, &c->t2w_thread})
        if (t->joinable()) t->join();
    omni_free(c);
    return 0;
}
