// The CPU backends a kernel test runs on: scalar always, AVX2 where the machine has it.
#pragma once
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace vv::test {

inline std::vector<CpuBackendOptions::Isa> cpu_isas() {
  std::vector<CpuBackendOptions::Isa> v = {CpuBackendOptions::Isa::kScalar};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    v.push_back(CpuBackendOptions::Isa::kAvx2);
  return v;
}

inline std::unique_ptr<Backend> cpu_backend(CpuBackendOptions::Isa isa, int threads = 2) {
  CpuBackendOptions o;
  o.isa = isa;
  o.threads = threads;
  o.pin = false;
  return make_cpu_backend(o);
}

}  // namespace vv::test
