#include <immintrin.h>

#include "kernels/cpu/avx2_ops.h"
#include "kernels/cpu/reference_ops.h"

namespace vv::avx2 {

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) { ref::rms_norm(x, weight, eps, out); }
void add_scaled(Tensor& x, const Tensor& scale, const Tensor& y) { ref::add_scaled(x, scale, y); }
void add(const Tensor& a, const Tensor& b, Tensor& out) { ref::add(a, b, out); }
void silu_mul(const Tensor& gate_up, Tensor& out) { ref::silu_mul(gate_up, out); }
void argmax(const Tensor& logits, Tensor& out) { ref::argmax(logits, out); }

}  // namespace vv::avx2
