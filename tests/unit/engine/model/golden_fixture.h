// Test helpers shared by the model and runner tests: a golden case (golden.safetensors read with
// engine/checkpoint's reader, ids from golden.json), the CPU backend, the model in both checkpoint
// layouts (the original one built at test time by renaming, as golden/README.md describes), and the
// comparison metrics of golden/README.md. Header-only; test threads only.
#pragma once

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/safetensors_writer.h"
#include "engine/model/tensor_capture.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/test_paths.h"

namespace vv::test {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct GoldenTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  int64_t rows() const { return shape.size() >= 2 ? shape[0] : 1; }
  int64_t cols() const { return shape.empty() ? 0 : shape.back(); }
};

class GoldenCase {
 public:
  explicit GoldenCase(std::string name) : name_(std::move(name)) {
    dir_ = golden_dir() + "/cases/" + name_;
    auto arch = SafetensorsArchive::open_file(dir_ + "/golden.safetensors");
    if (!arch.is_ok()) {
      error_ = arch.status().to_string();
      return;
    }
    st_ = std::move(arch).value();
    simdjson::dom::parser parser;
    simdjson::padded_string json(read_text(dir_ + "/golden.json"));
    simdjson::dom::element doc;
    if (parser.parse(json).get(doc)) {
      error_ = dir_ + "/golden.json: not JSON";
      return;
    }
    auto ints = [&](const char* key, std::vector<int32_t>& out) {
      simdjson::dom::array arr;
      if (doc[key].get_array().get(arr)) {
        error_ = dir_ + "/golden.json: no array " + key;
        return;
      }
      for (auto v : arr) out.push_back(static_cast<int32_t>(int64_t(v)));
    };
    ints("prompt_ids", prompt_ids_);
    ints("generated_ids", generated_ids_);
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& name() const { return name_; }
  const std::string& dir() const { return dir_; }
  const std::vector<int32_t>& prompt_ids() const { return prompt_ids_; }
  const std::vector<int32_t>& generated_ids() const { return generated_ids_; }
  bool has(const std::string& t) const { return st_ && st_->find(t).has_value(); }
  GoldenTensor tensor(const std::string& t) const {
    GoldenTensor g;
    auto h = st_->find(t);
    if (!h) {
      ADD_FAILURE() << name_ << ": golden tensor " << t << " is missing";
      return g;
    }
    g.shape = h->shape;
    g.data.resize(static_cast<size_t>(h->numel()));
    if (h->dtype == DType::kF32) {
      std::memcpy(g.data.data(), h->data, g.data.size() * sizeof(float));
    } else {
      ADD_FAILURE() << name_ << ": golden tensor " << t << " is not F32";
    }
    return g;
  }

 private:
  std::string name_, dir_, error_;
  std::unique_ptr<SafetensorsArchive> st_;
  std::vector<int32_t> prompt_ids_, generated_ids_;
};

struct Diff {
  double max_abs_err = 0, max_abs_ref = 0, rel_l2 = 0;
  double rel_max() const { return max_abs_ref > 0 ? max_abs_err / max_abs_ref : max_abs_err; }
};

// VV_PRINT_DIFFS=1 prints every comparison (for reports).
inline void print_diff(const std::string& what, const Diff& d) {
  if (std::getenv("VV_PRINT_DIFFS")) {
    std::printf("  %-60s rel_max %.2e rel_l2 %.2e max_abs %.2e\n", what.c_str(), d.rel_max(), d.rel_l2, d.max_abs_err);
  }
}

inline Diff compare(const float* a, const float* ref, size_t n) {
  Diff d;
  double se = 0, sr = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(a[i]) - ref[i];
    d.max_abs_err = std::max(d.max_abs_err, std::fabs(e));
    d.max_abs_ref = std::max(d.max_abs_ref, std::fabs(static_cast<double>(ref[i])));
    se += e * e;
    sr += static_cast<double>(ref[i]) * ref[i];
  }
  d.rel_l2 = sr > 0 ? std::sqrt(se / sr) : std::sqrt(se);
  return d;
}

// End to end (engine stages fed the engine's own upstream): golden/README.md's thresholds.
inline void expect_end_to_end(const std::string& what, const std::vector<float>& got, const GoldenTensor& ref) {
  ASSERT_EQ(got.size(), ref.data.size()) << what << ": element count";
  const Diff d = compare(got.data(), ref.data.data(), got.size());
  print_diff(what, d);
  EXPECT_LE(d.max_abs_err, 1e-4 * d.max_abs_ref) << what << ": max|a-b| " << d.max_abs_err << " max|ref| " << d.max_abs_ref;
  EXPECT_LE(d.rel_l2, 3e-5) << what << ": rel_l2 " << d.rel_l2;
}

// One stage fed the golden upstream tensor.
inline void expect_fed_golden(const std::string& what, const std::vector<float>& got, const GoldenTensor& ref) {
  ASSERT_EQ(got.size(), ref.data.size()) << what << ": element count";
  const Diff d = compare(got.data(), ref.data.data(), got.size());
  print_diff(what + " [fed golden]", d);
  EXPECT_LE(d.rel_l2, 1e-6) << what << ": rel_l2 " << d.rel_l2 << " (max|a-b| " << d.max_abs_err << ")";
}

inline std::unique_ptr<Backend> cpu_backend(int threads = 2) {
  CpuBackendOptions o;
  o.threads = threads;
  o.pin = false;
  return make_cpu_backend(o);
}

inline std::string hf_model_dir() { return golden_dir() + "/model-hf"; }

// The golden model in Microsoft's original layout: model-orig/config.json plus the hf tensors
// renamed through names.json (bytes unchanged), written once per process into a temp dir.
inline Result<std::string> orig_model_dir() {
  struct Made {  // removed when the test process exits
    std::string dir;
    ~Made() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  };
  static Made made_dir;
  std::string& made = made_dir.dir;
  if (!made.empty()) return made;
  const std::string dir = make_temp_dir("vv_model_orig");
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::copy_file(golden_dir() + "/model-orig/config.json", dir + "/config.json", fs::copy_options::overwrite_existing, ec);
  if (ec) return not_found(golden_dir() + "/model-orig/config.json: " + ec.message());
  if (fs::exists(golden_dir() + "/model-orig/preprocessor_config.json")) {
    fs::copy_file(golden_dir() + "/model-orig/preprocessor_config.json", dir + "/preprocessor_config.json",
                  fs::copy_options::overwrite_existing, ec);
  }
  VV_ASSIGN_OR_RETURN(auto hf, SafetensorsArchive::open_dir(hf_model_dir()));
  simdjson::dom::parser parser;
  simdjson::padded_string json(read_text(golden_dir() + "/names.json"));
  simdjson::dom::object names;
  if (parser.parse(json).get(names)) return invalid_argument(golden_dir() + "/names.json: not a JSON object");
  std::vector<HostTensor> out;
  for (const std::string& n : hf->names()) {
    auto t = hf->find(n);
    std::string_view orig;
    HostTensor h = *t;
    if (!names[n].get_string().get(orig)) h.name = std::string(orig);
    out.push_back(h);
  }
  VV_RETURN_IF_ERROR(write_safetensors(dir + "/model.safetensors", out, {{"format", "pt"}}));
  made = dir;
  return made;
}

// The layouts a test runs over: the transformers one always, the original one when it can be built.
inline std::vector<std::string> model_layouts() { return {"hf", "orig"}; }

inline Result<std::unique_ptr<Checkpoint>> open_layout(const std::string& layout) {
  if (layout == "hf") return Checkpoint::open(hf_model_dir());
  VV_ASSIGN_OR_RETURN(std::string dir, orig_model_dir());
  return Checkpoint::open(dir);
}

inline std::vector<float> captured(const TensorCapture& cap, const std::string& name) {
  const CapturedTensor* t = cap.find(name);
  if (!t) {
    ADD_FAILURE() << "nothing captured as " << name;
    return {};
  }
  return t->data;
}

}  // namespace vv::test
