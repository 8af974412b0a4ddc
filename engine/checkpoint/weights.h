// The weights of VibeVoice-ASR grouped by role (MODEL.md §3), as views into host memory.
// A ModelWeights owns nothing: its HostTensors point into a Checkpoint's mmapped files (or its
// owned random buffers) and stay valid while that Checkpoint lives. Read-only; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/model_spec.h"
#include "kernels/backend.h"

namespace vv {

struct HostTensor {            // a view into mmapped (or owned) host memory, PyTorch layout
  std::string name;            // the name as stored in the file
  const void* data = nullptr;
  DType dtype = DType::kBF16;  // from kernels/backend.h
  std::vector<int64_t> shape;  // e.g. conv weight [out, in, k], linear [out, in]
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  Tensor view() const;         // kernels Tensor (2-D [shape0, prod(rest)] or 1-D), const_cast data
};

struct ConvNextBlockWeights { HostTensor norm, mixer_w /*[C,1,K]*/, mixer_b, gamma, ffn_norm, fc1_w /*[4C,C]*/, fc1_b, fc2_w /*[C,4C]*/, fc2_b, ffn_gamma; };

struct EncoderWeights {
  HostTensor stem_w /*[nf,1,K]*/, stem_b;
  std::vector<HostTensor> down_w, down_b;                  // ratios.size() strided convs, [C_{i+1}, C_i, 2r]
  std::vector<std::vector<ConvNextBlockWeights>> stages;   // ratios.size()+1 stages, stage 0 = stem's blocks
  HostTensor head_w /*[vae_dim, C_last, K]*/, head_b;
};

struct ConnectorWeights { HostTensor fc1_w /*[H, vae]*/, fc1_b, norm, fc2_w /*[H,H]*/, fc2_b; };

struct DecoderLayerWeights { HostTensor input_norm, q_w, q_b, k_w, k_b, v_w, v_b, o_w, post_norm, gate_w, up_w, down_w; };

struct DecoderWeights {
  HostTensor embed /*[V,H]*/;
  std::vector<DecoderLayerWeights> layers;
  HostTensor final_norm;
  HostTensor lm_head; /* == embed's view when tied and no lm_head.weight */
};

struct ModelWeights {
  EncoderWeights acoustic, semantic;
  ConnectorWeights acoustic_connector, semantic_connector;
  DecoderWeights decoder;
};

// One tensor ASR binds: its canonical (original-layout) name, the shape the spec requires, and
// the HostTensor of a ModelWeights it fills. `optional`: only the LM head of a tied model.
struct WeightSlot {
  std::string name;
  std::vector<int64_t> shape;
  HostTensor* target = nullptr;
  bool optional = false;
};

// Sizes the vectors of `w` for `spec` and lists every tensor of the ASR path (MODEL.md §3.1) in a
// fixed order: acoustic encoder, semantic encoder, connectors, decoder, LM head. The slots point
// into `w`, which must outlive them.
std::vector<WeightSlot> weight_slots(const ModelSpec& spec, ModelWeights& w);

}  // namespace vv
