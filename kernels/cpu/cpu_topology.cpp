#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"

namespace vv {
namespace {

int read_int(const std::string& path) {
  std::ifstream f(path);
  int v = -1;
  if (f) f >> v;
  return v;
}

}  // namespace

int physical_core_count() {
  std::set<std::pair<int, int>> cores;  // (package, core id)
  const std::vector<int> cpus = cpu::allowed_cpus();
  for (int c : cpus) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    const int core = read_int(base + "core_id");
    const int pkg = read_int(base + "physical_package_id");
    if (core < 0) return static_cast<int>(cpus.size());  // no topology: count logical CPUs
    cores.insert({pkg, core});
  }
  return cores.empty() ? 1 : static_cast<int>(cores.size());
}

int resolve_cpu_threads(int threads) {
  if (threads > 0) return threads;
  if (const char* env = std::getenv("VIBEVOICE_THREADS")) {
    const int v = std::atoi(env);
    if (v > 0) return v;
  }
  return std::max(1, physical_core_count());
}

}  // namespace vv
