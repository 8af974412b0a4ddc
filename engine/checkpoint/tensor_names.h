// Tensor-name normalisation: every naming scheme of MODEL.md §3 (Microsoft's original names,
// transformers' on-disk and in-memory names, the vLLM plugin's names) mapped to one canonical
// spelling, the original one ("model.acoustic_tokenizer.encoder.stages.0.0.norm.weight").
// Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>

namespace vv {

// The canonical (original-layout) name of a stored tensor name. Names that follow no known
// scheme come back unchanged (the binder then refuses them as unknown).
std::string canonical_tensor_name(std::string_view stored);

// True for canonical names that exist in real checkpoints but that ASR never uses: the acoustic
// VAE decoder (model.acoustic_tokenizer.decoder.*) and rotary inv_freq buffers. They are skipped
// without being read.
bool is_unused_by_asr(std::string_view canonical);

}  // namespace vv
