// POST /v1/chat/completions (API.md §6): text chat with the decoder, audio parts as speech blocks.
// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>

#include "engine/audio/resampler.h"
#include "engine/transcript/json_text.h"
#include "service/api/audio_intake.h"
#include "service/api/generation_call.h"
#include "service/api/handlers.h"

namespace vv::api {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

struct AudioPart {
  std::string bytes;
  std::string param;
};

struct ChatRequest {
  std::string model;
  // Rendered pieces: text (tokenized later) or an audio slot.
  struct Piece {
    bool audio = false;
    std::string text;
    std::size_t audio_index = 0;
  };
  std::vector<Piece> pieces;
  std::vector<AudioPart> audio;
  bool stream = false;
  bool include_usage = false;
  std::optional<std::int64_t> max_tokens;
  std::string max_param;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool logprobs = false;
  std::int64_t top_logprobs = 0;
};

ApiError bad_type(const std::string& param, const std::string& what) {
  return bad_request("invalid_type", "'" + param + "' must be " + what + ".", param);
}

bool is_number(const element& e) {
  auto t = e.type();
  return t == element_type::INT64 || t == element_type::UINT64 || t == element_type::DOUBLE;
}

double number(const element& e) {
  switch (e.type()) {
    case element_type::INT64: return static_cast<double>(std::int64_t(e));
    case element_type::UINT64: return static_cast<double>(std::uint64_t(e));
    default: return double(e);
  }
}

int b64(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

std::optional<std::string> base64_decode(std::string_view in) {
  std::string out;
  out.reserve(in.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t pad = 0;
  for (char c : in) {
    if (c == '=') {
      ++pad;
      continue;
    }
    if (c == '\n' || c == '\r' || c == ' ') continue;
    if (pad) return std::nullopt;
    int v = b64(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  if (pad > 2) return std::nullopt;
  return out;
}

std::optional<ApiError> parse_parts(const element& content, const std::string& path, ChatRequest& r) {
  simdjson::dom::array arr;
  if (content.get(arr)) return bad_type(path, "a string or an array of content parts");
  std::size_t i = 0;
  for (element part : arr) {
    const std::string pp = path + "[" + std::to_string(i++) + "]";
    simdjson::dom::object obj;
    if (part.get(obj)) return bad_type(pp, "an object");
    std::string_view type;
    if (obj["type"].get(type)) return bad_request("missing_required_parameter", "'" + pp + ".type' is required.", pp + ".type");
    if (type == "text") {
      std::string_view text;
      if (obj["text"].get(text)) return bad_type(pp + ".text", "a string");
      r.pieces.push_back({false, std::string(text), 0});
    } else if (type == "input_audio") {
      simdjson::dom::object ia;
      if (obj["input_audio"].get(ia)) return bad_type(pp + ".input_audio", "an object");
      std::string_view data, format;
      if (ia["data"].get(data)) return bad_type(pp + ".input_audio.data", "a base64 string");
      if (!ia["format"].get(format)) {
        static const char* kNames[] = {"flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav",
                                       "webm", "aac", "aiff", "amr", "opus", "pcm16"};
        if (std::none_of(std::begin(kNames), std::end(kNames), [&](const char* n) { return format == n; })) {
          return invalid_value(pp + ".input_audio.format", "Unsupported audio format '" + echo(format) + "'.");
        }
      }
      auto bytes = base64_decode(data);
      if (!bytes) return invalid_value(pp + ".input_audio", "input_audio.data is not valid base64.");
      r.pieces.push_back({true, "", r.audio.size()});
      r.audio.push_back({std::move(*bytes), pp + ".input_audio"});
    } else if (type == "audio_url") {
      simdjson::dom::object au;
      std::string_view url;
      if (obj["audio_url"].get(au) || au["url"].get(url)) return bad_type(pp + ".audio_url.url", "a string");
      if (url.rfind("data:", 0) != 0) {
        return bad_request("unsupported_value", "Only data: URLs are supported for audio_url.", pp + ".audio_url");
      }
      const auto comma = url.find(',');
      if (comma == std::string_view::npos || url.substr(0, comma).find(";base64") == std::string_view::npos) {
        return invalid_value(pp + ".audio_url", "audio_url must be a base64 data: URL.");
      }
      auto bytes = base64_decode(url.substr(comma + 1));
      if (!bytes) return invalid_value(pp + ".audio_url", "audio_url data is not valid base64.");
      r.pieces.push_back({true, "", r.audio.size()});
      r.audio.push_back({std::move(*bytes), pp + ".audio_url"});
    } else {
      return bad_request("unsupported_value", "Content part type '" + echo(type) + "' is not supported.", pp);
    }
  }
  return std::nullopt;
}

// Duplicate member names anywhere make the body invalid_json (C117): the parse would otherwise
// silently keep one of them. Iterative, so depth costs no stack.
bool has_duplicate_keys(const element& root) {
  std::vector<element> todo{root};
  std::vector<std::string_view> keys;
  while (!todo.empty()) {
    element e = todo.back();
    todo.pop_back();
    simdjson::dom::object o;
    simdjson::dom::array a;
    if (!e.get(o)) {
      keys.clear();
      for (auto [k, v] : o) {
        keys.push_back(k);
        todo.push_back(v);
      }
      std::sort(keys.begin(), keys.end());
      if (std::adjacent_find(keys.begin(), keys.end()) != keys.end()) return true;
    } else if (!e.get(a)) {
      for (element v : a) todo.push_back(v);
    }
  }
  return false;
}

std::variant<ChatRequest, ApiError> validate(const AppState& state, const std::string& body) {
  const auto& s = state.settings;
  ChatRequest r;
  static thread_local simdjson::dom::parser parser;
  if (parser.max_depth() != 65) {
    if (parser.allocate(4096, 65)) return bad_request("invalid_json", "The request body could not be parsed.");
  }
  simdjson::padded_string padded(body);
  element root;
  auto err = parser.parse(padded).get(root);
  if (err) {
    std::string why = err == simdjson::DEPTH_ERROR ? "nesting deeper than 64 levels" : simdjson::error_message(err);
    return bad_request("invalid_json", "The request body is not valid JSON: " + why + ".");
  }
  simdjson::dom::object obj;
  if (root.get(obj)) return bad_request("invalid_json", "The request body must be a JSON object.");
  if (has_duplicate_keys(root)) return bad_request("invalid_json", "The request body has a duplicate member name.");
  // model
  element v;
  if (!obj["model"].get(v) && !v.is_null()) {
    std::string_view m;
    if (v.get(m)) return bad_type("model", "a string");
    if (!m.empty()) {
      const auto& names = s.list("model.served_names");
      const auto& aliases = s.list("model.aliases");
      if (std::find(names.begin(), names.end(), m) == names.end() &&
          std::find(aliases.begin(), aliases.end(), m) == aliases.end()) {
        ApiError e;
        e.status = 404;
        e.code = "model_not_found";
        e.message = "The model '" + echo(m) + "' does not exist.";
        e.param = "model";
        return e;
      }
      r.model = std::string(m);
    }
  }
  if (r.model.empty()) r.model = s.list("model.served_names").front();
  // messages
  simdjson::dom::array msgs;
  if (obj["messages"].get(v)) return bad_request("missing_required_parameter", "'messages' is required.", "messages");
  if (v.get(msgs)) return bad_type("messages", "an array");
  if (msgs.size() == 0) return invalid_value("messages", "'messages' must not be empty.");
  std::size_t i = 0;
  for (element m : msgs) {
    const std::string path = "messages[" + std::to_string(i++) + "]";
    simdjson::dom::object mo;
    if (m.get(mo)) return bad_type(path, "an object");
    std::string_view role;
    if (mo["role"].get(role)) return bad_request("missing_required_parameter", "'" + path + ".role' is required.", path + ".role");
    if (role == "tool" || role == "function") {
      return bad_request("unsupported_value", "Role '" + std::string(role) + "' is not supported.", path + ".role");
    }
    if (role != "system" && role != "developer" && role != "user" && role != "assistant") {
      return invalid_value(path + ".role", "Invalid role '" + echo(role) + "'.");
    }
    const std::string r_name = role == "developer" ? "system" : std::string(role);
    r.pieces.push_back({false, "\x01" + r_name, 0});  // message start marker
    element content;
    if (mo["content"].get(content)) {
      if (role != "assistant") return bad_request("missing_required_parameter", "'" + path + ".content' is required.", path + ".content");
    } else if (content.is_null()) {
      if (role != "assistant") return invalid_value(path + ".content", "content may be null only for assistant messages.");
    } else if (content.is_string()) {
      r.pieces.push_back({false, std::string(std::string_view(content)), 0});
    } else if (auto e = parse_parts(content, path + ".content", r)) {
      return *e;
    }
    r.pieces.push_back({false, "\x02", 0});  // message end marker
  }
  // n
  if (!obj["n"].get(v) && !v.is_null()) {
    if (!is_number(v)) return bad_type("n", "an integer");
    if (number(v) != 1) return bad_request("unsupported_value", "Only n=1 is supported.", "n");
  }
  if (!obj["stream"].get(v) && !v.is_null()) {
    if (v.get(r.stream)) return bad_type("stream", "a boolean");
  }
  if (!obj["stream_options"].get(v) && !v.is_null()) {
    simdjson::dom::object so;
    if (v.get(so)) return bad_type("stream_options", "an object");
    element iu;
    if (!so["include_usage"].get(iu) && !iu.is_null() && iu.get(r.include_usage)) {
      return bad_type("stream_options.include_usage", "a boolean");
    }
  }
  for (const char* f : {"max_tokens", "max_completion_tokens"}) {
    if (!obj[f].get(v) && !v.is_null()) {
      if (!is_number(v) || number(v) != std::floor(number(v))) return bad_type(f, "an integer");
      if (number(v) < 1) return invalid_value(f, std::string("'") + f + "' must be at least 1.");
      if (!r.max_tokens || std::string(f) == "max_completion_tokens") {
        r.max_tokens = static_cast<std::int64_t>(std::min(number(v), 1e9));
        r.max_param = f;
      }
    }
  }
  auto num_field = [&](const char* f, double lo, double hi, bool lo_open, double& out) -> std::optional<ApiError> {
    element e;
    if (obj[f].get(e) || e.is_null()) return std::nullopt;
    if (!is_number(e)) return bad_type(f, "a number");
    const double x = number(e);
    if (!std::isfinite(x) || (lo_open ? x <= lo : x < lo) || x > hi) {
      return invalid_value(f, std::string("'") + f + "' is out of range.");
    }
    out = x;
    return std::nullopt;
  };
  double temperature = 1.0, top_p = 1.0, top_k = 0, min_p = 0, rep = 1.0, pres = 0, freq = 0;
  if (auto e = num_field("temperature", 0, 2, false, temperature)) return *e;
  if (auto e = num_field("top_p", 0, 1, true, top_p)) return *e;
  if (auto e = num_field("top_k", -1, 1e9, false, top_k)) return *e;
  if (top_k != std::floor(top_k)) return bad_type("top_k", "an integer");
  if (auto e = num_field("min_p", 0, 1, false, min_p)) return *e;
  if (auto e = num_field("repetition_penalty", 0, 1e9, true, rep)) return *e;
  if (auto e = num_field("presence_penalty", -2, 2, false, pres)) return *e;
  if (auto e = num_field("frequency_penalty", -2, 2, false, freq)) return *e;
  r.sampling.temperature = static_cast<float>(temperature);
  // Positive values below float's range stay positive (the spec's ranges are open at 0).
  auto positive = [](double x) { return std::max(static_cast<float>(x), std::numeric_limits<float>::min()); };
  r.sampling.top_p = positive(top_p);
  r.sampling.top_k = static_cast<std::int32_t>(top_k);
  r.sampling.min_p = static_cast<float>(min_p);
  r.sampling.repetition_penalty = positive(rep);
  r.sampling.presence_penalty = static_cast<float>(pres);
  r.sampling.frequency_penalty = static_cast<float>(freq);
  if (!obj["logit_bias"].get(v) && !v.is_null()) {
    simdjson::dom::object lb;
    if (v.get(lb)) return bad_type("logit_bias", "an object");
    if (lb.size() > 300) return invalid_value("logit_bias", "logit_bias may have at most 300 entries.");
    for (auto [key, val] : lb) {
      char* end = nullptr;
      std::string k(key);
      const long id = std::strtol(k.c_str(), &end, 10);
      if (k.empty() || *end || id < 0 || (state.tokenizer && id >= state.tokenizer->id_count())) {
        return invalid_value("logit_bias", "logit_bias keys must be token ids.");
      }
      if (!is_number(val) || number(val) < -100 || number(val) > 100) {
        return invalid_value("logit_bias", "logit_bias values must be between -100 and 100.");
      }
      r.sampling.logit_bias.emplace_back(static_cast<TokenId>(id), static_cast<float>(number(val)));
    }
  }
  if (!obj["seed"].get(v) && !v.is_null()) {
    if (v.type() == element_type::INT64) {
      r.sampling.seed = static_cast<std::uint64_t>(std::int64_t(v));
    } else if (v.type() == element_type::UINT64) {
      return invalid_value("seed", "'seed' must fit in a signed 64-bit integer.");
    } else {
      return bad_type("seed", "an integer");
    }
  } else {
    r.sampling.seed = std::random_device{}();
  }
  if (!obj["stop"].get(v) && !v.is_null()) {
    std::string_view one;
    simdjson::dom::array arr;
    if (!v.get(one)) {
      r.stop.emplace_back(one);
    } else if (!v.get(arr)) {
      if (arr.size() > 4) return invalid_value("stop", "At most 4 stop sequences may be given.");
      for (element e : arr) {
        if (e.get(one)) return bad_type("stop", "a string or an array of strings");
        r.stop.emplace_back(one);
      }
    } else {
      return bad_type("stop", "a string or an array of strings");
    }
    for (const auto& st : r.stop) {
      if (st.empty() || st.size() > 256) return invalid_value("stop", "Each stop sequence must be 1–256 bytes.");
    }
  }
  if (!obj["logprobs"].get(v) && !v.is_null() && v.get(r.logprobs)) return bad_type("logprobs", "a boolean");
  if (!obj["top_logprobs"].get(v) && !v.is_null()) {
    if (!is_number(v) || number(v) != std::floor(number(v))) return bad_type("top_logprobs", "an integer");
    if (number(v) < 0 || number(v) > 20) return invalid_value("top_logprobs", "'top_logprobs' must be 0–20.");
    if (!r.logprobs) return invalid_value("top_logprobs", "'top_logprobs' requires 'logprobs': true.");
    r.top_logprobs = static_cast<std::int64_t>(number(v));
  }
  if (!obj["response_format"].get(v) && !v.is_null()) {
    simdjson::dom::object rf;
    std::string_view t;
    if (v.get(rf) || rf["type"].get(t)) return bad_type("response_format", "an object with a 'type'");
    if (t != "text") {
      return bad_request("unsupported_value", "response_format '" + echo(t) + "' is not supported.", "response_format");
    }
  }
  for (const char* f : {"tools", "functions"}) {
    if (!obj[f].get(v) && !v.is_null()) {
      return bad_request("unsupported_parameter", std::string("'") + f + "' is not supported.", f);
    }
  }
  if (!obj["tool_choice"].get(v) && !v.is_null()) {
    std::string_view tc;
    if (v.get(tc) || tc != "none") return bad_request("unsupported_parameter", "'tool_choice' is not supported.", "tool_choice");
  }
  if (!obj["modalities"].get(v) && !v.is_null()) {
    simdjson::dom::array arr;
    if (v.get(arr)) return bad_type("modalities", "an array");
    for (element e : arr) {
      std::string_view m;
      if (e.get(m)) return bad_type("modalities", "an array of strings");
      if (m != "text") return bad_request("unsupported_value", "Only the text modality is supported.", "modalities");
    }
  }
  if (!obj["audio"].get(v) && !v.is_null()) {
    return bad_request("unsupported_parameter", "Audio output is not supported.", "audio");
  }
  return r;
}

std::string random_hex(int n) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string s;
  while (static_cast<int>(s.size()) < n) {
    std::uint64_t x = rng();
    for (int k = 0; k < 16 && static_cast<int>(s.size()) < n; ++k) s += hex[(x >> (4 * k)) & 15];
  }
  return s;
}

class ChatCall : public GenerationCall {
 public:
  ChatCall(const Api& api, std::shared_ptr<RequestInfo> info, std::shared_ptr<Exchange> ex, const ChatRequest& r,
           std::int64_t prompt_tokens, std::int64_t audio_tokens)
      : GenerationCall(api, std::move(info), std::move(ex), r.stream),
        model_(r.model),
        include_usage_(r.include_usage),
        logprobs_(r.logprobs),
        prompt_tokens_(prompt_tokens),
        audio_tokens_(audio_tokens) {
    engine_stream_ = r.logprobs;  // per-token logprobs come with the engine's deltas
    id_ = "chatcmpl-" + random_hex(32);
    created_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    const std::string& sha = state_.git_sha;
    fingerprint_ = "fp_" + sha.substr(0, std::min<std::size_t>(10, sha.size()));
  }

 protected:
  void on_started() override {}
  void on_delta(const RequestEvent& ev) override {
    for (const auto& lp : ev.logprobs) logprob_entries_.push_back(lp);
    content_ += ev.text;
    if (!stream_) return;
    send_role();
    if (ev.text.empty()) return;
    std::string d = "{\"content\":";
    json::append_string(d, ev.text);
    d += "}";
    write_frame(chunk(d, "null", ev.logprobs.empty() || !logprobs_ ? "null" : logprobs_json(ev.logprobs)));
  }
  void on_segment(const RequestEvent&) override {}
  void on_done(const RequestEvent& ev) override {
    const std::string finish = ev.finish_reason == FinishReason::kLength ? "length" : "stop";
    const std::int64_t completion = ev.usage.output_tokens;
    if (stream_) {
      send_role();
      write_frame(chunk("{}", "\"" + finish + "\"", "null"));
      if (include_usage_) {
        std::string c = head() + "\"choices\":[],\"usage\":" + usage_json(completion) + "}";
        write_frame(c);
      }
      finish_stream_ok();
      return;
    }
    const std::string text = ev.text.empty() ? content_ : ev.text;
    std::string b = "{\"id\": \"" + id_ + "\", \"object\": \"chat.completion\", \"created\": " + std::to_string(created_) +
                    ", \"model\": ";
    json::append_string(b, model_);
    b += ", \"system_fingerprint\": \"" + fingerprint_ + "\", \"choices\": [{\"index\": 0, \"message\": {\"role\": \"assistant\", \"content\": ";
    json::append_string(b, text);
    b += ", \"refusal\": null}, \"logprobs\": ";
    b += logprobs_ ? "{\"content\": " + logprobs_json(logprob_entries_) + ", \"refusal\": null}" : "null";
    b += ", \"finish_reason\": \"" + finish + "\"}], \"usage\": " + usage_json(completion) + "}";
    http::HttpResponse r;
    r.body = std::move(b);
    r.set("Content-Type", "application/json");
    exchange_->respond(std::move(r));
  }
  std::string error_frame(const ApiError& e) override { return "{\"error\":" + error_object(e) + "}"; }

 private:
  std::string head() const {
    std::string h = "{\"id\":\"" + id_ + "\",\"object\":\"chat.completion.chunk\",\"created\":" + std::to_string(created_) +
                    ",\"model\":";
    json::append_string(h, model_);
    h += ",\"system_fingerprint\":\"" + fingerprint_ + "\",";
    return h;
  }
  std::string chunk(const std::string& delta, const std::string& finish, const std::string& logprobs) const {
    std::string c = head() + "\"choices\":[{\"index\":0,\"delta\":" + delta + ",\"logprobs\":" + logprobs +
                    ",\"finish_reason\":" + finish + "}]";
    if (include_usage_) c += ",\"usage\":null";
    return c + "}";
  }
  void send_role() {
    if (role_sent_) return;
    role_sent_ = true;
    write_frame(chunk("{\"role\":\"assistant\",\"content\":\"\"}", "null", "null"));
  }
  std::string usage_json(std::int64_t completion) const {
    return "{\"prompt_tokens\": " + std::to_string(prompt_tokens_) + ", \"completion_tokens\": " +
           std::to_string(completion) + ", \"total_tokens\": " + std::to_string(prompt_tokens_ + completion) +
           ", \"prompt_tokens_details\": {\"cached_tokens\": 0, \"audio_tokens\": " + std::to_string(audio_tokens_) +
           "}, \"completion_tokens_details\": {\"reasoning_tokens\": 0}}";
  }
  static std::string logprobs_json(const std::vector<TokenLogprob>& lps) {
    std::string o = "[";
    for (std::size_t i = 0; i < lps.size(); ++i) {
      if (i) o += ",";
      o += "{\"token\":";
      json::append_string(o, lps[i].token);
      o += ",\"logprob\":";
      json::append_double(o, lps[i].logprob);
      o += ",\"bytes\":[";
      for (std::size_t k = 0; k < lps[i].bytes.size(); ++k) {
        o += (k ? "," : "") + std::to_string(static_cast<unsigned char>(lps[i].bytes[k]));
      }
      o += "],\"top_logprobs\":[]}";
    }
    return o + "]";
  }

  std::string model_;
  bool include_usage_, logprobs_;
  std::int64_t prompt_tokens_, audio_tokens_;
  std::string id_, fingerprint_;
  std::int64_t created_ = 0;
  bool role_sent_ = false;
  std::string content_;
  std::vector<TokenLogprob> logprob_entries_;
};

// ChatML rendering (§6.1) into token ids; audio slots become speech blocks.
Result<std::vector<TokenId>> render(const Tokenizer& tok, const ChatRequest& r,
                                    const std::vector<audio::PreparedAudio>& audio, std::int64_t& audio_tokens) {
  auto id = [&](std::string_view t) -> Result<TokenId> {
    auto v = tok.token_to_id(t);
    if (!v) return not_found(std::string(t) + " is not in the tokenizer");
    return *v;
  };
  VV_ASSIGN_OR_RETURN(TokenId im_start, id("<|im_start|>"));
  VV_ASSIGN_OR_RETURN(TokenId im_end, id("<|im_end|>"));
  VV_ASSIGN_OR_RETURN(TokenId sp_start, id("<|object_ref_start|>"));
  VV_ASSIGN_OR_RETURN(TokenId sp_pad, id("<|box_start|>"));
  VV_ASSIGN_OR_RETURN(TokenId sp_end, id("<|object_ref_end|>"));
  std::vector<TokenId> ids;
  auto text = [&](std::string_view s) -> Status {
    if (s.empty()) return Status::ok();
    VV_ASSIGN_OR_RETURN(auto t, tok.encode(s, false));
    ids.insert(ids.end(), t.begin(), t.end());
    return Status::ok();
  };
  audio_tokens = 0;
  for (const auto& p : r.pieces) {
    if (p.audio) {
      const auto& a = audio[p.audio_index];
      ids.push_back(sp_start);
      ids.insert(ids.end(), static_cast<std::size_t>(a.frames), sp_pad);
      ids.push_back(sp_end);
      audio_tokens += a.frames;
      VV_RETURN_IF_ERROR(text("\n"));
    } else if (!p.text.empty() && p.text[0] == '\x01') {
      ids.push_back(im_start);
      VV_RETURN_IF_ERROR(text(p.text.substr(1) + "\n"));
    } else if (p.text == "\x02") {
      ids.push_back(im_end);
      VV_RETURN_IF_ERROR(text("\n"));
    } else {
      VV_RETURN_IF_ERROR(text(p.text));
    }
  }
  ids.push_back(im_start);
  VV_RETURN_IF_ERROR(text("assistant\n"));
  return ids;
}

}  // namespace

std::optional<ApiError> check_chat_body(const AppState& state, const std::string& json) {
  auto checked = validate(state, json);
  if (auto* e = std::get_if<ApiError>(&checked)) return *e;
  return std::nullopt;
}

void handle_chat(const Api& api, std::shared_ptr<RequestInfo> info, std::string json,
                 std::shared_ptr<Exchange> exchange) {
  AppState& state = api.state();
  auto checked = validate(state, json);
  if (auto* e = std::get_if<ApiError>(&checked)) {
    exchange->respond(api.fail(info.get(), *e));
    return;
  }
  auto req = std::make_shared<ChatRequest>(std::get<ChatRequest>(std::move(checked)));
  const Api* api_ptr = &api;
  AudioLimits limits{state.settings.f("asr.min_audio_seconds"), state.settings.f("asr.max_audio_seconds")};
  const audio::PrepareOptions popt = state.prepare;
  state.run_blocking([api_ptr, info, exchange, req, limits, popt] {
    auto decoded = std::make_shared<std::vector<audio::PreparedAudio>>();
    std::optional<ApiError> error;
    double total = 0;
    for (auto& a : req->audio) {
      auto r = intake_audio(a.bytes, popt, limits, a.param);
      if (auto* e = std::get_if<ApiError>(&r)) {
        error = *e;
        break;
      }
      decoded->push_back(std::get<audio::PreparedAudio>(std::move(r)));
      total += static_cast<double>(decoded->back().samples) / popt.sample_rate;
      a.bytes.clear();
    }
    if (!error && total > limits.max_seconds) {
      error = bad_request("audio_too_long", "The request's audio is longer than the limit.", "messages");
    }
    const int source_rate = decoded->empty() ? 0 : decoded->back().source_rate;
    exchange->post([api_ptr, info, exchange, req, decoded, error, total] {
      AppState& st = api_ptr->state();
      if (error) {
        exchange->respond(api_ptr->fail(info.get(), *error));
        return;
      }
      std::int64_t audio_tokens = 0;
      auto ids = render(*st.tokenizer, *req, *decoded, audio_tokens);
      if (!ids.is_ok()) {
        ApiError e;
        e.status = 500;
        e.code = "internal_error";
        e.message = "Could not render the prompt.";
        exchange->respond(api_ptr->fail(info.get(), e));
        return;
      }
      const std::int64_t prompt = static_cast<std::int64_t>(ids->size());
      const std::int64_t max_len = st.settings.i("model.max_model_len");
      if (prompt > max_len) {
        exchange->respond(api_ptr->fail(info.get(), bad_request("context_length_exceeded",
                                                                "The prompt is " + std::to_string(prompt) +
                                                                    " tokens; the model's context is " +
                                                                    std::to_string(max_len) + " tokens.",
                                                                "messages")));
        return;
      }
      if (req->max_tokens && prompt + *req->max_tokens > max_len) {
        exchange->respond(api_ptr->fail(
            info.get(), bad_request("context_length_exceeded",
                                    "The prompt (" + std::to_string(prompt) + " tokens) plus " + req->max_param + " (" +
                                        std::to_string(*req->max_tokens) + ") exceeds the context of " +
                                        std::to_string(max_len) + " tokens.",
                                    req->max_param)));
        return;
      }
      if (total > 0) st.metrics.audio_input_seconds->Add({{"endpoint", "chat"}}).Increment(total);
      Request r;
      r.kind = Request::Kind::kChat;
      r.prompt_ids = std::move(ids).value();
      r.audio = std::move(*decoded);
      r.sampling = req->sampling;
      r.sampling.logprobs = req->logprobs;
      r.sampling.top_logprobs = static_cast<std::int32_t>(req->top_logprobs);
      r.sampling.max_new_tokens = static_cast<std::int32_t>(
          req->max_tokens ? *req->max_tokens : std::min(st.settings.i("chat.default_max_tokens"), max_len - prompt));
      r.stop_strings = req->stop;
      if (st.hooks.script_chat) r.forced_ids = st.script_ids;
      auto call = std::make_shared<ChatCall>(*api_ptr, info, exchange, *req, prompt, audio_tokens);
      call->start(std::move(r));
    });
    // As for transcriptions: the next upload's soxr object is made outside any request's wait.
    audio::prepare_resampler(source_rate, popt.sample_rate);
  });
}

}  // namespace vv::api
