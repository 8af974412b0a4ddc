#include "engine/model/device_tensor.h"

#include <cstring>
#include <vector>

namespace vv {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out.push_back(',');
    out.append(std::to_string(s[i]));
  }
  out.push_back(']');
  return out;
}

float element_as_f32(const HostTensor& w, int64_t i) {
  switch (w.dtype) {
    case DType::kF32: return static_cast<const float*>(w.data)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    default: return 0.f;
  }
}

UploadedFn& upload_hook() {
  thread_local UploadedFn hook;
  return hook;
}

void uploaded(const HostTensor& w) {
  if (upload_hook()) upload_hook()(w.data, w.bytes());
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

Status check_float(const HostTensor& w) {
  if (w.data == nullptr) return not_found("tensor " + w.name + " is missing");
  if (!is_float(w.dtype)) {
    return unsupported("tensor " + w.name + " has dtype " + dtype_name(w.dtype) + "; expected F32, BF16 or F16");
  }
  if (w.shape.empty()) return invalid_argument("tensor " + w.name + " has no shape");
  return Status::ok();
}

DeviceTensor upload_bytes(Backend& be, const void* src, size_t bytes, DType dtype, int64_t rows, int64_t cols,
                          bool vector) {
  DeviceTensor d;
  d.buf = be.allocate(bytes);
  be.upload(d.buf.data(), src, bytes);
  d.t = vector ? Tensor::vector(d.buf.data(), dtype, cols) : Tensor::matrix(d.buf.data(), dtype, rows, cols);
  return d;
}

int64_t tail_product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (size_t i = 1; i < s.size(); ++i) n *= s[i];
  return n;
}

}  // namespace

UploadedFn set_upload_hook(UploadedFn fn) {
  UploadedFn old = std::move(upload_hook());
  upload_hook() = std::move(fn);
  return old;
}

DeviceTensor alloc_f32(Backend& be, int64_t rows, int64_t cols) {
  DeviceTensor d;
  const int64_t n = rows * cols;
  d.buf = be.allocate(static_cast<size_t>(n > 0 ? n : 1) * sizeof(float));
  d.t = Tensor::matrix(d.buf.data(), DType::kF32, rows, cols);
  return d;
}

DeviceTensor alloc_i32(Backend& be, int64_t n) {
  DeviceTensor d;
  d.buf = be.allocate(static_cast<size_t>(n > 0 ? n : 1) * sizeof(int32_t));
  d.t = Tensor::vector(d.buf.data(), DType::kI32, n);
  return d;
}

Status expect_shape(const HostTensor& t, std::initializer_list<int64_t> shape) {
  if (t.data == nullptr) return not_found("tensor " + (t.name.empty() ? std::string("(unnamed)") : t.name) + " is missing");
  std::vector<int64_t> want(shape);
  if (t.shape != want) {
    return invalid_argument("tensor " + t.name + " has shape " + shape_str(t.shape) + ", expected " + shape_str(want));
  }
  return Status::ok();
}

Result<DeviceTensor> upload_matrix(Backend& be, const HostTensor& w) {
  VV_RETURN_IF_ERROR(check_float(w));
  DeviceTensor d = upload_bytes(be, w.data, w.bytes(), w.dtype, w.shape[0], tail_product(w.shape), false);
  uploaded(w);
  return d;
}

Result<DeviceTensor> upload_stacked_rows(Backend& be, const HostTensor& a, const HostTensor& b) {
  return upload_stacked_rows(be, {&a, &b});
}

Result<DeviceTensor> upload_stacked_rows(Backend& be, std::initializer_list<const HostTensor*> parts) {
  if (parts.size() == 0) return invalid_argument("upload_stacked_rows: no tensors");
  const HostTensor& first = **parts.begin();
  size_t bytes = 0;
  int64_t rows = 0;
  for (const HostTensor* t : parts) {
    VV_RETURN_IF_ERROR(check_float(*t));
    if (t->dtype != first.dtype || tail_product(t->shape) != tail_product(first.shape)) {
      return invalid_argument("tensors " + first.name + " " + shape_str(first.shape) + " and " + t->name + " " +
                              shape_str(t->shape) + " cannot be stacked (dtype or columns differ)");
    }
    bytes += t->bytes();
    rows += t->shape[0];
  }
  std::vector<char> host(bytes);
  size_t at = 0;
  for (const HostTensor* t : parts) {
    std::memcpy(host.data() + at, t->data, t->bytes());
    at += t->bytes();
  }
  for (const HostTensor* t : parts) uploaded(*t);
  return upload_bytes(be, host.data(), host.size(), first.dtype, rows, tail_product(first.shape), false);
}

Result<DeviceTensor> upload_joined_f32(Backend& be, std::initializer_list<const HostTensor*> parts) {
  std::vector<float> host;
  for (const HostTensor* t : parts) {
    VV_RETURN_IF_ERROR(check_float(*t));
    const int64_t n = t->numel();
    for (int64_t i = 0; i < n; ++i) host.push_back(element_as_f32(*t, i));
  }
  for (const HostTensor* t : parts) uploaded(*t);
  return upload_bytes(be, host.data(), host.size() * sizeof(float), DType::kF32, 1,
                      static_cast<int64_t>(host.size()), true);
}

Result<DeviceTensor> upload_f32(Backend& be, const HostTensor& w) {
  VV_RETURN_IF_ERROR(check_float(w));
  const int64_t n = w.numel();
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[i] = element_as_f32(w, i);
  uploaded(w);
  const bool vec = w.shape.size() == 1;
  return upload_bytes(be, host.data(), host.size() * sizeof(float), DType::kF32, vec ? 1 : w.shape[0],
                      vec ? n : tail_product(w.shape), vec);
}

Result<DeviceTensor> upload_conv_as_gemm(Backend& be, const HostTensor& w) {
  VV_RETURN_IF_ERROR(check_float(w));
  if (w.shape.size() != 3) return invalid_argument("conv weight " + w.name + " has shape " + shape_str(w.shape) + ", expected [out, in, kernel]");
  const int64_t out = w.shape[0], in = w.shape[1], k = w.shape[2];
  const size_t es = dtype_size(w.dtype);
  std::vector<char> host(w.bytes());
  const char* src = static_cast<const char*>(w.data);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      for (int64_t j = 0; j < k; ++j)
        std::memcpy(host.data() + ((o * k + j) * in + i) * es, src + ((o * in + i) * k + j) * es, es);
  uploaded(w);
  return upload_bytes(be, host.data(), host.size(), w.dtype, out, k * in, false);
}

}  // namespace vv
