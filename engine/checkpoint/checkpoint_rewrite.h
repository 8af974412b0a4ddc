// Rewriting a checkpoint under other tensor names, bytes unchanged: how tests (and tools) make the
// original Microsoft layout from a transformers one (golden names.json) or any other scheme.
// Pure functions over files; any thread.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "config/status.h"

namespace vv {

// Reads a JSON object of string -> string (e.g. golden names.json: transformers -> original name).
Result<std::map<std::string, std::string>> read_name_map(const std::string& path);

// Copies every tensor of the checkpoint in `src_dir` (one file or index shards) into
// `dst_dir/<file_name>` with the name rename(old) (dtype, shape and bytes unchanged, tensors in
// sorted new-name order, metadata {"format": "pt"}). When `write_index` is set, also writes
// `dst_dir/model.safetensors.index.json` mapping every tensor to that file. config.json is not
// copied: the caller provides the config of the target layout.
Status write_renamed_checkpoint(const std::string& src_dir, const std::string& dst_dir,
                                const std::function<std::string(const std::string&)>& rename,
                                const std::string& file_name = "model.safetensors", bool write_index = true);

}  // namespace vv
