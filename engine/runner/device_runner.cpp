#include "engine/runner/device_runner.h"

#include "engine/runner/memory_plan.h"

namespace vv {

namespace {

// RunnerOptions::kv_dtype_follows_compute.
RunnerOptions kv_for(RunnerOptions o, const Backend& be, const BackendOptions& backend) {
  if (o.kv_dtype_follows_compute && backend.gpu_bf16_gemm && be.name().rfind("cuda", 0) == 0) {
    o.kv_dtype = DType::kBF16;
  }
  return o;
}

}  // namespace

Result<std::unique_ptr<Runner>> make_runner(const Checkpoint& ckpt, const RunnerOptions& opt,
                                            std::string_view device, const BackendOptions& backend) {
  VV_ASSIGN_OR_RETURN(auto be, make_backend(device, backend));
  const RunnerOptions o = kv_for(opt, *be, backend);
  return Runner::create(std::move(be), ckpt, o);
}

Result<SplitMode> parse_split_mode(std::string_view text) {
  if (text == "auto") return SplitMode::kAuto;
  if (text == "replica") return SplitMode::kReplica;
  if (text == "layer") return SplitMode::kLayer;
  return invalid_argument("split mode \"" + std::string(text) + "\": expected auto, replica or layer");
}

Result<std::vector<std::string>> parse_device_list(std::string_view text) {
  std::vector<std::string> out;
  if (text == "all") {
    const int n = usable_gpu_count();
    if (n == 0) return unsupported("devices \"all\": no usable GPU (" + gpu_unavailable_reason() + ")");
    for (int i = 0; i < n; ++i) out.push_back("cuda:" + std::to_string(i));
    return out;
  }
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    if (item.empty()) return invalid_argument("device list \"" + std::string(text) + "\" has an empty entry");
    VV_RETURN_IF_ERROR(parse_device(item).status());
    out.emplace_back(item);
    start = comma + 1;
  }
  return out;
}

namespace {

// One cap per device: none, one for all, or one each.
Result<std::vector<size_t>> device_caps(const std::string& memory,
                                        const std::vector<std::unique_ptr<Backend>>& be) {
  std::vector<size_t> caps(be.size(), 0);
  if (memory.empty()) return caps;
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= memory.size()) {
    const size_t comma = std::min(memory.find(',', start), memory.size());
    items.push_back(memory.substr(start, comma - start));
    start = comma + 1;
  }
  if (items.size() != 1 && items.size() != be.size()) {
    return invalid_argument("--gpu-memory: " + std::to_string(items.size()) + " sizes for " +
                            std::to_string(be.size()) + " devices (give one for all or one per device)");
  }
  for (size_t i = 0; i < be.size(); ++i) {
    size_t fr = 0, total = 0;
    be[i]->device_memory(&fr, &total);
    const std::string& item = items.size() == 1 ? items[0] : items[i];
    if (total == 0 && !item.empty() && item.back() == '%')
      continue;  // a share of GPU memory: no cap on the CPU
    auto c = parse_memory_size(item, total);
    if (!c.is_ok()) return invalid_argument("--gpu-memory: " + c.status().message());
    caps[i] = *c;
  }
  return caps;
}

}  // namespace

Result<std::vector<std::unique_ptr<Runner>>> make_runners(const Checkpoint& ckpt, const RunnerOptions& opt,
                                                          std::string_view devices,
                                                          const BackendOptions& backend,
                                                          const PlacementOptions& placement) {
  VV_ASSIGN_OR_RETURN(std::vector<std::string> names, parse_device_list(devices));
  std::vector<std::unique_ptr<Backend>> backends;
  for (const std::string& n : names) {
    VV_ASSIGN_OR_RETURN(auto be, make_backend(n, backend));
    backends.push_back(std::move(be));
  }
  VV_ASSIGN_OR_RETURN(std::vector<size_t> caps, device_caps(placement.memory, backends));
  std::vector<std::unique_ptr<Runner>> out;
  SplitMode split = placement.split;
  const int L = ckpt.spec().decoder.num_layers;
  if (backends.size() == 1) split = SplitMode::kReplica;
  if (split == SplitMode::kAuto) {
    // Replicas while each device holds the whole model with no streaming: the plan of every device
    // with all layers resident must fit its cap (no cap: it does).
    split = SplitMode::kReplica;
    for (size_t i = 0; i < backends.size() && caps[i] > 0; ++i) {
      RunnerOptions o = kv_for(opt, *backends[i], backend);
      o.memory_cap = caps[i];
      o.gpu_layers = L;
      auto probe = Runner::create(std::move(backends[i]), ckpt, o);
      if (!probe.is_ok()) {
        if (probe.status().code() != StatusCode::kResourceExhausted) return probe.status();
        split = SplitMode::kLayer;
        VV_ASSIGN_OR_RETURN(backends[i], make_backend(names[i], backend));  // the probe took it
        break;
      }
      out.push_back(std::move(probe).value());  // keep it: it is replica i
    }
    if (split == SplitMode::kLayer) {
      out.clear();
      for (size_t i = 0; i < backends.size(); ++i) {
        if (backends[i]) continue;
        VV_ASSIGN_OR_RETURN(backends[i], make_backend(names[i], backend));
      }
    }
  }
  if (split == SplitMode::kReplica) {
    for (size_t i = out.size(); i < backends.size(); ++i) {
      RunnerOptions o = kv_for(opt, *backends[i], backend);
      o.memory_cap = caps[i];
      o.gpu_layers = placement.gpu_layers;
      auto r = Runner::create(std::move(backends[i]), ckpt, o);
      if (!r.is_ok()) return Status(r.status().code(), names[i] + ": " + r.status().message());
      out.push_back(std::move(r).value());
    }
    return out;
  }
  RunnerOptions o = kv_for(opt, *backends.front(), backend);
  o.shard_memory_caps = caps;
  o.gpu_layers = placement.gpu_layers;
  VV_ASSIGN_OR_RETURN(auto r, Runner::create_sharded(std::move(backends), ckpt, o));
  out.push_back(std::move(r));
  return out;
}

}  // namespace vv
