#include "engine/runner/memory_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace vv {
namespace {

// A device allocation's footprint: 256-byte aligned, and from 1 MiB on rounded up to whole
// `granule`s where the device hands out large blocks in pages (CUDA: 2 MiB).
struct Footprint {
  size_t granule = 0;
  size_t operator()(size_t n) const {
    if (granule && n >= (size_t{1} << 20)) return (n + granule - 1) / granule * granule;
    return (n + 255) / 256 * 256;
  }
  size_t bound(const HostTensor& t) const { return (*this)(t.bytes()); }  // upload_matrix
  size_t f32(const HostTensor& t) const {                                 // upload_f32
    return (*this)(static_cast<size_t>(t.numel()) * sizeof(float));
  }
  size_t f32s(int64_t n) const { return (*this)(static_cast<size_t>(n) * sizeof(float)); }
};

}  // namespace

DecoderBytes decoder_bytes(const DecoderSpec& s, const DecoderWeights& w, int max_rows, int max_seqs,
                           int max_blocks_per_seq, int layer_begin, int layer_end, size_t granule) {
  const Footprint fp{granule};
  auto as_bound = [&](const HostTensor& t) { return fp.bound(t); };
  auto as_f32 = [&](const HostTensor& t) { return fp.f32(t); };
  auto f32s = [&](int64_t n) { return fp.f32s(n); };
  auto aligned = [&](size_t n) { return fp(n); };
  DecoderBytes b;
  const bool first = layer_begin == 0, last = layer_end == s.num_layers;
  const bool tied = w.lm_head.data == nullptr || w.lm_head.data == w.embed.data;
  const size_t table = w.embed.dtype == DType::kF16 ? as_f32(w.embed) : as_bound(w.embed);
  if (first) b.embed = table;
  if (last) b.head = as_f32(w.final_norm) + (tied ? (first ? 0 : table) : as_bound(w.lm_head));
  for (int l = layer_begin; l < layer_end && l < static_cast<int>(w.layers.size()); ++l) {
    const DecoderLayerWeights& x = w.layers[static_cast<size_t>(l)];
    b.layers.push_back(as_f32(x.input_norm) + aligned(x.q_w.bytes() + x.k_w.bytes() + x.v_w.bytes()) +
                       f32s(x.q_b.numel() + x.k_b.numel() + x.v_b.numel()) + as_bound(x.o_w) +
                       as_f32(x.post_norm) + aligned(x.gate_w.bytes() + x.up_w.bytes()) + as_bound(x.down_w));
  }
  // Qwen2Decoder::load's workspace: x, a, qkv, attn, gate_up, mlp rows; the step's row metadata (ids,
  // pos, seq and tables in one buffer); and on the last shard the head's rows, logits and next ids.
  const int64_t R = max_rows, S = max_seqs, H = s.hidden_size, I = s.intermediate_size, V = s.vocab_size;
  const int64_t qd = static_cast<int64_t>(s.num_heads) * s.head_dim,
                kvd = static_cast<int64_t>(s.num_kv_heads) * s.head_dim;
  b.workspace = 2 * f32s(R * H) + f32s(R * (qd + 2 * kvd)) + f32s(R * qd) + f32s(R * 2 * I) + f32s(R * I) +
                f32s(3 * R + S * std::max(max_blocks_per_seq, 1));
  if (last) b.workspace += f32s(S * H) + f32s(S * V) + f32s(2 * S);  // next: ids, then logprobs
  return b;
}

size_t speech_bytes(const ModelWeights& w) {
  size_t total = 0;
  auto add = [&](const HostTensor& t) {
    if (t.data == nullptr) return;
    total += t.shape.size() >= 2 ? t.bytes() : static_cast<size_t>(t.numel()) * sizeof(float);
  };
  for (const EncoderWeights* e : {&w.acoustic, &w.semantic}) {
    add(e->stem_w);
    add(e->stem_b);
    for (const HostTensor& t : e->down_w) add(t);
    for (const HostTensor& t : e->down_b) add(t);
    for (const auto& stage : e->stages) {
      for (const ConvNextBlockWeights& b : stage) {
        for (const HostTensor* t : {&b.norm, &b.mixer_w, &b.mixer_b, &b.gamma, &b.ffn_norm, &b.fc1_w,
                                    &b.fc1_b, &b.fc2_w, &b.fc2_b, &b.ffn_gamma}) {
          add(*t);
        }
      }
    }
    add(e->head_w);
    add(e->head_b);
  }
  for (const ConnectorWeights* c : {&w.acoustic_connector, &w.semantic_connector}) {
    for (const HostTensor* t : {&c->fc1_w, &c->fc1_b, &c->norm, &c->fc2_w, &c->fc2_b}) add(*t);
  }
  return total;
}

std::string gib(size_t bytes) {
  char buf[32];
  if (bytes < (size_t{1} << 30)) {  // small models and the CPU tests: GiB would read 0.00
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  }
  return buf;
}

Result<MemoryPlan> plan_memory(const MemoryPlanInput& in) {
  const DecoderBytes& d = in.decoder;
  const int L = static_cast<int>(d.layers.size());
  if (in.gpu_layers > L) {
    return invalid_argument("--gpu-layers " + std::to_string(in.gpu_layers) + ": the model has " +
                            std::to_string(L) + " decoder layers here");
  }
  if (in.gpu_layers < -1) return invalid_argument("--gpu-layers must be -1 (fit) or 0.." + std::to_string(L));
  const int64_t bs = std::max(in.block_size, 1);
  auto blocks_of = [&](int64_t positions) { return (positions + bs - 1) / bs * bs; };
  const int64_t want_kv = blocks_of(std::max<int64_t>(in.kv_positions, 1));
  const int64_t min_kv = std::min(want_kv, blocks_of(std::max<int64_t>(in.min_kv_positions, 1)));
  const size_t fixed = in.in_use + in.encoders + d.embed + d.head + d.workspace + in.scratch;
  // Bytes with the first n layers resident (the others in two slots) and `kv` positions.
  auto total_for = [&](int n, int64_t kv, size_t* slot) {
    size_t resident = 0, largest = 0;
    for (int l = 0; l < L; ++l) {
      if (l < n) {
        resident += d.layers[l];
      } else {
        largest = std::max(largest, d.layers[l]);
      }
    }
    const int streamed = L - n;
    *slot = largest;
    return fixed + resident + largest * static_cast<size_t>(std::min(streamed, 2)) +
           static_cast<size_t>(kv) * in.kv_per_position;
  };
  MemoryPlan p;
  if (in.cap == 0) {  // no cap: what was asked
    p.resident_layers = in.gpu_layers < 0 ? L : in.gpu_layers;
    p.kv_positions = want_kv;
    p.total = total_for(p.resident_layers, want_kv, &p.slot_bytes);
  } else {
    // The most resident layers (up to gpu_layers) that leave room for the smallest pool.
    int n = in.gpu_layers < 0 ? L : in.gpu_layers;
    size_t slot = 0;
    while (n > 0 && total_for(n, min_kv, &slot) > in.cap) {
      if (in.gpu_layers >= 0) break;  // a fixed count is not lowered behind the user's back
      --n;
    }
    const size_t least = total_for(n, min_kv, &slot);
    if (least > in.cap) {
      std::string what = "in use before loading " + gib(in.in_use) + ", encoders " + gib(in.encoders) +
                         ", embedding and head " + gib(d.embed + d.head) + ", " + std::to_string(n) +
                         " resident layers and " + std::to_string(std::min(L - n, 2)) + " streaming slots " +
                         gib(least - fixed - static_cast<size_t>(min_kv) * in.kv_per_position) +
                         ", workspace " + gib(d.workspace) + ", backend scratch " + gib(in.scratch) +
                         ", KV pool of " + std::to_string(min_kv) + " positions " +
                         gib(static_cast<size_t>(min_kv) * in.kv_per_position);
      return Status(
          StatusCode::kResourceExhausted,
          "the device memory cap of " + gib(in.cap) + " is too small: this model needs at least " +
              gib(least) + " (" + what + ")" +
              (in.gpu_layers >= 0 ? "; lower --gpu-layers or raise --gpu-memory" : "; raise --gpu-memory"));
    }
    p.resident_layers = n;
    p.slot_bytes = slot;
    const size_t before_kv = total_for(n, 0, &slot);
    const int64_t fit =
        in.kv_per_position ? static_cast<int64_t>((in.cap - before_kv) / in.kv_per_position) : want_kv;
    p.kv_positions = std::max(min_kv, std::min(want_kv, fit / bs * bs));
    p.total = total_for(n, p.kv_positions, &slot);
  }
  p.summary = "in use before " + gib(in.in_use) + " + encoders " + gib(in.encoders) + " + embedding/head " +
              gib(d.embed + d.head) + " + " + std::to_string(p.resident_layers) + "/" + std::to_string(L) +
              " layers resident" + (p.resident_layers < L ? " (+ streaming slots)" : "") + " + workspace " +
              gib(d.workspace) + " + scratch " + gib(in.scratch) + " + KV " + std::to_string(p.kv_positions) +
              " positions " + gib(static_cast<size_t>(p.kv_positions) * in.kv_per_position) + " = " +
              gib(p.total) + (in.cap ? " of the " + gib(in.cap) + " cap" : "");
  return p;
}

Result<size_t> parse_memory_size(const std::string& text, size_t total_bytes) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string num = text.substr(0, i);
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  char* end = nullptr;
  const double v = num.empty() ? -1 : std::strtod(num.c_str(), &end);
  if (num.empty() || end != num.c_str() + num.size() || !(v > 0) || !std::isfinite(v)) {
    return invalid_argument("memory size '" + text +
                            "': expected a positive number with GiB, G, GB, MiB, M or %");
  }
  double bytes = 0;
  if (unit.empty() || unit == "g" || unit == "gib") {
    bytes = v * 1024.0 * 1024.0 * 1024.0;
  } else if (unit == "gb") {
    bytes = v * 1e9;
  } else if (unit == "m" || unit == "mib") {
    bytes = v * 1024.0 * 1024.0;
  } else if (unit == "mb") {
    bytes = v * 1e6;
  } else if (unit == "%") {
    if (v > 100) return invalid_argument("memory size '" + text + "': more than 100%");
    if (total_bytes == 0)
      return invalid_argument("memory size '" + text + "': a share needs a device that reports its memory");
    bytes = v / 100.0 * static_cast<double>(total_bytes);
  } else {
    return invalid_argument("memory size '" + text + "': unknown unit '" + unit +
                            "' (GiB, G, GB, MiB, M or %)");
  }
  return static_cast<size_t>(bytes);
}

}  // namespace vv
