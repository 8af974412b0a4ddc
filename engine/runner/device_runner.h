// The device-generic factory of Runner: binds a Checkpoint to the Backend a device string names
// ("cpu", "cuda", "cuda:N", "auto": see kernels/device/backend_factory.h). The returned Runner is
// owned by the caller; a device that is not usable is an error naming it (no silent fallback —
// "auto" is the fallback).
#pragma once

#include <memory>
#include <string_view>

#include "config/status.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/runner/runner.h"
#include "kernels/device/backend_factory.h"

namespace vv {

Result<std::unique_ptr<Runner>> make_runner(const Checkpoint& ckpt, const RunnerOptions& opt, std::string_view device,
                                            const BackendOptions& backend = {});

}  // namespace vv
