// Safetensors reading: a pure header parser (any buffer, used by the fuzz target), one mmapped
// file, and an archive of files (one file, or shards named by model.safetensors.index.json).
// SafetensorsArchive owns its mappings; HostTensors it hands out stay valid while it lives.
// Immutable after open; any thread may read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/status.h"
#include "engine/checkpoint/mapped_file.h"
#include "engine/checkpoint/weights.h"
#include "kernels/backend.h"

namespace vv {

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets, relative to the start of the data section
};

struct SafetensorsHeader {
  uint64_t data_start = 0;  // byte offset of the data section in the file: 8 + header length
  std::vector<SafetensorsTensorInfo> tensors;  // in header order
  std::vector<std::pair<std::string, std::string>> metadata;  // "__metadata__"
};

// Parses and validates the header of a safetensors file held in `bytes[0, size)` (the whole
// file). Checks: length prefix within the file, JSON shape, known dtypes, non-negative shapes,
// shape × dtype size == byte length, offsets inside the data section and not overlapping,
// no duplicate names. Errors name `source`, the tensor and the byte offset at fault.
Result<SafetensorsHeader> parse_safetensors_header(const uint8_t* bytes, size_t size, const std::string& source);

// "BF16" -> kBF16, ...; nullopt for a dtype we do not read.
std::optional<DType> parse_safetensors_dtype(std::string_view name);

// One mmapped .safetensors file.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const SafetensorsHeader& header() const { return header_; }
  HostTensor tensor(const SafetensorsTensorInfo& info) const;  // a view into the mapping

 private:
  MappedFile file_;
  SafetensorsHeader header_;
};

// The tensors of one model directory, by stored name.
class SafetensorsArchive {
 public:
  // model.safetensors.index.json when present (every shard it names must exist and hold the
  // tensors it maps to it), else every *.safetensors file in the directory.
  static Result<std::unique_ptr<SafetensorsArchive>> open_dir(const std::string& dir);
  static Result<std::unique_ptr<SafetensorsArchive>> open_file(const std::string& path);

  // Stored names, sorted.
  std::vector<std::string> names() const;
  size_t size() const { return index_.size(); }
  // nullopt when absent.
  std::optional<HostTensor> find(const std::string& name) const;
  // The path of the file holding `name` ("" when absent).
  std::string file_of(const std::string& name) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  Status add_file(SafetensorsFile file);
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::pair<size_t, size_t>> index_;  // name -> (file, tensor)
};

}  // namespace vv
