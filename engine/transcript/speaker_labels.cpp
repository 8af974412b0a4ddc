#include "engine/transcript/speaker_labels.h"

#include <algorithm>

namespace vv {

std::string speaker_label(std::size_t index) {
  std::string s;
  std::size_t n = index + 1;  // bijective base 26
  while (n > 0) {
    --n;
    s.push_back(static_cast<char>('A' + n % 26));
    n /= 26;
  }
  std::reverse(s.begin(), s.end());
  return s;
}

std::string SpeakerLabels::label_for(std::optional<std::int64_t> speaker_id) {
  if (!speaker_id) {
    if (previous_.empty()) previous_.assign(1, 'A');
    return previous_;
  }
  auto it = labels_.find(*speaker_id);
  if (it == labels_.end()) it = labels_.emplace(*speaker_id, speaker_label(labels_.size())).first;
  previous_ = it->second;
  return previous_;
}

void SpeakerLabels::reset() {
  labels_.clear();
  previous_.clear();
}

}  // namespace vv
