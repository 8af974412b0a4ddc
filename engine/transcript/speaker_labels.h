// SpeakerLabels: maps the model's speaker ids to the labels clients see (API.md §3.4): ids in
// order of first appearance become A, B, … Z, AA, AB, …; a segment without a usable id takes the
// previous segment's label (A for the first) and allocates nothing. One per request; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

namespace vv {

// 0 → "A", 25 → "Z", 26 → "AA", 27 → "AB", 701 → "ZZ", 702 → "AAA".
std::string speaker_label(std::size_t index);

class SpeakerLabels {
 public:
  std::string label_for(std::optional<std::int64_t> speaker_id);
  void reset();

 private:
  std::unordered_map<std::int64_t, std::string> labels_;
  std::string previous_;
};

}  // namespace vv
