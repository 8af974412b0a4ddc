#include "kernels/cpu/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/f16_convert.h"

namespace vv::ref {
namespace {

inline float* frow(const Tensor& t, int64_t r) { return t.ptr<float>() + r * t.row_stride(); }
inline const char* brow(const Tensor& t, int64_t r) {
  return static_cast<const char*>(t.data) + r * t.row_stride() * static_cast<int64_t>(dtype_size(t.dtype));
}
inline int32_t i32_at(const Tensor& t, int64_t i) { return t.ptr<const int32_t>()[i]; }

}  // namespace

void store_from_f32(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kBF16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(v); break;
    case DType::kF16: static_cast<uint16_t*>(base)[i] = cpu::f32_to_f16(v); break;
    default: static_cast<float*>(base)[i] = v; break;
  }
}

float gelu_erf(float x) { return x * 0.5f * (1.0f + std::erf(x * 0.70710678118654752440f)); }
float silu(float x) { return x / (1.0f + std::exp(-x)); }

void gemm(const Tensor& a, const Tensor& w, const Tensor* bias, Tensor& out, Epilogue ep) {
  const int64_t M = out.rows(), N = out.cols(), K = a.cols();
  const float* bp = bias && bias->data ? bias->ptr<const float>() : nullptr;
  for (int64_t m = 0; m < M; ++m) {
    const float* ar = frow(a, m);
    float* orow = frow(out, m);
    for (int64_t n = 0; n < N; ++n) {
      const char* wr = brow(w, n);
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += ar[k] * load_as_f32(wr, w.dtype, k);
      if (bp) acc += bp[n];
      switch (ep) {
        case Epilogue::kNone: orow[n] = acc; break;
        case Epilogue::kGelu: orow[n] = gelu_erf(acc); break;
        case Epilogue::kAddResidual: orow[n] += acc; break;
      }
    }
  }
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  const int64_t R = x.rows(), C = x.cols();
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = frow(x, r);
    float* orow = frow(out, r);
    float ss = 0.0f;
    for (int64_t c = 0; c < C; ++c) ss += xr[c] * xr[c];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    for (int64_t c = 0; c < C; ++c) {
      const float n = xr[c] * inv;
      orow[c] = n * load_as_f32(weight.data, weight.dtype, c);
    }
  }
}

void depthwise_conv1d_causal(const Tensor& x, const Tensor& history, const Tensor& w, const Tensor& bias,
                             Tensor& out) {
  const int64_t T = x.rows(), C = x.cols(), K = w.cols();
  const float* bp = bias.data ? bias.ptr<const float>() : nullptr;
  for (int64_t t = 0; t < T; ++t) {
    float* orow = frow(out, t);
    for (int64_t c = 0; c < C; ++c) {
      const char* wr = brow(w, c);
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t src = t + k - (K - 1);
        float xv = 0.0f;
        if (src >= 0) {
          xv = frow(x, src)[c];
        } else if (history.data) {
          xv = frow(history, src + K - 1)[c];
        }
        acc += load_as_f32(wr, w.dtype, k) * xv;
      }
      orow[c] = bp ? acc + bp[c] : acc;
    }
  }
}

void add_scaled(Tensor& x, const Tensor& scale, const Tensor& y) {
  const int64_t R = x.rows(), C = x.cols();
  for (int64_t r = 0; r < R; ++r) {
    float* xr = frow(x, r);
    const float* yr = frow(y, r);
    for (int64_t c = 0; c < C; ++c) xr[c] += load_as_f32(scale.data, scale.dtype, c) * yr[c];
  }
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t R = out.rows(), C = out.cols();
  for (int64_t r = 0; r < R; ++r) {
    const float* ar = frow(a, r);
    const float* br = frow(b, r);
    float* orow = frow(out, r);
    for (int64_t c = 0; c < C; ++c) orow[c] = ar[c] + br[c];
  }
}

void silu_mul(const Tensor& gate_up, Tensor& out) {
  const int64_t R = out.rows(), I = out.cols();
  for (int64_t r = 0; r < R; ++r) {
    const float* g = frow(gate_up, r);
    float* orow = frow(out, r);
    for (int64_t c = 0; c < I; ++c) orow[c] = silu(g[c]) * g[I + c];
  }
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t n = out.rows(), H = out.cols(), V = table.rows();
  for (int64_t r = 0; r < n; ++r) {
    const int32_t id = i32_at(ids, r);
    float* orow = frow(out, r);
    if (id < 0 || id >= V) {  // never read outside the table
      std::memset(orow, 0, sizeof(float) * H);
      continue;
    }
    const char* tr = brow(table, id);
    for (int64_t c = 0; c < H; ++c) orow[c] = load_as_f32(tr, table.dtype, c);
  }
}

void copy(const Tensor& src, Tensor& dst) {
  const int64_t R = src.rows();
  const size_t bytes = static_cast<size_t>(src.cols()) * dtype_size(src.dtype);
  for (int64_t r = 0; r < R; ++r) std::memmove(const_cast<char*>(brow(dst, r)), brow(src, r), bytes);
}

void rope(Tensor& x, const Tensor& pos, int heads, int head_dim, float theta) {
  const int half = head_dim / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  std::vector<float> cs(half), sn(half);
  for (int64_t r = 0; r < x.rows(); ++r) {
    const float p = static_cast<float>(i32_at(pos, r));
    for (int i = 0; i < half; ++i) {
      const float phi = p * inv_freq[i];
      cs[i] = std::cos(phi);
      sn[i] = std::sin(phi);
    }
    float* xr = frow(x, r);
    for (int h = 0; h < heads; ++h) {
      float* v = xr + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * cs[i] - x2 * sn[i];
        v[i + half] = x2 * cs[i] + x1 * sn[i];
      }
    }
  }
}

int64_t kv_slot(const AttentionRows& rows, int32_t seq, int32_t pos) {
  const int64_t bs = rows.block_size;
  const int32_t* bt = rows.block_tables.ptr<const int32_t>() + seq * rows.block_tables.row_stride();
  return static_cast<int64_t>(bt[pos / bs]) * bs + pos % bs;
}

void kv_write(const Tensor& k, const Tensor& v, const AttentionRows& rows, KvLayer& cache,
              const AttentionShape& shape) {
  const int64_t width = static_cast<int64_t>(shape.kv_heads) * shape.head_dim;
  for (int64_t r = 0; r < k.rows(); ++r) {
    const int64_t slot = kv_slot(rows, i32_at(rows.row_seq, r), i32_at(rows.row_pos, r));
    const float* kr = frow(k, r);
    const float* vr = frow(v, r);
    void* kd = const_cast<char*>(brow(cache.k, slot));
    void* vd = const_cast<char*>(brow(cache.v, slot));
    for (int64_t c = 0; c < width; ++c) {
      store_from_f32(kd, cache.k.dtype, c, kr[c]);
      store_from_f32(vd, cache.v.dtype, c, vr[c]);
    }
  }
}

void paged_attention(const Tensor& q, const AttentionRows& rows, const KvLayer& cache, const AttentionShape& shape,
                     Tensor& out, int head_begin, int head_end) {
  if (head_end < 0) head_end = shape.heads;
  const int D = shape.head_dim;
  const int group = shape.heads / shape.kv_heads;
  std::vector<float> scores, kf(D);
  for (int64_t r = 0; r < q.rows(); ++r) {
    const int32_t seq = i32_at(rows.row_seq, r), pos = i32_at(rows.row_pos, r);
    const int64_t L = static_cast<int64_t>(pos) + 1;
    scores.resize(L);
    for (int h = head_begin; h < head_end; ++h) {
      const float* qh = frow(q, r) + static_cast<int64_t>(h) * D;
      const int64_t kv_off = static_cast<int64_t>(h / group) * D;
      float mx = -INFINITY;
      for (int64_t j = 0; j < L; ++j) {
        const char* kr = brow(cache.k, kv_slot(rows, seq, static_cast<int32_t>(j)));
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += qh[d] * load_as_f32(kr, cache.k.dtype, kv_off + d);
        s *= shape.scale;
        scores[j] = s;
        if (s > mx) mx = s;
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < L; ++j) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
      }
      float* oh = frow(out, r) + static_cast<int64_t>(h) * D;
      for (int d = 0; d < D; ++d) oh[d] = 0.0f;
      for (int64_t j = 0; j < L; ++j) {
        const float p = scores[j] / sum;
        const char* vr = brow(cache.v, kv_slot(rows, seq, static_cast<int32_t>(j)));
        for (int d = 0; d < D; ++d) oh[d] += p * load_as_f32(vr, cache.v.dtype, kv_off + d);
      }
    }
  }
}

void logprob_at(const Tensor& logits, const Tensor& ids, Tensor& logprob) {
  const int64_t n = logits.rows(), V = logits.cols();
  const int32_t* id = ids.ptr<const int32_t>();
  float* lp = logprob.ptr<float>();
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < n; ++r) {
    const char* lr = brow(logits, r);
    double m = kNegInf;
    for (int64_t i = 0; i < V; ++i) {
      const double v = load_as_f32(lr, logits.dtype, i);
      if (v > m) m = v;  // NaN never wins
    }
    const double x = load_as_f32(lr, logits.dtype, id[r]);
    if (m == kNegInf || !(x > kNegInf)) {
      lp[r] = -std::numeric_limits<float>::infinity();
      continue;
    }
    double s = 0.0;
    for (int64_t i = 0; i < V; ++i) {
      const double v = load_as_f32(lr, logits.dtype, i);
      if (v > kNegInf) s += std::exp(v - m);
    }
    lp[r] = static_cast<float>(std::min(0.0, x - m - std::log(s)));
  }
}

void argmax(const Tensor& logits, Tensor& out) {
  const int64_t n = logits.rows(), V = logits.cols();
  int32_t* o = out.ptr<int32_t>();
  for (int64_t r = 0; r < n; ++r) {
    const char* lr = brow(logits, r);
    int64_t best = 0;
    float bv = load_as_f32(lr, logits.dtype, 0);
    for (int64_t i = 1; i < V; ++i) {
      const float v = load_as_f32(lr, logits.dtype, i);
      if (v > bv || (std::isnan(v) && !std::isnan(bv))) {
        bv = v;
        best = i;
      }
    }
    o[r] = static_cast<int32_t>(best);
  }
}

}  // namespace vv::ref
