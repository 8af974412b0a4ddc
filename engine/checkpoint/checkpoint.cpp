#include "engine/checkpoint/checkpoint.h"

#include <sys/mman.h>

#include <set>

#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/tensor_names.h"

namespace vv {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_float(DType t) { return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32; }

}  // namespace

Checkpoint::Checkpoint() = default;

Checkpoint::~Checkpoint() {
  for (auto& [p, n] : owned_) ::munmap(p, n);
}

int64_t Checkpoint::parameter_count() const {
  int64_t n = 0;
  for (const HostTensor* t : bound_) n += t->numel();
  return n;
}

std::map<std::string, int> Checkpoint::dtype_counts() const {
  std::map<std::string, int> out;
  for (const HostTensor* t : bound_) ++out[dtype_name(t->dtype)];
  return out;
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& model_dir) {
  VV_ASSIGN_OR_RETURN(ModelSpec spec, load_model_spec(model_dir));
  VV_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsArchive> archive, SafetensorsArchive::open_dir(model_dir));
  auto ckpt = std::unique_ptr<Checkpoint>(new Checkpoint());
  ckpt->spec_ = spec;
  ckpt->source_ = model_dir;

  // Normalise every stored name; unused tensors are recorded and never touched.
  std::map<std::string, std::string> by_canonical;  // canonical -> stored
  for (const std::string& stored : archive->names()) {
    const std::string canonical = canonical_tensor_name(stored);
    if (is_unused_by_asr(canonical)) {
      ckpt->skipped_.push_back(stored);
      continue;
    }
    auto [it, inserted] = by_canonical.emplace(canonical, stored);
    if (!inserted)
      return invalid_argument(model_dir + ": tensors '" + it->second + "' and '" + stored + "' both name '" +
                              canonical + "'");
  }

  std::vector<WeightSlot> slots = weight_slots(ckpt->spec_, ckpt->weights_);
  std::set<std::string> expected;
  for (const auto& slot : slots) expected.insert(slot.name);
  for (const auto& [canonical, stored] : by_canonical) {
    if (!expected.count(canonical))
      return invalid_argument(archive->file_of(stored) + ": unknown tensor '" + stored + "'" +
                              (canonical != stored ? " (read as '" + canonical + "')" : std::string()) +
                              ": not part of VibeVoice-ASR at this config");
  }

  for (const auto& slot : slots) {
    auto it = by_canonical.find(slot.name);
    if (it == by_canonical.end()) {
      if (slot.optional) continue;
      return not_found(model_dir + ": tensor '" + slot.name + "' " + shape_string(slot.shape) + " is missing" +
                       (slot.name == "lm_head.weight" ? " (the model is not tied: tie_word_embeddings is false)" : ""));
    }
    HostTensor t = *archive->find(it->second);
    if (!is_float(t.dtype))
      return unsupported(archive->file_of(it->second) + ": tensor '" + it->second + "' has dtype " + dtype_name(t.dtype) +
                         "; weights must be BF16, F16 or F32");
    if (t.shape != slot.shape)
      return invalid_argument(archive->file_of(it->second) + ": tensor '" + it->second + "' has shape " +
                              shape_string(t.shape) + ", the config requires " + shape_string(slot.shape));
    *slot.target = std::move(t);
    ckpt->bound_.push_back(slot.target);
  }
  DecoderWeights& dec = ckpt->weights_.decoder;
  if (dec.lm_head.data == nullptr) {  // tied and absent: the embedding is the LM head
    dec.lm_head = dec.embed;
    ckpt->lm_head_tied_ = true;
  }
  ckpt->archive_ = std::move(archive);
  return ckpt;
}

}  // namespace vv
