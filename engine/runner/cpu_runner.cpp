#include "engine/runner/cpu_runner.h"

#include "kernels/cpu/cpu_backend.h"

namespace vv {

Result<std::unique_ptr<Runner>> make_cpu_runner(const Checkpoint& ckpt, const RunnerOptions& opt, int threads) {
  CpuBackendOptions bo;
  bo.threads = threads;
  return Runner::create(make_cpu_backend(bo), ckpt, opt);
}

}  // namespace vv
