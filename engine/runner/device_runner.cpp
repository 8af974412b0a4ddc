#include "engine/runner/device_runner.h"

namespace vv {

Result<std::unique_ptr<Runner>> make_runner(const Checkpoint& ckpt, const RunnerOptions& opt, std::string_view device,
                                            const BackendOptions& backend) {
  VV_ASSIGN_OR_RETURN(auto be, make_backend(device, backend));
  return Runner::create(std::move(be), ckpt, opt);
}

}  // namespace vv
