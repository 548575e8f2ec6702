#include "omni/llm_model.h"

#include "omni/backend.h"
#include "omni/errors.h"
#include "omni/gguf_file.h"
#include "omni/log.h"

#include <ggml-backend.h>
#include <llama.h>

#include <mutex>

namespace omni {

namespace {

void init_llama_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        install_log_handler();
        llama_backend_init();
    });
}

ggml_backend_dev_t dev_by_ggml_name(const std::string & name) { return ggml_backend_dev_by_name(name.c_str()); }

}  // namespace

LlmModel::LlmModel(const std::string & path, const std::string & device, bool vocab_only) : path_(path) {
    init_llama_once();
    // Validate the container first: libllama's own reader is not meant for hostile input.
    GgufFile probe(path);
    (void)probe;

    const DeviceInfo dev_info = find_device(device);
    llama_model_params mp = llama_model_default_params();
    ggml_backend_dev_t devs[2] = {nullptr, nullptr};
    if (dev_info.backend == "cpu") {
        mp.n_gpu_layers = 0;
    } else {
        devs[0] = dev_by_ggml_name(dev_info.ggml_name);
        if (!devs[0]) throw DeviceError("device '" + device + "' disappeared while loading");
        mp.n_gpu_layers = -1;  // every layer on the accelerator
    }
    mp.devices = devs;
    mp.vocab_only = vocab_only;
    mp.split_mode = LLAMA_SPLIT_MODE_NONE;  // one device per session; placement is ours

    clear_recent_log_problems();
    model_ = llama_model_load_from_file(path.c_str(), mp);
    if (!model_) throw ModelFileError(path, "libllama could not load the model" + log_problem_suffix());
    vocab_ = llama_model_get_vocab(model_);

    char buf[256];
    info_.architecture = llama_model_meta_val_str(model_, "general.architecture", buf, sizeof buf) >= 0 ? buf : "";
    info_.description = llama_model_desc(model_, buf, sizeof buf) >= 0 ? buf : "";
    info_.n_embd = llama_model_n_embd(model_);
    info_.n_embd_inp = llama_model_n_embd_inp(model_);
    info_.n_layer = llama_model_n_layer(model_);
    info_.n_head = llama_model_n_head(model_);
    info_.n_head_kv = llama_model_n_head_kv(model_);
    info_.n_vocab = llama_vocab_n_tokens(vocab_);
    info_.bos = llama_vocab_bos(vocab_);
    info_.eos = llama_vocab_eos(vocab_);
    info_.n_params = llama_model_n_params(model_);
    info_.size_bytes = llama_model_size(model_);
    info_.device = dev_info.id;
}

LlmModel::~LlmModel() {
    if (model_) llama_model_free(model_);
}

void LlmModel::check_token(int32_t token) const {
    if (token < 0 || token >= info_.n_vocab) {
        throw InvalidArgument("token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                              std::to_string(info_.n_vocab - 1) + ")");
    }
}

namespace {

// llama.cpp's size-query convention: a negative result is the capacity needed; call again.
template <typename T, typename Fill>
std::vector<T> fill_growing(size_t first_guess, Fill fill, const char * what) {
    std::vector<T> out(first_guess);
    int32_t n = fill(out.data(), static_cast<int32_t>(out.size()));
    if (n < 0) {
        out.resize(static_cast<size_t>(-n));
        n = fill(out.data(), static_cast<int32_t>(out.size()));
    }
    if (n < 0) throw Error(std::string(what) + " failed");
    out.resize(static_cast<size_t>(n));
    return out;
}

}  // namespace

std::vector<int32_t> LlmModel::tokenize(const std::string & text, bool parse_special) const {
    if (text.size() > static_cast<size_t>(INT32_MAX / 2)) throw InvalidArgument("text is too long to tokenize");
    return fill_growing<int32_t>(
        text.size() + 8,
        [&](llama_token * buf, int32_t cap) {
            return llama_tokenize(vocab_, text.data(), static_cast<int32_t>(text.size()), buf, cap,
                                  /*add_special=*/false, parse_special);
        },
        "tokenization");
}

std::string LlmModel::token_text(int32_t token) const {
    check_token(token);
    const char * t = llama_vocab_get_text(vocab_, token);
    return t ? t : "";
}

std::string LlmModel::detokenize(const std::vector<int32_t> & tokens) const {
    for (int32_t t : tokens) check_token(t);
    auto chars = fill_growing<char>(
        tokens.size() * 8 + 16,
        [&](char * buf, int32_t cap) {
            return llama_detokenize(vocab_, tokens.data(), static_cast<int32_t>(tokens.size()), buf, cap,
                                    /*remove_special=*/false, /*unparse_special=*/true);
        },
        "detokenization");
    return {chars.begin(), chars.end()};
}

bool LlmModel::is_eog(int32_t token) const {
    check_token(token);
    return llama_vocab_is_eog(vocab_, token);
}

int32_t LlmModel::find_token(const std::string & text) const {
    // Special tokens come out of the tokenizer as one id when parse_special is on.
    auto ids = tokenize(text, true);
    if (ids.size() == 1 && token_text(ids[0]) == text) return ids[0];
    return -1;
}

}  // namespace omni
