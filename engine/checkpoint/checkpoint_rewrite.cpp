#include "engine/checkpoint/checkpoint_rewrite.h"

#include <simdjson.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/safetensors_writer.h"

namespace vv {

Result<std::map<std::string, std::string>> read_name_map(const std::string& path) {
  simdjson::dom::parser parser;
  simdjson::padded_string json;
  if (simdjson::padded_string::load(path).get(json) != simdjson::SUCCESS) return not_found(path + ": cannot read");
  simdjson::dom::object obj;
  if (parser.parse(json).get_object().get(obj) != simdjson::SUCCESS)
    return invalid_argument(path + ": not a JSON object");
  std::map<std::string, std::string> out;
  for (auto field : obj) {
    std::string_view v;
    if (field.value.get_string().get(v) != simdjson::SUCCESS)
      return invalid_argument(path + ": value of '" + std::string(field.key) + "' is not a string");
    out.emplace(std::string(field.key), std::string(v));
  }
  return out;
}

Status write_renamed_checkpoint(const std::string& src_dir, const std::string& dst_dir,
                                const std::function<std::string(const std::string&)>& rename,
                                const std::string& file_name, bool write_index) {
  VV_ASSIGN_OR_RETURN(auto archive, SafetensorsArchive::open_dir(src_dir));
  std::map<std::string, HostTensor> renamed;
  for (const std::string& name : archive->names()) {
    HostTensor t = *archive->find(name);
    t.name = rename(name);
    if (!renamed.emplace(t.name, t).second)
      return invalid_argument(src_dir + ": two tensors are renamed to '" + t.name + "'");
  }
  std::vector<HostTensor> tensors;
  for (auto& [name, t] : renamed) tensors.push_back(t);
  const std::string out = (std::filesystem::path(dst_dir) / file_name).string();
  VV_RETURN_IF_ERROR(write_safetensors(out, tensors, {{"format", "pt"}}));
  if (!write_index) return Status::ok();
  uint64_t total = 0;
  std::string index = "{\n  \"metadata\": {\"total_size\": ";
  for (const auto& t : tensors) total += t.bytes();
  index += std::to_string(total) + "},\n  \"weight_map\": {";
  for (size_t i = 0; i < tensors.size(); ++i)
    index += std::string(i ? "," : "") + "\n    \"" + tensors[i].name + "\": \"" + file_name + "\"";
  index += "\n  }\n}\n";
  const std::string index_path = (std::filesystem::path(dst_dir) / "model.safetensors.index.json").string();
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(index_path.c_str(), "wb"), &std::fclose);
  if (!f || std::fwrite(index.data(), 1, index.size(), f.get()) != index.size())
    return internal_error(index_path + ": write failed");
  return Status::ok();
}

}  // namespace vv
