// Writing a safetensors file from host tensors (tests build checkpoints in other layouts with it;
// tools may convert with it). Pure function over its arguments; any thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/status.h"
#include "engine/checkpoint/weights.h"

namespace vv {

// Writes `tensors` (in the order given, data packed back to back) to `path`, with an optional
// "__metadata__" map. The header is padded with spaces to a multiple of 8 bytes, as the reference
// library does. Names must be unique.
Status write_safetensors(const std::string& path, const std::vector<HostTensor>& tensors,
                         const std::vector<std::pair<std::string, std::string>>& metadata = {});

// The header JSON text that write_safetensors would write (unpadded), for crafting test files.
std::string safetensors_header_json(const std::vector<HostTensor>& tensors,
                                    const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace vv
