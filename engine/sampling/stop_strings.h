// StopStringMatcher: ends generation at the first occurrence of any stop string in the decoded
// text (chat `stop`, API.md §6.1); the stop string itself is never emitted. Text that might be the
// start of a stop string is held back until it is decided. One per request; not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vv {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Step {
    std::string text;      // safe to emit now (before any stop string)
    bool stopped = false;  // a stop string was found: finish with "stop" after emitting text
  };
  // The next decoded text piece. After a stop, further pieces give nothing.
  Step feed(std::string_view delta);
  // End of generation without a stop: the held-back tail.
  std::string flush();

  bool stopped() const { return stopped_; }
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace vv
