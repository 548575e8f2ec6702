// The LLM weights and vocabulary, loaded through libllama on one device.
//
// This is the model half of the LLM stage: loading, hyperparameters and the tokenizer.
// Contexts (KV cache, decoding) are created from it by the LLM runner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct llama_model;
struct llama_vocab;

namespace omni {

struct LlmModelInfo {
    std::string architecture;  // general.architecture, e.g. "qwen3"
    std::string description;  // llama_model_desc
    int n_embd = 0;
    int n_embd_inp = 0;  // width of rows accepted through batch.embd
    int n_layer = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int n_vocab = 0;
    int bos = -1;
    int eos = -1;
    uint64_t n_params = 0;
    uint64_t size_bytes = 0;
    std::string device;  // our device id the layers were placed on
};

class LlmModel {
public:
    // Loads all layers onto `device` ("cpu", "cuda:0", "cann:0", ...). Throws ModelFileError
    // when libllama rejects the file, DeviceError when the device is not available.
    LlmModel(const std::string & path, const std::string & device, bool vocab_only = false);
    ~LlmModel();
    LlmModel(const LlmModel &) = delete;
    LlmModel & operator=(const LlmModel &) = delete;

    const LlmModelInfo & info() const { return info_; }
    llama_model * get() const { return model_; }
    const llama_vocab * vocab() const { return vocab_; }

    std::vector<int32_t> tokenize(const std::string & text, bool parse_special) const;
    std::string token_text(int32_t token) const;  // the vocabulary entry as stored
    std::string detokenize(const std::vector<int32_t> & tokens) const;
    bool is_eog(int32_t token) const;
    // Id of the token whose stored text equals `text` exactly, or -1.
    int32_t find_token(const std::string & text) const;

private:
    void check_token(int32_t token) const;

    std::string path_;
    llama_model * model_ = nullptr;
    const llama_vocab * vocab_ = nullptr;
    LlmModelInfo info_;
};

}  // namespace omni
