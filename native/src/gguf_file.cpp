#include "omni/gguf_file.h"

#include "omni/errors.h"

#include <ggml.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace omni {

namespace {

constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kMaxStringBytes = 1u << 26;  // 64 MiB: no legitimate key or token is longer

// Sequential reader over the mapping; every read checks the remaining size first.
class Cursor {
public:
    Cursor(const uint8_t * base, uint64_t size, const GgufFile & owner) : base_(base), size_(size), owner_(owner) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    template <typename T>
    T read(const char * what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(const char * what) {
        const uint64_t n = read<uint64_t>(what);
        if (n > kMaxStringBytes) {
            throw_problem(std::string(what) + ": declared string length " + std::to_string(n) +
                          " exceeds the limit of " + std::to_string(kMaxStringBytes) + " bytes");
        }
        need(n, what);
        std::string s(reinterpret_cast<const char *>(base_ + pos_), n);
        pos_ += n;
        return s;
    }

    void need(uint64_t n, const char * what) const {
        if (n > remaining()) {
            throw_problem(std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes at offset " +
                          std::to_string(pos_) + ", only " + std::to_string(remaining()) + " remain");
        }
    }

    [[noreturn]] void throw_problem(const std::string & problem) const { throw ModelFileError(owner_.path(), problem); }

private:
    const uint8_t * base_;
    uint64_t size_;
    uint64_t pos_ = 0;
    const GgufFile & owner_;
};

uint64_t scalar_size(GgufValue::Type t) {
    switch (t) {
        case GgufValue::Type::U8:
        case GgufValue::Type::I8:
        case GgufValue::Type::BOOL:
            return 1;
        case GgufValue::Type::U16:
        case GgufValue::Type::I16:
            return 2;
        case GgufValue::Type::U32:
        case GgufValue::Type::I32:
        case GgufValue::Type::F32:
            return 4;
        case GgufValue::Type::U64:
        case GgufValue::Type::I64:
        case GgufValue::Type::F64:
            return 8;
        default:
            return 0;  // STRING and ARRAY have no fixed size
    }
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValue::Type::F64); }

// Reads one scalar (not STRING/ARRAY) and stores it as integer or float.
void read_scalar(Cursor & c, GgufValue::Type t, int64_t & i, double & f, bool & is_float) {
    is_float = false;
    switch (t) {
        case GgufValue::Type::U8:
            i = c.read<uint8_t>("u8 value");
            break;
        case GgufValue::Type::I8:
            i = c.read<int8_t>("i8 value");
            break;
        case GgufValue::Type::BOOL: {
            const uint8_t b = c.read<uint8_t>("bool value");
            if (b > 1) c.throw_problem("bool value " + std::to_string(b) + " is neither 0 nor 1");
            i = b;
            break;
        }
        case GgufValue::Type::U16:
            i = c.read<uint16_t>("u16 value");
            break;
        case GgufValue::Type::I16:
            i = c.read<int16_t>("i16 value");
            break;
        case GgufValue::Type::U32:
            i = c.read<uint32_t>("u32 value");
            break;
        case GgufValue::Type::I32:
            i = c.read<int32_t>("i32 value");
            break;
        case GgufValue::Type::U64: {
            const uint64_t v = c.read<uint64_t>("u64 value");
            if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
                c.throw_problem("u64 value " + std::to_string(v) + " is out of range");
            }
            i = static_cast<int64_t>(v);
            break;
        }
        case GgufValue::Type::I64:
            i = c.read<int64_t>("i64 value");
            break;
        case GgufValue::Type::F32:
            f = c.read<float>("f32 value");
            is_float = true;
            break;
        case GgufValue::Type::F64:
            f = c.read<double>("f64 value");
            is_float = true;
            break;
        default:
            c.throw_problem("internal: not a scalar type");
    }
}

// An array value: element type, length (checked against what the file can still hold), elements.
void read_array(Cursor & c, const std::string & key, GgufValue & v) {
    const uint32_t et = c.read<uint32_t>("array element type");
    if (!valid_value_type(et) || et == static_cast<uint32_t>(GgufValue::Type::ARRAY)) {
        c.throw_problem("metadata array '" + key + "' has invalid element type " + std::to_string(et));
    }
    v.array_type = static_cast<GgufValue::Type>(et);
    const uint64_t n = c.read<uint64_t>("array length");
    const uint64_t min_elem = v.array_type == GgufValue::Type::STRING ? 8 : scalar_size(v.array_type);
    if (n > c.remaining() / min_elem) {
        c.throw_problem("metadata array '" + key + "' declares " + std::to_string(n) +
                        " elements, more than the file can hold");
    }
    if (v.array_type == GgufValue::Type::STRING) {
        v.strings.reserve(n);
        for (uint64_t j = 0; j < n; ++j) v.strings.push_back(c.read_string("array string"));
        return;
    }
    for (uint64_t j = 0; j < n; ++j) {
        int64_t iv = 0;
        double fv = 0;
        bool is_f = false;
        read_scalar(c, v.array_type, iv, fv, is_f);
        if (is_f)
            v.floats.push_back(fv);
        else
            v.ints.push_back(iv);
    }
}

// One metadata value after its key: the type, then a string, an array or a scalar.
GgufValue read_value(Cursor & c, const std::string & key) {
    const uint32_t raw_type = c.read<uint32_t>("metadata type");
    if (!valid_value_type(raw_type)) {
        c.throw_problem("metadata key '" + key + "' has invalid type " + std::to_string(raw_type));
    }
    GgufValue v;
    v.type = static_cast<GgufValue::Type>(raw_type);
    if (v.type == GgufValue::Type::STRING) {
        v.s = c.read_string("metadata string");
    } else if (v.type == GgufValue::Type::ARRAY) {
        read_array(c, key, v);
    } else {
        bool is_f = false;
        read_scalar(c, v.type, v.i, v.f, is_f);
    }
    return v;
}

// general.alignment when the file declares one (a power of two up to 1 MiB), else `fallback`.
uint64_t declared_alignment(const Cursor & c, const std::map<std::string, GgufValue> & kv, uint64_t fallback) {
    auto it = kv.find("general.alignment");
    if (it == kv.end()) return fallback;
    if (!it->second.is_integer() || it->second.i <= 0 || (it->second.i & (it->second.i - 1)) != 0 ||
        it->second.i > (1 << 20)) {
        c.throw_problem("general.alignment must be a power of two (got " + std::to_string(it->second.i) + ")");
    }
    return static_cast<uint64_t>(it->second.i);
}

// The dimensions of tensor `name`: 1 to 4, none zero, their product within int64. Returns that
// product.
uint64_t read_dims(Cursor & c, GgufTensorInfo & info) {
    const uint32_t n_dims = c.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) {
        c.throw_problem("tensor '" + info.name + "' has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    }
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t ne = c.read<uint64_t>("tensor dimension");
        if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
            n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne) {
            c.throw_problem("tensor '" + info.name + "' has an invalid dimension " + std::to_string(ne));
        }
        n_elements *= ne;
        info.ne.push_back(static_cast<int64_t>(ne));
    }
    return n_elements;
}

// Tensor info t: name (unique, fits ggml), dimensions, a known type whose blocks tile the rows,
// an aligned offset, and its size in bytes (checked for overflow).
GgufTensorInfo read_tensor_info(Cursor & c, uint64_t t, uint64_t alignment,
                                const std::map<std::string, size_t> & index) {
    GgufTensorInfo info;
    info.name = c.read_string("tensor name");
    if (info.name.empty()) c.throw_problem("tensor " + std::to_string(t) + " has an empty name");
    if (info.name.size() >= GGML_MAX_NAME) {
        c.throw_problem("tensor name '" + info.name + "' is longer than " + std::to_string(GGML_MAX_NAME - 1) +
                        " bytes");
    }
    if (index.count(info.name)) c.throw_problem("duplicate tensor '" + info.name + "'");
    const uint64_t n_elements = read_dims(c, info);
    info.type = c.read<uint32_t>("tensor type");
    if (info.type >= GGML_TYPE_COUNT || ggml_blck_size(static_cast<ggml_type>(info.type)) <= 0 ||
        ggml_type_size(static_cast<ggml_type>(info.type)) == 0) {
        c.throw_problem("tensor '" + info.name + "' has unknown ggml type " + std::to_string(info.type));
    }
    const auto type = static_cast<ggml_type>(info.type);
    const int64_t blck = ggml_blck_size(type);
    if (info.ne[0] % blck != 0) {
        c.throw_problem("tensor '" + info.name + "': row length " + std::to_string(info.ne[0]) +
                        " is not a multiple of the " + ggml_type_label(info.type) + " block size " +
                        std::to_string(blck));
    }
    info.offset = c.read<uint64_t>("tensor offset");
    if (info.offset % alignment != 0) {
        c.throw_problem("tensor '" + info.name + "' offset " + std::to_string(info.offset) + " is not aligned to " +
                        std::to_string(alignment));
    }
    // Row size times row count, checked for overflow.
    const uint64_t row = ggml_row_size(type, info.ne[0]);
    const uint64_t rows = n_elements / static_cast<uint64_t>(info.ne[0]);
    if (rows != 0 && row > std::numeric_limits<uint64_t>::max() / rows) {
        c.throw_problem("tensor '" + info.name + "' is too large");
    }
    info.nbytes = row * rows;
    return info;
}

// The tensor data section (from data_offset to the end of the file) holds every tensor.
void check_data_section(const Cursor & c, uint64_t size, uint64_t data_offset,
                        const std::vector<GgufTensorInfo> & tensors) {
    if (!tensors.empty() && data_offset > size) {
        c.throw_problem("truncated: the tensor data section starts at " + std::to_string(data_offset) +
                        " but the file has " + std::to_string(size) + " bytes");
    }
    const uint64_t data_size = size - std::min(size, data_offset);
    for (const auto & info : tensors) {
        if (info.offset > data_size || info.nbytes > data_size - info.offset) {
            c.throw_problem("truncated: tensor '" + info.name + "' (" + std::to_string(info.nbytes) +
                            " bytes at data offset " + std::to_string(info.offset) +
                            ") extends past the end of the file");
        }
    }
}

}  // namespace

bool GgufValue::is_integer() const {
    return type != Type::F32 && type != Type::F64 && type != Type::STRING && type != Type::ARRAY;
}

bool GgufValue::is_float() const { return type == Type::F32 || type == Type::F64; }

size_t GgufValue::array_size() const { return type == Type::ARRAY ? ints.size() + floats.size() + strings.size() : 0; }

std::string ggml_type_label(uint32_t type) {
    if (type < GGML_TYPE_COUNT && ggml_blck_size(static_cast<ggml_type>(type)) > 0) {
        return ggml_type_name(static_cast<ggml_type>(type));
    }
    return "type" + std::to_string(type);
}

GgufFile::GgufFile(const std::string & path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
        fail(errno == ENOENT ? "file not found" : std::string("cannot open: ") + std::strerror(errno));
    }
    struct stat st{};
    if (::fstat(fd_, &st) != 0) {
        const std::string err = std::strerror(errno);
        ::close(fd_);
        fd_ = -1;
        fail("cannot stat: " + err);
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd_);
        fd_ = -1;
        fail("not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > 0) {
        void * m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
        if (m == MAP_FAILED) {
            const std::string err = std::strerror(errno);
            ::close(fd_);
            fd_ = -1;
            fail("cannot map: " + err);
        }
        map_ = static_cast<const uint8_t *>(m);
    }
    try {
        parse();
    } catch (...) {
        if (map_) ::munmap(const_cast<uint8_t *>(map_), size_);
        ::close(fd_);
        map_ = nullptr;
        fd_ = -1;
        throw;
    }
}

GgufFile::~GgufFile() {
    if (map_) ::munmap(const_cast<uint8_t *>(map_), size_);
    if (fd_ >= 0) ::close(fd_);
}

void GgufFile::fail(const std::string & problem) const { throw ModelFileError(path_, problem); }

void GgufFile::parse() {
    Cursor c(map_, size_, *this);
    if (size_ < 4 || std::memcmp(map_, "GGUF", 4) != 0) {
        fail("not a GGUF file (bad magic)");
    }
    c.read<uint32_t>("magic");
    version_ = c.read<uint32_t>("version");
    if (version_ != 2 && version_ != 3) {
        fail("unsupported GGUF version " + std::to_string(version_) + " (expected 2 or 3)");
    }
    const uint64_t n_tensors = c.read<uint64_t>("tensor count");
    const uint64_t n_kv = c.read<uint64_t>("metadata count");
    // Smallest encodings: a KV is key length (8) + type (4) + 1 byte; a tensor info is
    // name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
    if (n_kv > c.remaining() / 13) {
        fail("declared metadata count " + std::to_string(n_kv) + " cannot fit in the file");
    }
    if (n_tensors > c.remaining() / 32) {
        fail("declared tensor count " + std::to_string(n_tensors) + " cannot fit in the file");
    }

    for (uint64_t k = 0; k < n_kv; ++k) {
        std::string key = c.read_string("metadata key");
        if (key.empty()) fail("metadata key " + std::to_string(k) + " is empty");
        if (kv_.count(key)) fail("duplicate metadata key '" + key + "'");
        GgufValue v = read_value(c, key);
        key_order_.push_back(key);
        kv_.emplace(std::move(key), std::move(v));
    }
    alignment_ = declared_alignment(c, kv_, alignment_);

    tensors_.reserve(n_tensors);
    for (uint64_t t = 0; t < n_tensors; ++t) {
        GgufTensorInfo info = read_tensor_info(c, t, alignment_, tensor_index_);
        tensor_index_.emplace(info.name, tensors_.size());
        tensors_.push_back(std::move(info));
    }
    data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
    check_data_section(c, size_, data_offset_, tensors_);
}

const GgufValue & GgufFile::value(const std::string & key) const {
    auto it = kv_.find(key);
    if (it == kv_.end()) fail("missing metadata key '" + key + "'");
    return it->second;
}

int64_t GgufFile::get_int(const std::string & key) const {
    const GgufValue & v = value(key);
    if (!v.is_integer()) fail("metadata key '" + key + "' is not an integer");
    return v.i;
}

double GgufFile::get_float(const std::string & key) const {
    const GgufValue & v = value(key);
    if (v.is_float()) return v.f;
    if (v.is_integer()) return static_cast<double>(v.i);
    fail("metadata key '" + key + "' is not a number");
}

std::string GgufFile::get_string(const std::string & key) const {
    const GgufValue & v = value(key);
    if (v.type != GgufValue::Type::STRING) fail("metadata key '" + key + "' is not a string");
    return v.s;
}

const GgufTensorInfo * GgufFile::find_tensor(const std::string & name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo & GgufFile::tensor(const std::string & name) const {
    const GgufTensorInfo * t = find_tensor(name);
    if (!t) fail("missing tensor '" + name + "'");
    return *t;
}

const uint8_t * GgufFile::tensor_data(const GgufTensorInfo & info) const { return map_ + data_offset_ + info.offset; }

std::vector<float> GgufFile::read_f32(const std::string & name) const {
    const GgufTensorInfo & info = tensor(name);
    size_t n = 1;
    for (int64_t d : info.ne) n *= static_cast<size_t>(d);
    std::vector<float> out(n);
    const uint8_t * src = tensor_data(info);
    switch (info.type) {
        case GGML_TYPE_F32:
            std::memcpy(out.data(), src, n * sizeof(float));
            break;
        case GGML_TYPE_F16:
            ggml_fp16_to_fp32_row(reinterpret_cast<const ggml_fp16_t *>(src), out.data(), n);
            break;
        case GGML_TYPE_BF16:
            ggml_bf16_to_fp32_row(reinterpret_cast<const ggml_bf16_t *>(src), out.data(), n);
            break;
        case GGML_TYPE_I32: {
            const int32_t * p = reinterpret_cast<const int32_t *>(src);
            for (size_t j = 0; j < n; ++j) out[j] = static_cast<float>(p[j]);
            break;
        }
        default:
            fail("tensor '" + name + "' has type " + ggml_type_label(info.type) + ", which cannot be read as float");
    }
    return out;
}

}  // namespace omni
