// Small helpers for the checkpoint tests: write raw bytes, craft safetensors files from a header
// text, and copy the golden model directories into temp dirs under other layouts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "engine/checkpoint/checkpoint_rewrite.h"
#include "tests/support/test_paths.h"

namespace vv::test {

// Removes a temp dir (and the model copies in it) when the test scope ends.
class ScopedDir {
 public:
  explicit ScopedDir(std::string path) : path_(std::move(path)) {}
  ~ScopedDir() {
    // Only a sub-directory of the temp dir made by make_temp_dir, never the temp dir itself.
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path p(path_), tmp = fs::temp_directory_path(ec);
    if (!path_.empty() && !ec && p.parent_path() == tmp && p != tmp) fs::remove_all(p, ec);
  }
  ScopedDir(const ScopedDir&) = delete;
  ScopedDir& operator=(const ScopedDir&) = delete;

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// 8-byte little-endian length + header text + `data_bytes` zero bytes.
inline std::string safetensors_bytes(const std::string& header, size_t data_bytes, uint64_t declared_len = UINT64_MAX) {
  const uint64_t n = declared_len == UINT64_MAX ? header.size() : declared_len;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

inline std::string golden_hf_dir() { return golden_dir() + "/model-hf"; }

// A fresh dir holding `config_src` as config.json and the golden HF tensors renamed by `rename`.
inline std::string renamed_model_dir(const std::string& prefix, const std::string& config_src,
                                     const std::function<std::string(const std::string&)>& rename,
                                     bool write_index = true) {
  const std::string dir = make_temp_dir(prefix);
  std::filesystem::copy_file(config_src, dir + "/config.json");
  const Status s = write_renamed_checkpoint(golden_hf_dir(), dir, rename, "model.safetensors", write_index);
  if (!s.is_ok()) return "";
  return dir;
}

// The golden HF model rewritten in Microsoft's original layout (names from names.json, bytes
// identical, with an index file), as the golden README describes.
inline std::string original_layout_dir() {
  auto names = read_name_map(golden_dir() + "/names.json");
  if (!names.is_ok()) return "";
  auto map = names.value();
  return renamed_model_dir("ckpt-orig", golden_dir() + "/model-orig/config.json", [map](const std::string& n) {
    auto it = map.find(n);
    return it == map.end() ? n : it->second;
  });
}

}  // namespace vv::test
