// The device-generic factory of Runner: binds a Checkpoint to the Backend a device string names
// ("cpu", "cuda", "cuda:N", "auto": see kernels/device/backend_factory.h). The returned Runner is
// owned by the caller; a device that is not usable is an error naming it (no silent fallback —
// "auto" is the fallback). make_runners adds placement over several devices (a comma list,
// "cuda:0,cuda:1", or "cpu,cpu" where two CPU backends act as two devices): replicas (one Runner
// per device) or layer shards (one Runner spanning them), with a memory cap per device and layer
// streaming (the --gpu-memory, --gpu-layers and --split-mode flags of transcribe, bench and serve).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/status.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/runner/runner.h"
#include "kernels/device/backend_factory.h"

namespace vv {

Result<std::unique_ptr<Runner>> make_runner(const Checkpoint& ckpt, const RunnerOptions& opt,
                                            std::string_view device, const BackendOptions& backend = {});

enum class SplitMode { kAuto, kReplica, kLayer };
Result<SplitMode> parse_split_mode(std::string_view text);  // "auto" | "replica" | "layer"

struct PlacementOptions {
  // --gpu-memory: "" (no cap), one size for every device, or one per device in order ("8G,12G";
  // a list of another length is refused). Sizes as parse_memory_size reads them; a share ("80%")
  // caps GPUs only (a device that reports no memory, the CPU, is left uncapped).
  std::string memory;
  int gpu_layers = -1;  // --gpu-layers: resident decoder layers per runner/shard; -1 = fit the cap
  SplitMode split = SplitMode::kAuto;  // auto: replicas while each device holds the whole model
};

// Comma-separated devices ("cuda:0,cuda:1", "cpu,cpu", "auto"); "all" = every usable GPU.
Result<std::vector<std::string>> parse_device_list(std::string_view text);

// Several runners = replicas (one per device); one runner = one device or layer shards over all.
Result<std::vector<std::unique_ptr<Runner>>> make_runners(const Checkpoint& ckpt, const RunnerOptions& opt,
                                                          std::string_view devices,
                                                          const BackendOptions& backend,
                                                          const PlacementOptions& placement);

}  // namespace vv
