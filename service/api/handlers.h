// The endpoint handlers behind Api::handle (one file each): they validate the request in the
// spec's order, decode audio on the blocking pool, submit a Request to the engine and turn its
// RequestEvents into the response or the SSE stream. Called on the exchange's executor.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "service/api/api.h"

namespace vv::api {

// POST /v1/audio/transcriptions (and /v1/audio/translations in "transcribe" mode).
void handle_transcription(const Api& api, std::shared_ptr<RequestInfo> info, std::vector<http::FormPart> parts,
                          std::shared_ptr<Exchange> exchange, bool translation);
// POST /v1/chat/completions.
void handle_chat(const Api& api, std::shared_ptr<RequestInfo> info, std::string json,
                 std::shared_ptr<Exchange> exchange);

// The validation steps alone (no audio decoding, no engine), for fuzzing and tests: nullopt when
// the request would go on to audio decoding / rendering.
std::optional<ApiError> check_transcription_form(const AppState& state, std::vector<http::FormPart>& parts,
                                                 bool translation);
std::optional<ApiError> check_chat_body(const AppState& state, const std::string& json);

// §2.3: the container named by the first bytes, or "" when none matches.
std::string sniff_container(std::string_view bytes);

}  // namespace vv::api
