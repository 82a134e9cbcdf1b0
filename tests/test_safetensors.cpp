// io::SafetensorsFile: a round trip through encode/write and parse/read (every dtype the views
// support, scalars and empty tensors, metadata), view checks (dtype, rank, alignment), and a
// Status naming the fault for each kind of malformed file.
#include <catch2/catch.hpp>

#include <gated_attention/io/safetensors.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "support.hpp"

namespace ga = gated_attention;
namespace io = gated_attention::io;

namespace {

// A file's bytes: little-endian `length` (the header's unless given), header text, `data_bytes`
// bytes counting up from 0.
std::vector<unsigned char> file_with(const std::string& header, std::size_t data_bytes,
                                     std::uint64_t length) {
  std::vector<unsigned char> bytes(8);
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = (length >> (8 * i)) & 0xff;
  bytes.insert(bytes.end(), header.begin(), header.end());
  for (std::size_t i = 0; i < data_bytes; ++i) bytes.push_back(static_cast<unsigned char>(i));
  return bytes;
}
std::vector<unsigned char> file_with(const std::string& header, std::size_t data_bytes) {
  return file_with(header, data_bytes, header.size());
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("safetensors: round trip of every view dtype, scalars, empty tensors and metadata",
          "[safetensors]") {
  auto rng = ga::testing::make_rng(601);
  const std::vector<double> f64 = ga::testing::random_vector<double>(rng, 3);
  const std::vector<float> f32 = ga::testing::random_vector<float>(rng, 2 * 3 * 4);
  const std::vector<ga::bf16> b16 = ga::testing::random_vector<ga::bf16>(rng, 5);
  const std::vector<ga::f16> h16 = ga::testing::random_vector<ga::f16>(rng, 6);
  const std::vector<std::int64_t> i64 = {-3, 0, 1LL << 40, 7};
  const std::vector<std::int32_t> i32 = {-1, 2, 3};
  const std::vector<std::uint8_t> u8 = {0, 255, 17};
  const float scalar = 2.5f;
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "é \"quoted\""}};

  // Widest dtypes first keeps every tensor aligned (see encode_safetensors).
  const std::vector<io::SafetensorsEntry> entries = {
      {"f64", io::SafetensorsDtype::f64, {3}, f64.data()},
      {"i64", io::SafetensorsDtype::i64, {2, 2}, i64.data()},
      {"layer.0.f32", io::SafetensorsDtype::f32, {2, 3, 4}, f32.data()},
      {"scalar", io::SafetensorsDtype::f32, {}, &scalar},
      {"empty", io::SafetensorsDtype::f32, {0, 5}, nullptr},
      {"i32", io::SafetensorsDtype::i32, {3}, i32.data()},
      {"bf16", io::SafetensorsDtype::bf16, {5}, b16.data()},
      {"f16", io::SafetensorsDtype::f16, {2, 3}, h16.data()},
      {"u8", io::SafetensorsDtype::u8, {3}, u8.data()},
  };
  std::vector<unsigned char> bytes;
  REQUIRE(io::encode_safetensors(entries, metadata, &bytes).is_ok());
  std::uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | bytes[i];
  CHECK(header_length % 8 == 0);

  // Through memory and through a file.
  const std::string path =
      (std::filesystem::temp_directory_path() / "gated_attention_test_roundtrip.safetensors")
          .string();
  REQUIRE(io::write_safetensors(path, entries, metadata).is_ok());
  io::SafetensorsFile from_file;
  const ga::Status read_status = from_file.read(path);
  std::remove(path.c_str());
  INFO(read_status.message());
  REQUIRE(read_status.is_ok());
  io::SafetensorsFile from_memory;
  REQUIRE(from_memory.parse(bytes).is_ok());

  for (const io::SafetensorsFile* file : {&from_file, &from_memory}) {
    const io::SafetensorsFile& f = *file;
    REQUIRE(f.tensors().size() == entries.size());
    CHECK(f.metadata() == metadata);
    REQUIRE(f.find_metadata("note") != nullptr);
    CHECK(*f.find_metadata("note") == "é \"quoted\"");
    CHECK(f.find_metadata("absent") == nullptr);
    // tensors() is in data order, which is the order written.
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const io::SafetensorsTensor& t = f.tensors()[i];
      CHECK(t.name == entries[i].name);
      CHECK(t.dtype == entries[i].dtype);
      CHECK(t.shape == entries[i].shape);
      CHECK(t.data_end - t.data_begin ==
            static_cast<std::uint64_t>(t.num_elements()) * io::element_size(t.dtype));
    }

    ga::TensorView<const float, 3> v32;
    REQUIRE(f.view("layer.0.f32", &v32).is_ok());
    CHECK(v32.extents == std::array<std::int64_t, 3>{2, 3, 4});
    CHECK(std::vector<float>(v32.data, v32.data + v32.num_elements()) == f32);
    CHECK(v32(1, 2, 3) == f32[23]);
    ga::TensorView<const double, 1> v64;
    REQUIRE(f.view("f64", &v64).is_ok());
    CHECK(std::vector<double>(v64.data, v64.data + 3) == f64);
    ga::TensorView<const std::int64_t, 2> vi64;
    REQUIRE(f.view("i64", &vi64).is_ok());
    CHECK(vi64(1, 0) == (1LL << 40));
    CHECK(vi64(0, 0) == -3);
    ga::TensorView<const std::int32_t, 1> vi32;
    REQUIRE(f.view("i32", &vi32).is_ok());
    CHECK(vi32(0) == -1);
    ga::TensorView<const ga::bf16, 1> vb16;
    REQUIRE(f.view("bf16", &vb16).is_ok());
    for (int i = 0; i < 5; ++i) CHECK(ga::to_float(vb16(i)) == ga::to_float(b16[i]));
    ga::TensorView<const ga::f16, 2> vh16;
    REQUIRE(f.view("f16", &vh16).is_ok());
    CHECK(ga::to_float(vh16(1, 2)) == ga::to_float(h16[5]));
    ga::TensorView<const std::uint8_t, 1> vu8;
    REQUIRE(f.view("u8", &vu8).is_ok());
    CHECK(vu8(1) == 255);
    const io::SafetensorsTensor* s = f.find("scalar");
    REQUIRE(s != nullptr);
    CHECK(s->shape.empty());
    CHECK(s->num_elements() == 1);
    float scalar_read = 0.0f;
    std::memcpy(&scalar_read, f.bytes(*s), sizeof scalar_read);
    CHECK(scalar_read == scalar);
    ga::TensorView<const float, 2> empty;
    REQUIRE(f.view("empty", &empty).is_ok());
    CHECK(empty.extents == std::array<std::int64_t, 2>{0, 5});
    CHECK(empty.num_elements() == 0);
  }

  // A copy keeps working after the original is gone.
  io::SafetensorsFile copy;
  {
    io::SafetensorsFile original;
    REQUIRE(original.parse(bytes).is_ok());
    copy = original;
  }
  ga::TensorView<const float, 3> v;
  REQUIRE(copy.view("layer.0.f32", &v).is_ok());
  CHECK(v(0, 1, 2) == f32[6]);
}

TEST_CASE("safetensors: view() checks presence, dtype, rank and alignment", "[safetensors]") {
  const std::vector<float> data = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<unsigned char> bytes;
  REQUIRE(
      io::encode_safetensors({{"w", io::SafetensorsDtype::f32, {2, 2}, data.data()}}, {}, &bytes)
          .is_ok());
  io::SafetensorsFile f;
  REQUIRE(f.parse(bytes).is_ok());
  CHECK(f.metadata().empty());

  ga::TensorView<const float, 2> ok;
  CHECK(f.view("w", &ok).is_ok());
  ga::TensorView<const float, 2> absent;
  ga::Status s = f.view("x", &absent);
  CHECK(s.code() == ga::StatusCode::invalid_argument);
  CHECK(contains(s.message(), "no tensor 'x'"));
  ga::TensorView<const double, 2> wrong_dtype;
  s = f.view("w", &wrong_dtype);
  CHECK(contains(s.message(), "'w': dtype: expected F64, got F32"));
  ga::TensorView<const float, 1> wrong_rank;
  s = f.view("w", &wrong_rank);
  CHECK(contains(s.message(), "'w': rank: expected 1, got 2"));

  // A header whose length is not a multiple of 4 leaves F32 data misaligned: view() refuses
  // (not_supported) and the bytes stay readable.
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} )";
  REQUIRE(header.size() % 4 != 0);
  REQUIRE(f.parse(file_with(header, 8)).is_ok());
  ga::TensorView<const float, 1> misaligned;
  s = f.view("w", &misaligned);
  CHECK(s.code() == ga::StatusCode::not_supported);
  CHECK(contains(s.message(), "not aligned"));
  REQUIRE(f.find("w") != nullptr);
  CHECK(f.bytes(*f.find("w"))[5] == 5);

  CHECK_FALSE(f.read("/nonexistent/gated_attention.safetensors").is_ok());
  CHECK(f.tensors().empty());
}

TEST_CASE("safetensors: each malformed file gives a Status naming the fault", "[safetensors]") {
  struct Case {
    const char* what;
    std::vector<unsigned char> bytes;
    const char* message;  // a part of the expected message
  };
  const std::string a_f32x2 = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::vector<Case> cases = {
      {"shorter than the length field", {1, 0, 0}, "shorter than the 8-byte header length"},
      {"length beyond the file", file_with("{}", 0, 3), "header length 3 exceeds the 2 bytes"},
      {"length near 2^64", file_with("{}", 0, ~0ull), "exceeds"},
      {"not JSON", file_with("{\"a\":", 0), "not valid JSON"},
      {"JSON but not an object", file_with("[1,2]", 0), "expected a JSON object, got array"},
      {"entry not an object", file_with(R"({"a":5})", 0), "'a': expected an object, got number"},
      {"missing dtype", file_with(R"({"a":{"shape":[],"data_offsets":[0,4]}})", 4),
       "'a': missing field 'dtype'"},
      {"missing shape", file_with(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4),
       "'a': missing field 'shape'"},
      {"missing data_offsets", file_with(R"({"a":{"dtype":"F32","shape":[]}})", 4),
       "'a': missing field 'data_offsets'"},
      {"dtype not a string", file_with(R"({"a":{"dtype":4,"shape":[],"data_offsets":[0,4]}})", 4),
       "'a': dtype: expected a string, got number"},
      {"unknown dtype", file_with(R"({"a":{"dtype":"F33","shape":[],"data_offsets":[0,4]}})", 4),
       "'a': unknown dtype 'F33'"},
      {"shape not an array",
       file_with(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8),
       "'a': shape: expected an array"},
      {"negative extent",
       file_with(R"({"a":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}})", 8),
       "'a': shape dim 1: expected a non-negative integer"},
      {"fractional extent",
       file_with(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8),
       "'a': shape dim 0: expected a non-negative integer"},
      {"byte count overflow",
       file_with(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})",
                 8),
       "'a': shape: byte count overflows"},
      {"one offset", file_with(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[4]}})", 4),
       "'a': data_offsets: expected two non-negative integers"},
      {"negative offset", file_with(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[-4,0]}})", 4),
       "'a': data_offsets: expected two non-negative integers"},
      {"begin after end", file_with(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[8,4]}})", 8),
       "'a': data_offsets [8, 4) out of the data section's 8 bytes"},
      {"end beyond the data",
       file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 6),
       "'a': data_offsets [0, 8) out of the data section's 6 bytes"},
      {"shape and bytes disagree",
       file_with(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "'a': data_offsets span 8 bytes, shape and dtype F32 need 12"},
      {"overlapping tensors",
       file_with("{" + a_f32x2 + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       "'b': data_offsets [4, 12) overlap tensor 'a'"},
      {"hole between tensors",
       file_with("{" + a_f32x2 + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16),
       "'b': data_offsets start at 12, leaving a hole after byte 8"},
      {"trailing bytes", file_with("{" + a_f32x2 + "}", 12), "tensors cover 8 of the 12 data"},
      {"metadata not an object", file_with(R"({"__metadata__":[]})", 0),
       "__metadata__: expected an object, got array"},
      {"metadata value not a string", file_with(R"({"__metadata__":{"n":1}})", 0),
       "__metadata__ 'n': expected a string, got number"},
  };
  for (const Case& c : cases) {
    io::SafetensorsFile f;
    // A valid file first, so that a failed parse is seen to leave the object empty.
    REQUIRE(f.parse(file_with("{" + a_f32x2 + "}", 8)).is_ok());
    REQUIRE(f.tensors().size() == 1);
    const ga::Status s = f.parse(c.bytes);
    INFO(c.what << ": " << s.message());
    CHECK(s.code() == ga::StatusCode::invalid_argument);
    CHECK(contains(s.message(), c.message));
    CHECK(f.tensors().empty());
    CHECK(f.metadata().empty());
  }

  // The valid neighbours of those cases parse: an empty header, and a header padded with spaces.
  io::SafetensorsFile f;
  CHECK(f.parse(file_with("{}", 0)).is_ok());
  CHECK(f.parse(file_with("{" + a_f32x2 + "}   ", 8)).is_ok());
}

TEST_CASE("safetensors: encode_safetensors rejects what it cannot write", "[safetensors]") {
  const float x = 1.0f;
  std::vector<unsigned char> bytes;
  ga::Status s = io::encode_safetensors(
      {{"a", io::SafetensorsDtype::f32, {}, &x}, {"a", io::SafetensorsDtype::f32, {}, &x}}, {},
      &bytes);
  CHECK(contains(s.message(), "'a': name reserved or used twice"));
  s = io::encode_safetensors({{"__metadata__", io::SafetensorsDtype::f32, {}, &x}}, {}, &bytes);
  CHECK(contains(s.message(), "name reserved or used twice"));
  s = io::encode_safetensors({{"a", io::SafetensorsDtype::f32, {2, -1}, &x}}, {}, &bytes);
  CHECK(contains(s.message(), "'a': shape dim 1: expected a non-negative extent, got -1"));
  s = io::encode_safetensors({{"a", io::SafetensorsDtype::f32, {1}, nullptr}}, {}, &bytes);
  CHECK(contains(s.message(), "'a': null data"));
}

TEST_CASE("safetensors: corrupted files parse consistently or fail with a Status",
          "[safetensors]") {
  auto rng = ga::testing::make_rng(602);
  const std::vector<float> a = ga::testing::random_vector<float>(rng, 6);
  const std::vector<std::int64_t> b = {1, 2, 3};
  std::vector<unsigned char> valid;
  REQUIRE(io::encode_safetensors({{"b", io::SafetensorsDtype::i64, {3}, b.data()},
                                  {"a", io::SafetensorsDtype::f32, {2, 3}, a.data()}},
                                 {{"k", "v"}}, &valid)
              .is_ok());
  std::uniform_int_distribution<std::size_t> position(0, valid.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  int parsed = 0, failed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<unsigned char> bytes = valid;
    // One to three random bytes replaced, or the file cut short.
    if (trial % 10 == 9) {
      bytes.resize(position(rng));
    } else {
      for (int i = 0; i <= trial % 3; ++i)
        bytes[position(rng)] = static_cast<unsigned char>(byte(rng));
    }
    io::SafetensorsFile f;
    const ga::Status s = f.parse(bytes);
    if (!s.is_ok()) {
      ++failed;
      CHECK(s.code() == ga::StatusCode::invalid_argument);
      CHECK(f.tensors().empty());
      continue;
    }
    ++parsed;
    // Whatever parses tiles its data section exactly.
    std::uint64_t covered = 0;
    for (const io::SafetensorsTensor& t : f.tensors()) {
      CHECK(t.data_begin == covered);
      CHECK(t.data_end - t.data_begin ==
            static_cast<std::uint64_t>(t.num_elements()) * io::element_size(t.dtype));
      covered = t.data_end;
    }
    std::uint64_t header_length = 0;
    for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | bytes[i];
    CHECK(covered == bytes.size() - 8 - header_length);
  }
  // Byte flips in the data section keep the file valid; flips in the header mostly break it.
  CHECK(parsed > 0);
  CHECK(failed > 0);
}

TEST_CASE("safetensors: metadata read as numbers and integers, bad values refused by name",
          "[safetensors]") {
  const std::map<std::string, std::string> metadata = {
      {"eps", "1e-06"}, {"layers", "4"}, {"theta", "10000.0"}, {"word", "four"},
      {"inf", "inf"},   {"half", "2.5"}, {"trailing", "3x"},   {"empty", ""}};
  std::vector<unsigned char> bytes;
  REQUIRE(io::encode_safetensors({}, metadata, &bytes).is_ok());
  io::SafetensorsFile f;
  REQUIRE(f.parse(bytes).is_ok());

  double number = 0.0;
  REQUIRE(f.metadata_number("eps", &number).is_ok());
  CHECK(number == 1e-6);
  REQUIRE(f.metadata_number("theta", &number).is_ok());
  CHECK(number == 10000.0);
  std::int64_t integer = 0;
  REQUIRE(f.metadata_integer("layers", &integer).is_ok());
  CHECK(integer == 4);
  REQUIRE(f.metadata_integer("theta", &integer).is_ok());
  CHECK(integer == 10000);

  for (const char* key : {"word", "inf", "trailing", "empty"}) {
    const ga::Status s = f.metadata_number(key, &number);
    INFO(key << ": " << s.message());
    CHECK(s.code() == ga::StatusCode::invalid_argument);
    CHECK(std::string(s.message()).find(key) != std::string::npos);
  }
  const ga::Status absent = f.metadata_number("absent", &number);
  CHECK(std::string(absent.message()).find("lacks 'absent'") != std::string::npos);
  const ga::Status fraction = f.metadata_integer("half", &integer);
  CHECK(std::string(fraction.message()).find("expected an integer, got 2.5") != std::string::npos);
}
