#include "engine/checkpoint/safetensors.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

namespace vv {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference library's limit

std::string sq(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('\'');
  out.append(s);
  out.push_back('\'');
  return out;
}

Status parse_shape(simdjson::dom::element el, const std::string& where, std::vector<int64_t>& shape) {
  simdjson::dom::array arr;
  if (el.get_array().get(arr) != simdjson::SUCCESS) return invalid_argument(where + ": \"shape\" is not an array");
  for (auto d : arr) {
    int64_t v = 0;
    if (d.get_int64().get(v) != simdjson::SUCCESS || v < 0)
      return invalid_argument(where + ": \"shape\" holds a value that is not a non-negative integer");
    shape.push_back(v);
  }
  return Status::ok();
}

Status parse_offsets(simdjson::dom::element el, const std::string& where, uint64_t& begin, uint64_t& end) {
  simdjson::dom::array arr;
  if (el.get_array().get(arr) != simdjson::SUCCESS || arr.size() != 2)
    return invalid_argument(where + ": \"data_offsets\" is not an array of two integers");
  uint64_t v[2] = {0, 0};
  int i = 0;
  for (auto d : arr) {
    if (d.get_uint64().get(v[i]) != simdjson::SUCCESS)
      return invalid_argument(where + ": \"data_offsets\" holds a value that is not a non-negative integer");
    ++i;
  }
  begin = v[0];
  end = v[1];
  if (end < begin)
    return invalid_argument(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                            "] end before they begin");
  return Status::ok();
}

Status parse_metadata(simdjson::dom::element el, const std::string& source, SafetensorsHeader& out) {
  simdjson::dom::object obj;
  if (el.get_object().get(obj) != simdjson::SUCCESS)
    return invalid_argument(source + ": \"__metadata__\" is not an object");
  for (auto field : obj) {
    std::string_view v;
    if (field.value.get_string().get(v) != simdjson::SUCCESS)
      return invalid_argument(source + ": \"__metadata__\" key " + sq(field.key) + " is not a string");
    out.metadata.emplace_back(std::string(field.key), std::string(v));
  }
  return Status::ok();
}

Status parse_tensor(std::string_view name, simdjson::dom::element el, const std::string& source,
                    uint64_t data_start, uint64_t data_size, SafetensorsTensorInfo& t) {
  const std::string where = source + ": tensor " + sq(name);
  t.name = std::string(name);
  simdjson::dom::object obj;
  if (el.get_object().get(obj) != simdjson::SUCCESS) return invalid_argument(where + ": entry is not an object");
  std::string_view dtype;
  if (obj["dtype"].get_string().get(dtype) != simdjson::SUCCESS)
    return invalid_argument(where + ": missing or non-string \"dtype\"");
  const auto dt = parse_safetensors_dtype(dtype);
  if (!dt) return unsupported(where + ": unknown dtype " + sq(dtype));
  t.dtype = *dt;
  simdjson::dom::element shape_el, off_el;
  if (obj["shape"].get(shape_el) != simdjson::SUCCESS) return invalid_argument(where + ": missing \"shape\"");
  if (obj["data_offsets"].get(off_el) != simdjson::SUCCESS)
    return invalid_argument(where + ": missing \"data_offsets\"");
  VV_RETURN_IF_ERROR(parse_shape(shape_el, where, t.shape));
  VV_RETURN_IF_ERROR(parse_offsets(off_el, where, t.begin, t.end));
  uint64_t bytes = dtype_size(t.dtype);
  for (int64_t d : t.shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      return invalid_argument(where + ": shape overflows a 64-bit byte count");
  }
  if (bytes != t.end - t.begin)
    return invalid_argument(where + ": shape x " + dtype_name(t.dtype) + " is " + std::to_string(bytes) +
                            " bytes but data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                            "] span " + std::to_string(t.end - t.begin) + " (file bytes " +
                            std::to_string(data_start + t.begin) + ".." + std::to_string(data_start + t.end) + ")");
  if (t.end > data_size)
    return out_of_range(where + ": data_offsets end at data byte " + std::to_string(t.end) + " (file byte " +
                        std::to_string(data_start + t.end) + ") but the data section holds " + std::to_string(data_size) +
                        " bytes (file size " + std::to_string(data_start + data_size) + ")");
  return Status::ok();
}

Status check_overlaps(const SafetensorsHeader& h, const std::string& source) {
  std::vector<const SafetensorsTensorInfo*> sorted;
  for (const auto& t : h.tensors)
    if (t.end > t.begin) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const auto* prev = sorted[i - 1];
    const auto* cur = sorted[i];
    if (cur->begin < prev->end)
      return invalid_argument(source + ": tensor " + sq(cur->name) + " starts at byte " +
                              std::to_string(h.data_start + cur->begin) + " inside tensor " + sq(prev->name) +
                              " (bytes " + std::to_string(h.data_start + prev->begin) + ".." +
                              std::to_string(h.data_start + prev->end) + "): overlapping data_offsets");
  }
  return Status::ok();
}

}  // namespace

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "F32") return DType::kF32;
  if (name == "I32") return DType::kI32;
  if (name == "I64") return DType::kI64;
  if (name == "U8") return DType::kU8;
  if (name == "I8") return DType::kI8;
  return std::nullopt;
}

Result<SafetensorsHeader> parse_safetensors_header(const uint8_t* bytes, size_t size, const std::string& source) {
  if (size < 8)
    return invalid_argument(source + ": " + std::to_string(size) + " bytes is too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian
  if (n > size - 8)
    return out_of_range(source + ": header length " + std::to_string(n) + " at byte 0 runs past the end of the file (" +
                        std::to_string(size) + " bytes)");
  if (n > kMaxHeaderBytes)
    return out_of_range(source + ": header length " + std::to_string(n) + " exceeds the 100 MiB limit");
  if (n < 2) return invalid_argument(source + ": header (bytes 8.." + std::to_string(8 + n) + ") is not a JSON object");
  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = size - h.data_start;

  simdjson::dom::parser parser;
  simdjson::padded_string json(reinterpret_cast<const char*>(bytes + 8), static_cast<size_t>(n));
  simdjson::dom::element root;
  if (auto err = parser.parse(json).get(root); err != simdjson::SUCCESS)
    return invalid_argument(source + ": header (bytes 8.." + std::to_string(8 + n) + ") is not valid JSON: " +
                            simdjson::error_message(err));
  simdjson::dom::object obj;
  if (root.get_object().get(obj) != simdjson::SUCCESS)
    return invalid_argument(source + ": header (bytes 8.." + std::to_string(8 + n) + ") is not a JSON object");

  std::set<std::string_view> seen;
  for (auto field : obj) {
    if (!seen.insert(field.key).second)
      return invalid_argument(source + ": header names " + sq(field.key) + " twice");
    if (field.key == "__metadata__") {
      VV_RETURN_IF_ERROR(parse_metadata(field.value, source, h));
      continue;
    }
    SafetensorsTensorInfo t;
    VV_RETURN_IF_ERROR(parse_tensor(field.key, field.value, source, h.data_start, data_size, t));
    h.tensors.push_back(std::move(t));
  }
  VV_RETURN_IF_ERROR(check_overlaps(h, source));
  return h;
}

// --- SafetensorsFile ---------------------------------------------------------------------------

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  VV_ASSIGN_OR_RETURN(f.file_, MappedFile::open(path));
  VV_ASSIGN_OR_RETURN(f.header_, parse_safetensors_header(f.file_.data(), f.file_.size(), path));
  return f;
}

HostTensor SafetensorsFile::tensor(const SafetensorsTensorInfo& info) const {
  HostTensor t;
  t.name = info.name;
  t.dtype = info.dtype;
  t.shape = info.shape;
  t.data = file_.data() + header_.data_start + info.begin;
  return t;
}

// --- SafetensorsArchive ------------------------------------------------------------------------

namespace {

Result<std::string> read_text_file(const std::string& path) {
  VV_ASSIGN_OR_RETURN(MappedFile f, MappedFile::open(path));
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

// weight_map of an index file: tensor name -> shard file name.
Result<std::map<std::string, std::string>> parse_index(const std::string& path) {
  VV_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  simdjson::dom::parser parser;
  simdjson::padded_string json(text);
  simdjson::dom::element root;
  if (auto err = parser.parse(json).get(root); err != simdjson::SUCCESS)
    return invalid_argument(path + ": not valid JSON: " + simdjson::error_message(err));
  simdjson::dom::object map;
  if (root["weight_map"].get_object().get(map) != simdjson::SUCCESS)
    return invalid_argument(path + ": missing or non-object \"weight_map\"");
  std::map<std::string, std::string> out;
  for (auto field : map) {
    std::string_view shard;
    if (field.value.get_string().get(shard) != simdjson::SUCCESS)
      return invalid_argument(path + ": weight_map entry " + sq(field.key) + " is not a string");
    if (shard.empty() || shard.find('/') != std::string_view::npos || shard == "." || shard == "..")
      return invalid_argument(path + ": weight_map entry " + sq(field.key) + " names shard " + sq(shard) +
                              ", which is not a plain file name");
    out.emplace(std::string(field.key), std::string(shard));
  }
  return out;
}

}  // namespace

Status SafetensorsArchive::add_file(SafetensorsFile file) {
  const size_t fi = files_.size();
  for (size_t ti = 0; ti < file.header().tensors.size(); ++ti) {
    const auto& name = file.header().tensors[ti].name;
    auto [it, inserted] = index_.emplace(name, std::make_pair(fi, ti));
    if (!inserted)
      return invalid_argument(file.path() + ": tensor " + sq(name) + " is also in " + files_[it->second.first].path());
  }
  files_.push_back(std::move(file));
  return Status::ok();
}

Result<std::unique_ptr<SafetensorsArchive>> SafetensorsArchive::open_file(const std::string& path) {
  auto a = std::unique_ptr<SafetensorsArchive>(new SafetensorsArchive());
  VV_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
  VV_RETURN_IF_ERROR(a->add_file(std::move(f)));
  return a;
}

Result<std::unique_ptr<SafetensorsArchive>> SafetensorsArchive::open_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found(dir + ": not a directory");
  auto a = std::unique_ptr<SafetensorsArchive>(new SafetensorsArchive());
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index_path, ec)) {
    VV_ASSIGN_OR_RETURN(auto weight_map, parse_index(index_path.string()));
    std::set<std::string> shards;
    for (const auto& [name, shard] : weight_map) shards.insert(shard);
    for (const auto& shard : shards) {
      const std::string shard_path = (fs::path(dir) / shard).string();
      if (!fs::exists(shard_path, ec))
        return not_found(index_path.string() + ": names shard " + sq(shard) + ", which is missing (" + shard_path + ")");
      VV_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(shard_path));
      VV_RETURN_IF_ERROR(a->add_file(std::move(f)));
    }
    for (const auto& [name, shard] : weight_map) {
      auto it = a->index_.find(name);
      if (it == a->index_.end() || fs::path(a->files_[it->second.first].path()).filename() != shard)
        return not_found(index_path.string() + ": maps tensor " + sq(name) + " to shard " + sq(shard) +
                         ", which does not hold it");
    }
    return a;
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path().string());
  if (ec) return invalid_argument(dir + ": cannot list: " + ec.message());
  if (files.empty()) return not_found(dir + ": no *.safetensors file and no model.safetensors.index.json");
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    VV_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
    VV_RETURN_IF_ERROR(a->add_file(std::move(f)));
  }
  return a;
}

std::vector<std::string> SafetensorsArchive::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, loc] : index_) out.push_back(name);
  return out;
}

std::optional<HostTensor> SafetensorsArchive::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  const auto& file = files_[it->second.first];
  return file.tensor(file.header().tensors[it->second.second]);
}

std::string SafetensorsArchive::file_of(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? std::string() : files_[it->second.first].path();
}

}  // namespace vv
