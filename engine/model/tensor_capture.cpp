#include "engine/model/tensor_capture.h"

#include "engine/checkpoint/safetensors_writer.h"

namespace vv {

CaptureFn TensorCapture::fn() {
  return [this](const std::string& name, const Tensor& t) {
    CapturedTensor& c = tensors_[name];
    const int64_t rows = t.rows(), cols = t.cols();
    if (c.cols != 0 && c.cols != cols) c = CapturedTensor{};  // a different shape restarts the record
    c.cols = cols;
    const size_t base = c.data.size();
    c.data.resize(base + static_cast<size_t>(rows * cols));
    be_.synchronize();
    for (int64_t r = 0; r < rows; ++r) {
      const char* src = static_cast<const char*>(t.data) + r * t.row_stride() * static_cast<int64_t>(sizeof(float));
      be_.download(c.data.data() + base + r * cols, src, static_cast<size_t>(cols) * sizeof(float));
    }
    c.rows += rows;
  };
}

const CapturedTensor* TensorCapture::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status TensorCapture::save_safetensors(const std::string& path) const {
  std::vector<HostTensor> out;
  for (const auto& [name, t] : tensors_) {
    HostTensor h;
    h.name = name;
    h.data = t.data.data();
    h.dtype = DType::kF32;
    if (name == "logits.last" && t.rows == 1) {
      h.shape = {t.cols};
    } else {
      h.shape = {t.rows, t.cols};
    }
    out.push_back(std::move(h));
  }
  return write_safetensors(path, out, {{"format", "pt"}});
}

}  // namespace vv
