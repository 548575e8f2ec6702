// A validating, read-only GGUF reader.
//
// Every count, length and offset in the file is checked against the file size before it is
// used, so a truncated or hostile file raises ModelFileError instead of crashing or
// allocating without bound. The file is memory-mapped; tensor data is read in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace omni {

// One metadata value. Arrays keep their element type so callers can tell a float array
// (e.g. the mel filter bank) from an int array.
struct GgufValue {
    enum class Type : uint32_t {
        U8 = 0,
        I8 = 1,
        U16 = 2,
        I16 = 3,
        U32 = 4,
        I32 = 5,
        F32 = 6,
        BOOL = 7,
        STRING = 8,
        ARRAY = 9,
        U64 = 10,
        I64 = 11,
        F64 = 12,
    };
    Type type = Type::U8;
    Type array_type = Type::U8;  // element type when type == ARRAY
    // Scalars: integers in i (u64 values above INT64_MAX are rejected), floats in f,
    // bool in i (0/1), string in s. Arrays: ints, floats or strings by element type.
    int64_t i = 0;
    double f = 0.0;
    std::string s;
    std::vector<int64_t> ints;
    std::vector<double> floats;
    std::vector<std::string> strings;

    bool is_integer() const;
    bool is_float() const;
    size_t array_size() const;
};

struct GgufTensorInfo {
    std::string name;
    std::vector<int64_t> ne;  // ggml order: ne[0] is the fastest-varying dimension
    uint32_t type = 0;  // ggml_type value
    uint64_t offset = 0;  // relative to the start of the data section
    uint64_t nbytes = 0;
};

class GgufFile {
public:
    // Throws ModelFileError (path + problem) on any structural defect.
    explicit GgufFile(const std::string & path);
    ~GgufFile();
    GgufFile(const GgufFile &) = delete;
    GgufFile & operator=(const GgufFile &) = delete;

    const std::string & path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }
    uint64_t file_size() const { return size_; }

    const std::vector<std::string> & keys() const { return key_order_; }
    bool has_key(const std::string & key) const { return kv_.count(key) != 0; }
    const GgufValue & value(const std::string & key) const;  // throws ModelFileError if absent

    // Typed getters that name the file and key when the value is missing or of the wrong type.
    int64_t get_int(const std::string & key) const;
    double get_float(const std::string & key) const;
    std::string get_string(const std::string & key) const;

    const std::vector<GgufTensorInfo> & tensors() const { return tensors_; }
    const GgufTensorInfo * find_tensor(const std::string & name) const;
    const GgufTensorInfo & tensor(const std::string & name) const;  // throws if absent

    // Pointer to the tensor's bytes inside the mapping (valid while this object lives).
    const uint8_t * tensor_data(const GgufTensorInfo & info) const;

    // Copies a tensor into float32 (F32, F16, BF16 and I32 sources). Throws for other types.
    std::vector<float> read_f32(const std::string & name) const;

private:
    void parse();
    [[noreturn]] void fail(const std::string & problem) const;

    std::string path_;
    int fd_ = -1;
    const uint8_t * map_ = nullptr;
    uint64_t size_ = 0;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::map<std::string, GgufValue> kv_;
    std::vector<std::string> key_order_;
    std::vector<GgufTensorInfo> tensors_;
    std::map<std::string, size_t> tensor_index_;
};

// Name of a ggml type ("f32", "f16", "q4_K", ...); "type<N>" for unknown values.
std::string ggml_type_label(uint32_t type);

}  // namespace omni
