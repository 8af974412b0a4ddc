#include "engine/checkpoint/safetensors_writer.h"

#include <cstdio>
#include <memory>
#include <set>

namespace vv {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

std::string safetensors_header_json(const std::vector<HostTensor>& tensors,
                                    const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) h += ",";
      h += json_string(metadata[i].first) + ":" + json_string(metadata[i].second);
    }
    h += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (!first) h += ",";
    first = false;
    h += json_string(t.name) + ":{\"dtype\":\"" + dtype_name(t.dtype) + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) h += ",";
      h += std::to_string(t.shape[i]);
    }
    const uint64_t end = offset + t.bytes();
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  return h + "}";
}

Status write_safetensors(const std::string& path, const std::vector<HostTensor>& tensors,
                         const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (!names.insert(t.name).second) return invalid_argument(path + ": tensor '" + t.name + "' given twice");
    if (t.data == nullptr && t.bytes() > 0) return invalid_argument(path + ": tensor '" + t.name + "' has no data");
  }
  std::string header = safetensors_header_json(tensors, metadata);
  while (header.size() % 8 != 0) header += ' ';
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return invalid_argument(path + ": cannot open for writing");
  unsigned char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f.get()) == 8 && std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
  for (const auto& t : tensors) {
    if (!ok) break;
    if (t.bytes() > 0) ok = std::fwrite(t.data, 1, t.bytes(), f.get()) == t.bytes();
  }
  if (!ok) return internal_error(path + ": write failed");
  if (std::fclose(f.release()) != 0) return internal_error(path + ": close failed");
  return Status::ok();
}

}  // namespace vv
