#include "kernels/cuda/cublaslt_loader.h"

#include "kernels/cuda/dl_library.h"

namespace vv::cuda {
namespace {

struct Loaded {
  CublasLtApi api;
  bool ok = false;
  std::string error;
};

template <typename F>
bool bind(void* lib, const char* name, F& fn, std::string& error) {
  return dl_bind(lib, name, fn, "cuBLASLt", error);
}

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    const std::string major = std::to_string(CUBLAS_VER_MAJOR);
    void* lib =
        dl_open_first({"libcublasLt.so." + major,
                       std::string(VV_CUDA_LIBRARY_DIR) + "/libcublasLt.so." + major, "libcublasLt.so"},
                      "libcublasLt.so." + major, &r.error);
    if (!lib) return r;
    CublasLtApi& a = r.api;
    bool ok = bind(lib, "cublasLtCreate", a.create, r.error);
    ok &= bind(lib, "cublasLtDestroy", a.destroy, r.error);
    ok &= bind(lib, "cublasLtGetVersion", a.get_version, r.error);
    ok &= bind(lib, "cublasLtMatmul", a.matmul, r.error);
    ok &= bind(lib, "cublasLtMatmulAlgoGetHeuristic", a.algo_get_heuristic, r.error);
    ok &= bind(lib, "cublasLtMatmulAlgoCheck", a.algo_check, r.error);
    ok &= bind(lib, "cublasLtMatmulDescCreate", a.desc_create, r.error);
    ok &= bind(lib, "cublasLtMatmulDescDestroy", a.desc_destroy, r.error);
    ok &= bind(lib, "cublasLtMatmulDescSetAttribute", a.desc_set_attribute, r.error);
    ok &= bind(lib, "cublasLtMatmulPreferenceCreate", a.pref_create, r.error);
    ok &= bind(lib, "cublasLtMatmulPreferenceDestroy", a.pref_destroy, r.error);
    ok &= bind(lib, "cublasLtMatmulPreferenceSetAttribute", a.pref_set_attribute, r.error);
    ok &= bind(lib, "cublasLtMatrixLayoutCreate", a.layout_create, r.error);
    ok &= bind(lib, "cublasLtMatrixLayoutDestroy", a.layout_destroy, r.error);
    r.ok = ok;
    a.algo_cap_get_attribute =
        reinterpret_cast<decltype(a.algo_cap_get_attribute)>(dlsym(lib, "cublasLtMatmulAlgoCapGetAttribute"));
    a.algo_config_get_attribute = reinterpret_cast<decltype(a.algo_config_get_attribute)>(
        dlsym(lib, "cublasLtMatmulAlgoConfigGetAttribute"));
    a.algo_config_set_attribute = reinterpret_cast<decltype(a.algo_config_set_attribute)>(
        dlsym(lib, "cublasLtMatmulAlgoConfigSetAttribute"));
    return r;  // the library stays loaded for the life of the process
  }();
  return l;
}

}  // namespace

const CublasLtApi* cublaslt() { return loaded().ok ? &loaded().api : nullptr; }
std::string cublaslt_error() { return loaded().error; }

}  // namespace vv::cuda
