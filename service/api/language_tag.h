// The `language` values the API accepts (a BCP 47-like tag: 2-3 letters, then -subtags), shared by
// the transcription form and the realtime session.
#pragma once
#include <string>

namespace vv::api {

// True for "en", "yue", "zh-Hans", "pt-BR", ...; false for anything else.
bool valid_language(const std::string& v);
// The primary subtag lowercased, the rest as given: "EN-US" → "en-US".
std::string normalise_language(std::string v);

}  // namespace vv::api
