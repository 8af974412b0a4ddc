// Audio intake shared by transcriptions and chat: sniffing (API.md §2.3) and decoding to the
// model's 24 kHz input with the §2.6 checks (empty, unknown container, undecodable, too short,
// too long). Pure functions; run on the blocking pool, never on an I/O thread.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "engine/audio/audio_preparer.h"
#include "service/api/api_error.h"

namespace vv::api {

struct AudioLimits {
  double min_seconds = 0.1;
  double max_seconds = 3600;
};

// The prepared audio or the §0.3 error (param = `param`).
std::variant<audio::PreparedAudio, ApiError> intake_audio(std::string_view bytes, const audio::PrepareOptions& base,
                                                          const AudioLimits& limits, const std::string& param);

}  // namespace vv::api
