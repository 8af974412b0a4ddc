// cuBLASLt, loaded on first use with dlopen rather than linked: a CUDA build then starts on machines
// without the CUDA libraries (it only needs them for bf16 GEMMs on a GPU). The table's entries have
// the library's own prototypes. Thread-safe (loaded once).
#pragma once

#include <cublasLt.h>

#include <string>

namespace vv::cuda {

struct CublasLtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtGetVersion) get_version = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
  decltype(&cublasLtMatmulAlgoCheck) algo_check = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set_attribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set_attribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  // Optional (null where the library lacks them): an algorithm's capabilities and configuration, for
  // VV_CUDA_LT_TUNE's split-K variants.
  decltype(&cublasLtMatmulAlgoCapGetAttribute) algo_cap_get_attribute = nullptr;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) algo_config_get_attribute = nullptr;
  decltype(&cublasLtMatmulAlgoConfigSetAttribute) algo_config_set_attribute = nullptr;
};

// The loaded library (libcublasLt.so.<major> from the loader's path, else from the toolkit this
// binary was built against), or nullptr with the reason in cublaslt_error().
const CublasLtApi* cublaslt();
std::string cublaslt_error();

}  // namespace vv::cuda
