// MappedFile: a whole file mapped read-only into memory (mmap), unmapped when destroyed.
// Move-only; owns the mapping. Reading the bytes is safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "config/status.h"

namespace vv {

class MappedFile {
 public:
  // Maps `path`. An empty file maps to size 0 with a null data pointer.
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace vv
