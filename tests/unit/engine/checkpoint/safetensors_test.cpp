// The safetensors reader: golden file, round trips, every malformed-input rule, sharded indexes.
#include "engine/checkpoint/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "engine/checkpoint/safetensors_writer.h"
#include "tests/unit/engine/checkpoint/crafted_files.h"

namespace vv {
namespace {

using ::testing::HasSubstr;
using test::safetensors_bytes;
using test::write_file;

Result<std::unique_ptr<SafetensorsArchive>> open_bytes(const std::string& dir, const std::string& bytes) {
  const std::string path = dir + "/model.safetensors";
  write_file(path, bytes);
  return SafetensorsArchive::open_file(path);
}

TEST(Safetensors, GoldenHfFileParsesWithEveryTensorInsideTheFile) {
  const std::string path = test::golden_hf_dir() + "/model.safetensors";
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  const auto& h = f->header();
  ASSERT_GT(h.tensors.size(), 0u);
  const uint64_t file_size = std::filesystem::file_size(path);
  uint64_t covered = 0;
  for (const auto& t : h.tensors) {
    EXPECT_LE(h.data_start + t.end, file_size) << t.name;
    covered += t.end - t.begin;
  }
  EXPECT_EQ(h.data_start + covered, file_size);  // the reference writer packs tensors back to back
  ASSERT_EQ(h.metadata.size(), 1u);
  EXPECT_EQ(h.metadata[0].first, "format");
  EXPECT_EQ(h.metadata[0].second, "pt");
}

TEST(Safetensors, WriteThenReadRoundTripsEveryDtype) {
  const std::string dir = test::make_temp_dir("st-roundtrip");
  std::vector<DType> dtypes = {DType::kBF16, DType::kF16, DType::kF32, DType::kI32, DType::kI64, DType::kU8, DType::kI8};
  std::vector<std::vector<uint8_t>> storage;
  std::vector<HostTensor> tensors;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    HostTensor t;
    t.name = std::string("t.") + dtype_name(dtypes[i]);
    t.dtype = dtypes[i];
    t.shape = {2, static_cast<int64_t>(i) + 1};
    storage.emplace_back(t.bytes());
    for (size_t b = 0; b < storage.back().size(); ++b) storage.back()[b] = static_cast<uint8_t>(b * 7 + i);
    t.data = storage.back().data();
    tensors.push_back(t);
  }
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}}).is_ok());
  auto a = SafetensorsArchive::open_dir(dir);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto t = (*a)->find(tensors[i].name);
    ASSERT_TRUE(t.has_value()) << tensors[i].name;
    EXPECT_EQ(t->dtype, dtypes[i]);
    EXPECT_EQ(t->shape, tensors[i].shape);
    EXPECT_EQ(std::memcmp(t->data, storage[i].data(), storage[i].size()), 0) << tensors[i].name;
  }
}

TEST(Safetensors, ZeroSizedTensorIsAccepted) {
  auto a = open_bytes(test::make_temp_dir("st-zero"),
                      safetensors_bytes(R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}})", 0));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ((*a)->find("e")->numel(), 0);
}

TEST(SafetensorsMalformed, FileShorterThanLengthPrefixIsRefused) {
  auto a = open_bytes(test::make_temp_dir("st-short"), std::string(5, '\0'));
  ASSERT_FALSE(a.is_ok());
  EXPECT_THAT(a.status().message(), HasSubstr("model.safetensors"));
  EXPECT_THAT(a.status().message(), HasSubstr("8-byte header length"));
}

TEST(SafetensorsMalformed, HeaderLengthPastEndOfFileNamesFileAndOffset) {
  auto a = open_bytes(test::make_temp_dir("st-len"), safetensors_bytes("{}", 0, 1000));
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(a.status().message(), HasSubstr("model.safetensors"));
  EXPECT_THAT(a.status().message(), HasSubstr("header length 1000 at byte 0"));
}

TEST(SafetensorsMalformed, InvalidJsonNamesTheHeaderBytes) {
  auto a = open_bytes(test::make_temp_dir("st-json"), safetensors_bytes(R"({"a":{"dtype":"F32",)", 0));
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(a.status().message(), HasSubstr("bytes 8..28"));
}

TEST(SafetensorsMalformed, HeaderThatIsNotAnObjectIsRefused) {
  auto a = open_bytes(test::make_temp_dir("st-arr"), safetensors_bytes("[1,2]", 0));
  ASSERT_FALSE(a.is_ok());
  EXPECT_THAT(a.status().message(), HasSubstr("not a JSON object"));
}

TEST(SafetensorsMalformed, UnknownDtypeNamesTheTensor) {
  auto a = open_bytes(test::make_temp_dir("st-dtype"),
                      safetensors_bytes(R"({"w.q":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2));
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(a.status().message(), HasSubstr("'w.q'"));
  EXPECT_THAT(a.status().message(), HasSubstr("F8_E4M3"));
}

TEST(SafetensorsMalformed, ShapeTimesDtypeNotEqualToByteSpanNamesTheTensor) {
  auto a = open_bytes(test::make_temp_dir("st-span"),
                      safetensors_bytes(R"({"w":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,10]}})", 10));
  ASSERT_FALSE(a.is_ok());
  EXPECT_THAT(a.status().message(), HasSubstr("'w'"));
  EXPECT_THAT(a.status().message(), HasSubstr("12 bytes"));
  EXPECT_THAT(a.status().message(), HasSubstr("span 10"));
}

TEST(SafetensorsMalformed, OffsetsPastTheDataSectionAreOutOfRange) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  auto a = open_bytes(test::make_temp_dir("st-oob"), safetensors_bytes(header, 16));
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(a.status().message(), HasSubstr("'w'"));
  EXPECT_THAT(a.status().message(), HasSubstr("data byte 24"));
  EXPECT_THAT(a.status().message(), HasSubstr("file byte " + std::to_string(8 + header.size() + 24)));
  EXPECT_THAT(a.status().message(), HasSubstr("16 bytes"));
}

TEST(SafetensorsMalformed, OverlappingOffsetsNameBothTensorsAndTheFileOffset) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  auto a = open_bytes(test::make_temp_dir("st-overlap"), safetensors_bytes(header, 16));
  ASSERT_FALSE(a.is_ok());
  EXPECT_THAT(a.status().message(), HasSubstr("'b'"));
  EXPECT_THAT(a.status().message(), HasSubstr("'a'"));
  EXPECT_THAT(a.status().message(), HasSubstr("overlapping"));
  EXPECT_THAT(a.status().message(), HasSubstr("at byte " + std::to_string(8 + header.size() + 8)));
}

TEST(SafetensorsMalformed, OffsetsThatEndBeforeTheyBeginAreRefused) {
  auto a = open_bytes(test::make_temp_dir("st-rev"),
                      safetensors_bytes(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4));
  ASSERT_FALSE(a.is_ok());
  EXPECT_THAT(a.status().message(), HasSubstr("end before they begin"));
}

TEST(SafetensorsMalformed, NegativeDimensionIsRefused) {
  auto a = open_bytes(test::make_temp_dir("st-neg"),
                      safetensors_bytes(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", 0));
  ASSERT_FALSE(a.is_ok());
  EXPECT_THAT(a.status().message(), HasSubstr("'w'"));
  EXPECT_THAT(a.status().message(), HasSubstr("shape"));
}

TEST(SafetensorsMalformed, ShapeOverflowingByteCountIsRefused) {
  auto a = open_bytes(
      test::make_temp_dir("st-ovf"),
      safetensors_bytes(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0));
  ASSERT_FALSE(a.is_ok());
  EXPECT_THAT(a.status().message(), HasSubstr("overflows"));
}

TEST(SafetensorsMalformed, DuplicateTensorNameIsRefused) {
  const std::string header =
      R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  auto a = open_bytes(test::make_temp_dir("st-dup"), safetensors_bytes(header, 2));
  ASSERT_FALSE(a.is_ok());
  EXPECT_THAT(a.status().message(), HasSubstr("'w' twice"));
}

TEST(SafetensorsMalformed, MissingFieldsAndNonStringMetadataAreRefused) {
  for (const char* header : {R"({"w":{"shape":[1],"data_offsets":[0,1]}})", R"({"w":{"dtype":"U8","data_offsets":[0,1]}})",
                             R"({"w":{"dtype":"U8","shape":[1]}})", R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})",
                             R"({"__metadata__":{"format":1}})", R"({"w":7})"}) {
    auto a = open_bytes(test::make_temp_dir("st-fields"), safetensors_bytes(header, 1));
    EXPECT_FALSE(a.is_ok()) << header;
  }
}

TEST(SafetensorsIndex, ShardsNamedByTheIndexAreAllLoaded) {
  const std::string dir = test::make_temp_dir("st-shards");
  write_file(dir + "/a.safetensors", safetensors_bytes(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2));
  write_file(dir + "/b.safetensors", safetensors_bytes(R"({"y":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})", 3));
  write_file(dir + "/model.safetensors.index.json",
             R"({"metadata":{},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})");
  auto a = SafetensorsArchive::open_dir(dir);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ((*a)->names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ((*a)->files().size(), 2u);
  EXPECT_THAT((*a)->file_of("y"), HasSubstr("b.safetensors"));
}

TEST(SafetensorsIndex, IndexNamingAMissingShardNamesIndexAndShard) {
  const std::string dir = test::make_temp_dir("st-missing-shard");
  write_file(dir + "/a.safetensors", safetensors_bytes(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2));
  write_file(dir + "/model.safetensors.index.json",
             R"({"weight_map":{"x":"a.safetensors","y":"model-00002-of-00002.safetensors"}})");
  auto a = SafetensorsArchive::open_dir(dir);
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(a.status().message(), HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(a.status().message(), HasSubstr("model-00002-of-00002.safetensors"));
}

TEST(SafetensorsIndex, IndexMappingATensorToTheWrongShardIsRefused) {
  const std::string dir = test::make_temp_dir("st-wrong-shard");
  write_file(dir + "/a.safetensors", safetensors_bytes(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2));
  write_file(dir + "/model.safetensors.index.json", R"({"weight_map":{"x":"a.safetensors","z":"a.safetensors"}})");
  auto a = SafetensorsArchive::open_dir(dir);
  ASSERT_FALSE(a.is_ok());
  EXPECT_THAT(a.status().message(), HasSubstr("'z'"));
}

TEST(SafetensorsIndex, ShardNameWithAPathIsRefused) {
  const std::string dir = test::make_temp_dir("st-path-shard");
  write_file(dir + "/model.safetensors.index.json", R"({"weight_map":{"x":"../etc/passwd"}})");
  auto a = SafetensorsArchive::open_dir(dir);
  ASSERT_FALSE(a.is_ok());
  EXPECT_THAT(a.status().message(), HasSubstr("not a plain file name"));
}

TEST(SafetensorsIndex, TensorInTwoShardsIsRefused) {
  const std::string dir = test::make_temp_dir("st-two");
  write_file(dir + "/a.safetensors", safetensors_bytes(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2));
  write_file(dir + "/b.safetensors", safetensors_bytes(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2));
  auto a = SafetensorsArchive::open_dir(dir);
  ASSERT_FALSE(a.is_ok());
  EXPECT_THAT(a.status().message(), HasSubstr("also in"));
}

TEST(SafetensorsIndex, DirectoryWithoutSafetensorsIsNotFound) {
  auto a = SafetensorsArchive::open_dir(test::make_temp_dir("st-empty"));
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace vv
