#include "service/api/language_tag.h"

#include <algorithm>
#include <cctype>
#include <regex>

namespace vv::api {

bool valid_language(const std::string& v) {
  static const std::regex re(R"(^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$)");
  return std::regex_match(v, re);
}

std::string normalise_language(std::string v) {
  const auto dash = v.find('-');
  for (std::size_t i = 0; i < std::min(dash, v.size()); ++i) {
    v[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(v[i])));
  }
  return v;
}

}  // namespace vv::api
