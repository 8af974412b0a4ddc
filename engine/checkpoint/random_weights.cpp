// Checkpoint::random: seeded random weights at any spec, for benchmarks without a download.
// Values come from a counter-based hash (element index -> value), so the result does not depend
// on the thread count; all tensors live in one anonymous mapping filled by every core at once.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/checkpoint/checkpoint.h"

namespace vv {
// A named namespace, not an anonymous one: CheckpointBuilder's worker lambda captures a Job vector,
// and gcc rejects a lambda of an external function whose type uses the anonymous namespace when the
// file is compiled inside a unity batch.
namespace random_weights_detail {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Approximately N(0,1): the sum of four 16-bit uniforms (Irwin–Hall), centred and scaled.
float gaussian(uint64_t bits) {
  const uint32_t s = static_cast<uint32_t>(bits & 0xffff) + static_cast<uint32_t>((bits >> 16) & 0xffff) +
                     static_cast<uint32_t>((bits >> 32) & 0xffff) + static_cast<uint32_t>(bits >> 48);
  return (static_cast<float>(s) * (1.f / 65536.f) - 2.f) * 1.7320508f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (!(a < 65520.f)) return static_cast<uint16_t>(sign | (a != a ? 0x7e00u : 0x7c00u));
  if (a < 6.103515625e-05f) {  // subnormal: round a / 2^-24 to nearest even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.f)));
  }
  std::memcpy(&u, &a, 4);
  uint32_t mant = u & 0x7fffffu;
  uint32_t exp = (u >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::strlen(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

// How one tensor is drawn: value = mean + std · N(0,1).
struct Init {
  float mean = 0, std = 0;
};

Init init_for(const WeightSlot& slot) {
  if (ends_with(slot.name, "gamma")) return {0.1f, 0.01f};          // layer scales
  if (ends_with(slot.name, "norm.weight")) return {1.f, 0.02f};     // RMSNorm weights ~ 1
  if (ends_with(slot.name, ".bias")) return {0.f, 0.02f};           // small biases
  int64_t fan_in = 1;
  for (size_t i = 1; i < slot.shape.size(); ++i) fan_in *= slot.shape[i];
  if (slot.shape.size() < 2) fan_in = slot.shape.empty() ? 1 : slot.shape[0];
  return {0.f, 1.f / std::sqrt(static_cast<float>(std::max<int64_t>(fan_in, 1)))};
}

struct Job {
  void* data;
  int64_t begin, end;
  uint64_t stream;
  Init init;
};

void fill(const Job& j, DType dtype) {
  for (int64_t i = j.begin; i < j.end; ++i) {
    const float v = j.init.mean + j.init.std * gaussian(splitmix64(j.stream + static_cast<uint64_t>(i)));
    switch (dtype) {
      case DType::kF32: static_cast<float*>(j.data)[i] = v; break;
      case DType::kBF16: static_cast<uint16_t*>(j.data)[i] = f32_to_bf16(v); break;
      default: static_cast<uint16_t*>(j.data)[i] = f32_to_f16(v); break;
    }
  }
}

Status check_spec(const ModelSpec& s) {
  const DecoderSpec& d = s.decoder;
  if (d.vocab_size <= 0 || d.hidden_size <= 0 || d.intermediate_size <= 0 || d.num_layers <= 0 || d.num_heads <= 0 ||
      d.num_kv_heads <= 0 || d.head_dim <= 0)
    return invalid_argument("random checkpoint: the decoder spec has a non-positive dimension");
  for (const EncoderSpec* e : {&s.acoustic, &s.semantic}) {
    if (e->ratios.empty() || e->depths.size() != e->ratios.size() + 1 || e->num_filters <= 0 || e->vae_dim <= 0 ||
        e->kernel_size <= 0 || e->ffn_expansion <= 0 || e->channels <= 0)
      return invalid_argument("random checkpoint: an encoder spec is malformed (ratios, depths or a dimension)");
  }
  return Status::ok();
}

}  // namespace random_weights_detail

struct CheckpointBuilder {
  static Result<std::unique_ptr<Checkpoint>> random(const ModelSpec& spec, uint64_t seed, DType dtype) {
    using namespace random_weights_detail;
    if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kF32)
      return unsupported(std::string("random checkpoint: dtype ") + dtype_name(dtype) + " (use BF16, F16 or F32)");
    VV_RETURN_IF_ERROR(check_spec(spec));
    auto ckpt = std::unique_ptr<Checkpoint>(new Checkpoint());
    ckpt->spec_ = spec;
    ckpt->source_ = "random:" + std::to_string(seed);
    std::vector<WeightSlot> slots = weight_slots(ckpt->spec_, ckpt->weights_);
    slots.erase(std::remove_if(slots.begin(), slots.end(), [](const WeightSlot& s) { return s.optional; }), slots.end());

    constexpr size_t kAlign = 64;
    size_t total = 0;
    for (const auto& s : slots) {
      int64_t n = 1;
      for (int64_t d : s.shape) n *= d;
      total += (static_cast<size_t>(n) * dtype_size(dtype) + kAlign - 1) / kAlign * kAlign;
    }
    total = std::max<size_t>(total, kAlign);
    void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
      return Status(StatusCode::kResourceExhausted,
                    "random checkpoint: cannot map " + std::to_string(total) + " bytes for the weights");
    ::madvise(base, total, MADV_HUGEPAGE);
    ckpt->owned_.emplace_back(base, total);

    // Bind and cut the work into chunks of ~1M elements.
    constexpr int64_t kChunk = 1 << 20;
    std::vector<Job> jobs;
    size_t offset = 0;
    for (size_t t = 0; t < slots.size(); ++t) {
      const auto& s = slots[t];
      HostTensor& h = *s.target;
      h.name = s.name;
      h.dtype = dtype;
      h.shape = s.shape;
      h.data = static_cast<uint8_t*>(base) + offset;
      offset += (h.bytes() + kAlign - 1) / kAlign * kAlign;
      ckpt->bound_.push_back(s.target);
      const uint64_t stream = splitmix64(seed ^ splitmix64(t + 1)) << 20;  // per-tensor counter base
      const Init init = init_for(s);
      for (int64_t b = 0; b < h.numel(); b += kChunk)
        jobs.push_back({const_cast<void*>(h.data), b, std::min(h.numel(), b + kChunk), stream, init});
    }
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t i; (i = next.fetch_add(1)) < jobs.size();) fill(jobs[i], dtype);
    };
    const unsigned n_threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 64));
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < n_threads && i < jobs.size(); ++i) threads.emplace_back(worker);
    worker();
    for (auto& th : threads) th.join();

    DecoderWeights& dec = ckpt->weights_.decoder;
    if (dec.lm_head.data == nullptr) {
      dec.lm_head = dec.embed;
      ckpt->lm_head_tied_ = true;
    }
    return ckpt;
  }
};

Result<std::unique_ptr<Checkpoint>> Checkpoint::random(const ModelSpec& spec, uint64_t seed, DType dtype) {
  return CheckpointBuilder::random(spec, seed, dtype);
}

}  // namespace vv
