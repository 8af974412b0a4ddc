// The CPU factory of Runner: binds a Checkpoint to a CPU Backend (kernels/cpu) with `threads`
// worker threads (0 = the backend's default). The returned Runner is owned by the caller.
#pragma once

#include <memory>

#include "config/status.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/runner/runner.h"

namespace vv {

Result<std::unique_ptr<Runner>> make_cpu_runner(const Checkpoint& ckpt, const RunnerOptions& opt = {},
                                                int threads = 0);

}  // namespace vv
