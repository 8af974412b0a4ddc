// A CUDA library loaded with dlopen rather than linked (cuBLASLt, CUPTI): a CUDA build then starts on a
// machine without it. The loaders keep the handle for the life of the process.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace vv::cuda {

// The first of `names` dlopen loads, or nullptr with "cannot load <what>: <dlerror>" in *error.
inline void* dl_open_first(const std::vector<std::string>& names, const std::string& what,
                           std::string* error) {
  for (const std::string& n : names)
    if (void* lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  const char* e = dlerror();
  *error = "cannot load " + what + (e ? std::string(": ") + e : std::string());
  return nullptr;
}

// fn = lib's symbol `name`. Where it is missing, the first such miss is told in error ("symbol <name> missing
// from <what>").
template <typename F>
bool dl_bind(void* lib, const char* name, F& fn, const char* what, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn && error.empty()) error = std::string("symbol ") + name + " missing from " + what;
  return fn != nullptr;
}

}  // namespace vv::cuda
