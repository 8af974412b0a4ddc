// libFuzzer target over the safetensors header parser (and, with the same bytes as JSON text, the
// config.json parser): any input must give a clean Status naming what was wrong, or a header whose
// every tensor lies inside the buffer without overlap; a parsed header must survive a
// write-and-reparse round trip unchanged.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint/model_spec.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/safetensors_writer.h"

namespace {

void check_header(const vv::SafetensorsHeader& h, const uint8_t* data, size_t size) {
  if (h.data_start < 8 || h.data_start > size) std::abort();
  const uint64_t data_size = size - h.data_start;
  std::vector<const vv::SafetensorsTensorInfo*> sorted;
  for (const auto& t : h.tensors) {
    if (t.begin > t.end || t.end > data_size) std::abort();
    uint64_t bytes = vv::dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0) std::abort();
      bytes *= static_cast<uint64_t>(d);  // cannot overflow: the parser checked
    }
    if (bytes != t.end - t.begin) std::abort();
    if (t.end > t.begin) sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i]->begin < sorted[i - 1]->end) std::abort();

  // Round trip: write the same tensors (names, dtypes, shapes, bytes) and parse again.
  std::vector<vv::HostTensor> tensors;
  std::string payload;
  for (const auto& t : h.tensors) {
    vv::HostTensor ht;
    ht.name = t.name;
    ht.dtype = t.dtype;
    ht.shape = t.shape;
    ht.data = data + h.data_start + t.begin;
    tensors.push_back(ht);
    payload.append(reinterpret_cast<const char*>(ht.data), t.end - t.begin);
  }
  const std::string json = vv::safetensors_header_json(tensors, h.metadata);
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  file += json;
  file += payload;
  auto again = vv::parse_safetensors_header(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "roundtrip");
  if (!again.is_ok() || again->tensors.size() != h.tensors.size() || again->metadata != h.metadata) std::abort();
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const auto& a = h.tensors[i];
    const auto& b = again->tensors[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.end - a.begin != b.end - b.begin) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = vv::parse_safetensors_header(data, size, "fuzz.safetensors");
  if (header.is_ok()) {
    check_header(*header, data, size);
  } else if (header.status().message().find("fuzz.safetensors") == std::string::npos) {
    std::abort();  // every error names the file
  }
  // The same bytes as a config.json: must parse or fail with a message, never crash.
  if (size < 64 * 1024) {
    auto spec = vv::parse_model_spec(std::string_view(reinterpret_cast<const char*>(data), size), "", "fuzz/config.json");
    if (!spec.is_ok() && spec.status().message().empty()) std::abort();
  }
  return 0;
}
