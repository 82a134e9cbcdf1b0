// Reading (and writing) safetensors files: the checkpoint format of transformers and of the test
// fixtures. Kept out of the kernel headers (gated_attention.hpp does not include it) because it
// needs nlohmann-json (Debian: nlohmann-json3-dev) and the standard containers.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON, then the data section. The
// JSON maps each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}
// (bytes, relative to the data section, end exclusive) and may hold "__metadata__", an object of
// string -> string. The tensors must cover the data section exactly: no overlap, no hole.
//
// Every failure is a Status naming the tensor and field; nothing throws on malformed input (the
// JSON is parsed with nlohmann's non-throwing API and every field is type-checked before use).
// Tensor data is little-endian and read as it lies in memory, so this header needs a
// little-endian host.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gated_attention/core/dtypes.hpp"
#include "gated_attention/core/status.hpp"
#include "gated_attention/core/tensor_view.hpp"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error \
    "gated_attention/io/safetensors.hpp reads little-endian data in place: little-endian hosts only"
#endif

namespace gated_attention::io {

enum class SafetensorsDtype : std::uint8_t {
  boolean,
  u8,
  i8,
  f8_e5m2,
  f8_e4m3,
  i16,
  u16,
  f16,
  bf16,
  i32,
  u32,
  f32,
  i64,
  u64,
  f64,
};

namespace detail {

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;    // as spelled in the header
  std::uint64_t size;  // bytes per element
};

inline const std::array<DtypeInfo, 15>& dtype_table() {
  static const std::array<DtypeInfo, 15> table = {{
      {SafetensorsDtype::boolean, "BOOL", 1},
      {SafetensorsDtype::u8, "U8", 1},
      {SafetensorsDtype::i8, "I8", 1},
      {SafetensorsDtype::f8_e5m2, "F8_E5M2", 1},
      {SafetensorsDtype::f8_e4m3, "F8_E4M3", 1},
      {SafetensorsDtype::i16, "I16", 2},
      {SafetensorsDtype::u16, "U16", 2},
      {SafetensorsDtype::f16, "F16", 2},
      {SafetensorsDtype::bf16, "BF16", 2},
      {SafetensorsDtype::i32, "I32", 4},
      {SafetensorsDtype::u32, "U32", 4},
      {SafetensorsDtype::f32, "F32", 4},
      {SafetensorsDtype::i64, "I64", 8},
      {SafetensorsDtype::u64, "U64", 8},
      {SafetensorsDtype::f64, "F64", 8},
  }};
  return table;
}

// The dtype a C++ element type is read as (no definition for types the format lacks).
template <class T>
struct DtypeOf;
#define GATED_ATTENTION_SAFETENSORS_DTYPE(type, tag)                 \
  template <>                                                        \
  struct DtypeOf<type> {                                             \
    static constexpr SafetensorsDtype value = SafetensorsDtype::tag; \
  }
GATED_ATTENTION_SAFETENSORS_DTYPE(float, f32);
GATED_ATTENTION_SAFETENSORS_DTYPE(double, f64);
GATED_ATTENTION_SAFETENSORS_DTYPE(bf16, bf16);
GATED_ATTENTION_SAFETENSORS_DTYPE(f16, f16);
GATED_ATTENTION_SAFETENSORS_DTYPE(std::int64_t, i64);
GATED_ATTENTION_SAFETENSORS_DTYPE(std::uint64_t, u64);
GATED_ATTENTION_SAFETENSORS_DTYPE(std::int32_t, i32);
GATED_ATTENTION_SAFETENSORS_DTYPE(std::uint32_t, u32);
GATED_ATTENTION_SAFETENSORS_DTYPE(std::int16_t, i16);
GATED_ATTENTION_SAFETENSORS_DTYPE(std::uint16_t, u16);
GATED_ATTENTION_SAFETENSORS_DTYPE(std::int8_t, i8);
GATED_ATTENTION_SAFETENSORS_DTYPE(std::uint8_t, u8);
#undef GATED_ATTENTION_SAFETENSORS_DTYPE

// a * b, false on overflow of uint64.
inline bool multiply(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

}  // namespace detail

inline const char* to_string(SafetensorsDtype dtype) {
  for (const auto& info : detail::dtype_table()) {
    if (info.dtype == dtype) return info.name;
  }
  return "?";
}

inline std::uint64_t element_size(SafetensorsDtype dtype) {
  for (const auto& info : detail::dtype_table()) {
    if (info.dtype == dtype) return info.size;
  }
  return 0;
}

// "F32" -> f32; false for a name the format does not define.
inline bool parse_dtype(const std::string& name, SafetensorsDtype* out) {
  for (const auto& info : detail::dtype_table()) {
    if (name == info.name) {
      *out = info.dtype;
      return true;
    }
  }
  return false;
}

// One tensor of a parsed file.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::f32;
  std::vector<std::int64_t> shape;  // row-major; [] is a scalar (one element)
  std::uint64_t data_begin = 0;     // bytes from the start of the data section
  std::uint64_t data_end = 0;       // one past the last byte

  std::int64_t num_elements() const {
    std::int64_t n = 1;
    for (auto e : shape) n *= e;
    return n;
  }
};

// A parsed safetensors file that owns its bytes. Copies and moves keep it valid (tensors are
// located by offset); views it hands out point into its buffer and live as long as it does.
class SafetensorsFile {
 public:
  // Largest header accepted (the reference implementation's limit).
  static constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

  // Reads and parses the whole file at `path`, replacing this object's contents. On failure the
  // object is empty.
  Status read(const std::string& path) {
    *this = SafetensorsFile();
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) {
      return Status::error(StatusCode::invalid_argument, "safetensors: cannot open '%.100s'",
                           path.c_str());
    }
    const std::streamoff size = in.tellg();
    if (size < 0) {
      return Status::error(StatusCode::invalid_argument, "safetensors: cannot size '%.100s'",
                           path.c_str());
    }
    std::vector<unsigned char> bytes(static_cast<std::size_t>(size));
    in.seekg(0);
    if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) {
      return Status::error(StatusCode::invalid_argument, "safetensors: cannot read '%.100s'",
                           path.c_str());
    }
    return parse(std::move(bytes));
  }

  // Parses a whole file held in memory, replacing this object's contents. On failure the object
  // is empty.
  Status parse(std::vector<unsigned char> bytes) {
    *this = SafetensorsFile();
    Status s = parse_into(std::move(bytes));
    if (!s.is_ok()) *this = SafetensorsFile();
    return s;
  }

  // Tensors in data order (ascending data_begin).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // nullptr if absent.
  const SafetensorsTensor* find(const std::string& name) const {
    for (const auto& t : tensors_) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  const std::string* find_metadata(const std::string& key) const {
    const auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
  }

  // The metadata value at `key` read as a finite number: fails if it is absent or is not one.
  Status metadata_number(const std::string& key, double* out) const {
    const std::string* text = find_metadata(key);
    if (text == nullptr) {
      return Status::error(StatusCode::invalid_argument, "safetensors: __metadata__ lacks '%.60s'",
                           key.c_str());
    }
    char* end = nullptr;
    errno = 0;
    *out = std::strtod(text->c_str(), &end);
    if (end == text->c_str() || *end != '\0' || errno != 0 || !std::isfinite(*out)) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: __metadata__ '%.60s': expected a number, got '%.40s'",
                           key.c_str(), text->c_str());
    }
    return Status::ok();
  }

  // As metadata_number, for an integer (at most 1e15 in magnitude).
  Status metadata_integer(const std::string& key, std::int64_t* out) const {
    double value = 0.0;
    GATED_ATTENTION_RETURN_IF_ERROR(metadata_number(key, &value));
    if (value != std::floor(value) || std::fabs(value) > 1e15) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: __metadata__ '%.60s': expected an integer, got %g",
                           key.c_str(), value);
    }
    *out = static_cast<std::int64_t>(value);
    return Status::ok();
  }

  // The bytes of a tensor of this file.
  const unsigned char* bytes(const SafetensorsTensor& t) const {
    return bytes_.data() + data_start_ + t.data_begin;
  }

  // A row-major view of tensor `name` as T with Rank dimensions: fails if it is absent, or its
  // dtype is not T's, or its rank is not Rank, or its data is not aligned for T.
  template <class T, int Rank>
  Status view(const std::string& name, TensorView<const T, Rank>* out) const {
    constexpr SafetensorsDtype wanted = detail::DtypeOf<T>::value;
    const SafetensorsTensor* t = find(name);
    if (t == nullptr) {
      return Status::error(StatusCode::invalid_argument, "safetensors: no tensor '%.100s'",
                           name.c_str());
    }
    if (t->dtype != wanted) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: tensor '%.80s': dtype: expected %s, got %s", name.c_str(),
                           to_string(wanted), to_string(t->dtype));
    }
    if (static_cast<int>(t->shape.size()) != Rank) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: tensor '%.80s': rank: expected %d, got %d", name.c_str(),
                           Rank, static_cast<int>(t->shape.size()));
    }
    const unsigned char* p = bytes(*t);
    if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) != 0) {
      return Status::error(StatusCode::not_supported,
                           "safetensors: tensor '%.80s': data at byte %llu is not aligned to %zu "
                           "bytes; copy it out with bytes()",
                           name.c_str(), static_cast<unsigned long long>(t->data_begin),
                           alignof(T));
    }
    typename TensorView<const T, Rank>::Index extents{};
    for (int i = 0; i < Rank; ++i) extents[i] = t->shape[static_cast<std::size_t>(i)];
    *out = TensorView<const T, Rank>::contiguous(reinterpret_cast<const T*>(p), extents);
    return Status::ok();
  }

 private:
  Status parse_into(std::vector<unsigned char> bytes) {
    using json = nlohmann::json;
    if (bytes.size() < 8) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: file of %zu bytes, shorter than the 8-byte header length",
                           bytes.size());
    }
    std::uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
    const std::uint64_t available = bytes.size() - 8;
    if (header_bytes > available || header_bytes > kMaxHeaderBytes) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: header length %llu exceeds the %llu bytes after it (or "
                           "the %llu-byte limit)",
                           static_cast<unsigned long long>(header_bytes),
                           static_cast<unsigned long long>(available),
                           static_cast<unsigned long long>(kMaxHeaderBytes));
    }
    const char* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
    const json header =
        json::parse(header_begin, header_begin + header_bytes, nullptr, /*allow_exceptions=*/false);
    if (header.is_discarded()) {
      return Status::error(StatusCode::invalid_argument, "safetensors: header is not valid JSON");
    }
    if (!header.is_object()) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: header: expected a JSON object, got %s",
                           header.type_name());
    }
    const std::uint64_t data_bytes = available - header_bytes;

    std::map<std::string, std::string> metadata;
    std::vector<SafetensorsTensor> tensors;
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      const json& entry = it.value();
      if (name == "__metadata__") {
        GATED_ATTENTION_RETURN_IF_ERROR(parse_metadata(entry, &metadata));
        continue;
      }
      SafetensorsTensor t;
      t.name = name;
      GATED_ATTENTION_RETURN_IF_ERROR(parse_entry(entry, data_bytes, &t));
      tensors.push_back(std::move(t));
    }

    // The tensors must tile the data section: sorted by offset, each starts where the last ended.
    std::sort(tensors.begin(), tensors.end(),
              [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
                return a.data_begin != b.data_begin ? a.data_begin < b.data_begin
                                                    : a.data_end < b.data_end;
              });
    std::uint64_t covered = 0;
    const SafetensorsTensor* previous = nullptr;
    for (const auto& t : tensors) {
      if (t.data_begin < covered) {
        return Status::error(StatusCode::invalid_argument,
                             "safetensors: tensor '%.50s': data_offsets [%llu, %llu) overlap "
                             "tensor '%.50s'",
                             t.name.c_str(), static_cast<unsigned long long>(t.data_begin),
                             static_cast<unsigned long long>(t.data_end),
                             previous ? previous->name.c_str() : "");
      }
      if (t.data_begin > covered) {
        return Status::error(StatusCode::invalid_argument,
                             "safetensors: tensor '%.80s': data_offsets start at %llu, leaving a "
                             "hole after byte %llu",
                             t.name.c_str(), static_cast<unsigned long long>(t.data_begin),
                             static_cast<unsigned long long>(covered));
      }
      covered = t.data_end;
      previous = &t;
    }
    if (covered != data_bytes) {
      return Status::error(
          StatusCode::invalid_argument, "safetensors: tensors cover %llu of the %llu data bytes",
          static_cast<unsigned long long>(covered), static_cast<unsigned long long>(data_bytes));
    }
    bytes_ = std::move(bytes);
    data_start_ = 8 + header_bytes;
    tensors_ = std::move(tensors);
    metadata_ = std::move(metadata);
    return Status::ok();
  }

  static Status parse_metadata(const nlohmann::json& entry,
                               std::map<std::string, std::string>* out) {
    if (!entry.is_object()) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: __metadata__: expected an object, got %s",
                           entry.type_name());
    }
    for (auto it = entry.begin(); it != entry.end(); ++it) {
      if (!it.value().is_string()) {
        return Status::error(StatusCode::invalid_argument,
                             "safetensors: __metadata__ '%.80s': expected a string, got %s",
                             it.key().c_str(), it.value().type_name());
      }
      (*out)[it.key()] = it.value().get_ref<const std::string&>();
    }
    return Status::ok();
  }

  static Status parse_entry(const nlohmann::json& entry, std::uint64_t data_bytes,
                            SafetensorsTensor* t) {
    const char* name = t->name.c_str();
    if (!entry.is_object()) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: tensor '%.80s': expected an object, got %s", name,
                           entry.type_name());
    }
    const auto dtype = entry.find("dtype");
    const auto shape = entry.find("shape");
    const auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || shape == entry.end() || offsets == entry.end()) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: tensor '%.80s': missing field '%s'", name,
                           dtype == entry.end()   ? "dtype"
                           : shape == entry.end() ? "shape"
                                                  : "data_offsets");
    }
    if (!dtype->is_string()) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: tensor '%.80s': dtype: expected a string, got %s", name,
                           dtype->type_name());
    }
    const std::string& dtype_name = dtype->get_ref<const std::string&>();
    if (!parse_dtype(dtype_name, &t->dtype)) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: tensor '%.80s': unknown dtype '%.20s'", name,
                           dtype_name.c_str());
    }
    if (!shape->is_array()) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: tensor '%.80s': shape: expected an array, got %s", name,
                           shape->type_name());
    }
    std::uint64_t bytes = element_size(t->dtype);
    for (std::size_t i = 0; i < shape->size(); ++i) {
      const nlohmann::json& e = (*shape)[i];
      // Extents are non-negative integers below 2^63 (JSON negatives parse as number_integer).
      if (!e.is_number_unsigned() ||
          e.get<std::uint64_t>() >
              static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return Status::error(StatusCode::invalid_argument,
                             "safetensors: tensor '%.80s': shape dim %zu: expected a non-negative "
                             "integer",
                             name, i);
      }
      const std::uint64_t extent = e.get<std::uint64_t>();
      if (!detail::multiply(bytes, extent, &bytes)) {
        return Status::error(StatusCode::invalid_argument,
                             "safetensors: tensor '%.80s': shape: byte count overflows", name);
      }
      t->shape.push_back(static_cast<std::int64_t>(extent));
    }
    if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: tensor '%.80s': data_offsets: expected two non-negative "
                           "integers [begin, end]",
                           name);
    }
    t->data_begin = (*offsets)[0].get<std::uint64_t>();
    t->data_end = (*offsets)[1].get<std::uint64_t>();
    if (t->data_begin > t->data_end || t->data_end > data_bytes) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: tensor '%.80s': data_offsets [%llu, %llu) out of the "
                           "data section's %llu bytes",
                           name, static_cast<unsigned long long>(t->data_begin),
                           static_cast<unsigned long long>(t->data_end),
                           static_cast<unsigned long long>(data_bytes));
    }
    if (t->data_end - t->data_begin != bytes) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: tensor '%.80s': data_offsets span %llu bytes, shape and "
                           "dtype %s need %llu",
                           name, static_cast<unsigned long long>(t->data_end - t->data_begin),
                           to_string(t->dtype), static_cast<unsigned long long>(bytes));
    }
    return Status::ok();
  }

  std::vector<unsigned char> bytes_;  // the whole file
  std::uint64_t data_start_ = 0;      // 8 + header length
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `data` holds num_elements * element_size(dtype) bytes, row-major.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::f32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
};

// Serialises tensors (in the given order) and metadata into a whole file's bytes. The header is
// padded with spaces to a multiple of 8 bytes, as the Python library does: a tensor's data is then
// aligned for its dtype in a buffer that starts on an 8-byte boundary, provided the tensors before
// it span a multiple of that alignment (write the widest dtypes first).
// Names and metadata are expected to be UTF-8; invalid bytes are replaced by U+FFFD.
inline Status encode_safetensors(const std::vector<SafetensorsEntry>& tensors,
                                 const std::map<std::string, std::string>& metadata,
                                 std::vector<unsigned char>* out) {
  using json = nlohmann::json;
  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [key, value] : metadata) m[key] = value;
    header["__metadata__"] = std::move(m);
  }
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name)) {
      return Status::error(StatusCode::invalid_argument,
                           "safetensors: tensor '%.80s': name reserved or used twice",
                           t.name.c_str());
    }
    std::uint64_t bytes = element_size(t.dtype);
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (t.shape[i] < 0 ||
          !detail::multiply(bytes, static_cast<std::uint64_t>(t.shape[i]), &bytes)) {
        return Status::error(StatusCode::invalid_argument,
                             "safetensors: tensor '%.80s': shape dim %zu: expected a "
                             "non-negative extent, got %lld",
                             t.name.c_str(), i, static_cast<long long>(t.shape[i]));
      }
    }
    if (bytes > 0 && t.data == nullptr) {
      return Status::error(StatusCode::invalid_argument, "safetensors: tensor '%.80s': null data",
                           t.name.c_str());
    }
    header[t.name] = {{"dtype", to_string(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');
  out->assign(8, 0);
  for (int i = 0; i < 8; ++i) {
    (*out)[static_cast<std::size_t>(i)] =
        static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
  }
  out->insert(out->end(), text.begin(), text.end());
  for (const auto& t : tensors) {
    const auto* p = static_cast<const unsigned char*>(t.data);
    std::uint64_t bytes = element_size(t.dtype);
    for (auto e : t.shape) bytes *= static_cast<std::uint64_t>(e);
    if (bytes > 0) out->insert(out->end(), p, p + bytes);
  }
  return Status::ok();
}

inline Status write_safetensors(const std::string& path,
                                const std::vector<SafetensorsEntry>& tensors,
                                const std::map<std::string, std::string>& metadata) {
  std::vector<unsigned char> bytes;
  GATED_ATTENTION_RETURN_IF_ERROR(encode_safetensors(tensors, metadata, &bytes));
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file || !file.write(reinterpret_cast<const char*>(bytes.data()),
                           static_cast<std::streamsize>(bytes.size()))) {
    return Status::error(StatusCode::invalid_argument, "safetensors: cannot write '%.100s'",
                         path.c_str());
  }
  return Status::ok();
}

}  // namespace gated_attention::io
