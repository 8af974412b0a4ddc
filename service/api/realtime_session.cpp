#include "service/api/realtime_session.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <regex>

#include "engine/text/prompt_builder.h"
#include "engine/transcript/json_text.h"
#include "engine/transcript/stream_events.h"
#include "engine/transcript/utf8_text.h"
#include "service/api/language_tag.h"

namespace vv::api {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

constexpr std::size_t kMaxAppendBytes = 15u << 20;  // §11.2: ≤ 15 MiB decoded per append

ApiError err(std::string code, std::string message, std::optional<std::string> param = std::nullopt,
             int status = 400) {
  ApiError e;
  e.status = status;
  e.code = std::move(code);
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

ApiError bad_type(const std::string& param, const char* expected) {
  return err("invalid_type", "'" + param + "' must be " + expected + ".", param);
}

// Reads a number member that must be within [lo, hi].
std::optional<ApiError> number_in(const object& o, const char* key, const std::string& param, double lo,
                                  double hi, double& out) {
  element v;
  if (o[key].get(v)) return std::nullopt;
  double x = 0;
  if (v.get(x)) return bad_type(param, "a number");  // integers convert
  if (!std::isfinite(x) || x < lo || x > hi) {
    return err("invalid_value",
               "'" + param + "' must be between " + json::format_double(lo) + " and " +
                   json::format_double(hi) + ".",
               param);
  }
  out = x;
  return std::nullopt;
}

std::optional<ApiError> parse_format(element v, const std::string& param, InputFormat& f) {
  object o;
  if (v.get(o)) return bad_type(param, "an object");
  std::string_view type;
  element t;
  if (o["type"].get(t))
    return err("missing_required_parameter", "'" + param + ".type' is required.", param + ".type");
  if (t.get(type)) return bad_type(param + ".type", "a string");
  if (type == "audio/pcm") {
    f.encoding = AudioEncoding::kPcm16;
    f.rate = 24000;
    element r;
    if (!o["rate"].get(r)) {
      double d = 0;
      if (r.get(d) || d != std::floor(d)) return bad_type(param + ".rate", "an integer");
      const std::int64_t rate = std::abs(d) < 1e9 ? static_cast<std::int64_t>(d) : 0;
      if (!valid_pcm_rate(rate)) {
        return err("invalid_value",
                   "'" + param + ".rate' must be one of 8000, 16000, 22050, 24000, 32000, 44100, 48000.",
                   param + ".rate");
      }
      f.rate = static_cast<int>(rate);
    }
  } else if (type == "audio/pcmu" || type == "audio/pcma") {
    f.encoding = type == "audio/pcmu" ? AudioEncoding::kPcmu : AudioEncoding::kPcma;
    f.rate = 8000;
  } else {
    return err("invalid_value", "'" + param + ".type' must be audio/pcm, audio/pcmu or audio/pcma.",
               param + ".type");
  }
  return std::nullopt;
}

std::optional<ApiError> parse_beta_format(element v, const std::string& param, InputFormat& f) {
  std::string_view s;
  if (v.get(s)) return bad_type(param, "a string");
  if (s == "pcm16") {
    f = {AudioEncoding::kPcm16, 24000};
  } else if (s == "g711_ulaw") {
    f = {AudioEncoding::kPcmu, 8000};
  } else if (s == "g711_alaw") {
    f = {AudioEncoding::kPcma, 8000};
  } else {
    return err("invalid_value", "'" + param + "' must be pcm16, g711_ulaw or g711_alaw.", param);
  }
  return std::nullopt;
}

std::optional<ApiError> parse_transcription(const AppState& state, element v, const std::string& param,
                                            RealtimeSettings& s) {
  if (v.is_null()) return std::nullopt;
  object o;
  if (v.get(o)) return bad_type(param, "an object");
  element m;
  if (!o["model"].get(m) && !m.is_null()) {
    std::string_view name;
    if (m.get(name)) return bad_type(param + ".model", "a string");
    if (!name.empty()) {
      const auto& names = state.settings.list("model.served_names");
      const auto& aliases = state.settings.list("model.aliases");
      if (std::find(names.begin(), names.end(), name) == names.end() &&
          std::find(aliases.begin(), aliases.end(), name) == aliases.end()) {
        return err("model_not_found", "The model '" + echo(name) + "' does not exist.", param + ".model",
                   404);
      }
      s.model = std::string(name);
    }
  }
  element l;
  if (!o["language"].get(l)) {
    if (l.is_null()) {
      s.language.reset();
    } else {
      std::string_view lang;
      if (l.get(lang)) return bad_type(param + ".language", "a string or null");
      if (lang.empty()) {
        s.language.reset();
      } else if (!valid_language(std::string(lang))) {
        return err(
            "invalid_value",
            "Invalid language '" + echo(lang) + "': use an ISO-639-1/-3 code such as 'en' or 'zh-Hant'.",
            param + ".language");
      } else {
        s.language = normalise_language(std::string(lang));
      }
    }
  }
  element p;
  if (!o["prompt"].get(p)) {
    std::string_view prompt;
    if (p.is_null()) {
      s.prompt.clear();
    } else if (p.get(prompt)) {
      return bad_type(param + ".prompt", "a string");
    } else {
      s.prompt = std::string(prompt);
    }
  }
  element k;
  if (!o["keywords"].get(k)) {
    simdjson::dom::array a;
    if (k.is_null()) {
      s.keywords.clear();
    } else if (k.get(a)) {
      return bad_type(param + ".keywords", "an array of strings");
    } else {
      std::vector<std::string> kw;
      for (element x : a) {
        std::string_view t;
        if (x.get(t)) return bad_type(param + ".keywords", "an array of strings");
        if (t.size() > 200)
          return err("invalid_value", "Each keyword must be at most 200 bytes.", param + ".keywords");
        if (!t.empty()) kw.emplace_back(t);
      }
      if (kw.size() > 256)
        return err("invalid_value", "At most 256 keywords may be given.", param + ".keywords");
      s.keywords = std::move(kw);
    }
  }
  return std::nullopt;
}

std::optional<ApiError> parse_turn_detection(const AppState& state, element v, const std::string& param,
                                             RealtimeSettings& s) {
  if (v.is_null()) {
    s.vad = false;
    return std::nullopt;
  }
  object o;
  if (v.get(o)) return bad_type(param, "an object or null");
  VadOptions opt = s.vad_options;
  if (!s.vad) {
    opt.threshold = state.settings.f("realtime.vad_threshold");
    opt.prefix_padding_ms = static_cast<int>(state.settings.i("realtime.vad_prefix_padding_ms"));
    opt.silence_duration_ms = static_cast<int>(state.settings.i("realtime.vad_silence_ms"));
  }
  std::string type = s.vad ? s.vad_type : "server_vad";
  element t;
  if (!o["type"].get(t) && !t.is_null()) {
    std::string_view ts;
    if (t.get(ts)) return bad_type(param + ".type", "a string");
    if (ts != "server_vad" && ts != "semantic_vad") {
      return err("invalid_value", "'" + param + ".type' must be server_vad or semantic_vad.",
                 param + ".type");
    }
    type = std::string(ts);
  }
  std::optional<std::string> eagerness;
  if (type == "semantic_vad") {
    // decided (§11.2): no semantic turn model; eagerness picks the silence that ends a turn.
    std::string e = "auto";
    element ev;
    if (!o["eagerness"].get(ev) && !ev.is_null()) {
      std::string_view es;
      if (ev.get(es)) return bad_type(param + ".eagerness", "a string");
      e = std::string(es);
    }
    if (e == "low") {
      opt.silence_duration_ms = 1000;
    } else if (e == "medium" || e == "auto") {
      opt.silence_duration_ms = 500;
    } else if (e == "high") {
      opt.silence_duration_ms = 250;
    } else {
      return err("invalid_value", "'" + param + ".eagerness' must be low, medium, high or auto.",
                 param + ".eagerness");
    }
    eagerness = e;
  }
  double x = 0;
  x = opt.threshold;
  if (auto e = number_in(o, "threshold", param + ".threshold", 0, 1, x)) return e;
  opt.threshold = x;
  x = opt.prefix_padding_ms;
  if (auto e = number_in(o, "prefix_padding_ms", param + ".prefix_padding_ms", 0, 2000, x)) return e;
  opt.prefix_padding_ms = static_cast<int>(x);
  if (type == "server_vad") {
    x = opt.silence_duration_ms;
    if (auto e = number_in(o, "silence_duration_ms", param + ".silence_duration_ms", 100, 5000, x)) return e;
    opt.silence_duration_ms = static_cast<int>(x);
  }
  // create_response, interrupt_response, idle_timeout_ms: accepted and ignored (§11.2).
  s.vad = true;
  s.vad_type = type;
  s.eagerness = eagerness;
  s.vad_options = opt;
  return std::nullopt;
}

std::optional<ApiError> parse_include(element v, const std::string& param, RealtimeSettings& s) {
  if (v.is_null()) {
    s.logprobs = false;
    return std::nullopt;
  }
  simdjson::dom::array a;
  if (v.get(a)) return bad_type(param, "an array of strings");
  bool logprobs = false;
  for (element x : a) {
    std::string_view t;
    if (x.get(t)) return bad_type(param, "an array of strings");
    if (t != "item.input_audio_transcription.logprobs") {
      return err("invalid_value", "'" + param + "' may only contain item.input_audio_transcription.logprobs.",
                 param);
    }
    logprobs = true;
  }
  s.logprobs = logprobs;
  return std::nullopt;
}

std::string raw_json(element v) {
  return simdjson::minify(v);
}

void append_vad(std::string& b, const RealtimeSettings& s) {
  if (!s.vad) {
    b += "null";
    return;
  }
  b += "{\"type\":";
  json::append_string(b, s.vad_type);
  if (s.eagerness) {
    b += ",\"eagerness\":";
    json::append_string(b, *s.eagerness);
  }
  b += ",\"threshold\":";
  json::append_double(b, s.vad_options.threshold);
  b += ",\"prefix_padding_ms\":" + std::to_string(s.vad_options.prefix_padding_ms) +
       ",\"silence_duration_ms\":" + std::to_string(s.vad_options.silence_duration_ms) + "}";
}

void append_transcription(std::string& b, const RealtimeSettings& s) {
  b += "{\"model\":";
  json::append_string(b, s.model);
  b += ",\"language\":";
  if (s.language) {
    json::append_string(b, *s.language);
  } else {
    b += "null";
  }
  b += ",\"prompt\":";
  json::append_string(b, s.prompt);
  b += ",\"keywords\":[";
  for (std::size_t i = 0; i < s.keywords.size(); ++i) {
    if (i) b += ",";
    json::append_string(b, s.keywords[i]);
  }
  b += "]}";
}

std::string item_json(const std::string& id) {
  std::string b = "{\"id\":";
  json::append_string(b, id);
  b += ",\"object\":\"realtime.item\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"user\","
       "\"content\":[{\"type\":\"input_audio\",\"transcript\":null}]}";
  return b;
}

std::string error_object_compact(const ApiError& e) {
  std::string b = "{\"type\":";
  json::append_string(b, error_type(e.status, e.code));
  b += ",\"code\":";
  json::append_string(b, e.code);
  b += ",\"message\":";
  json::append_string(b, e.message);
  b += ",\"param\":";
  if (e.param) {
    json::append_string(b, *e.param);
  } else {
    b += "null";
  }
  b += "}";
  return b;
}

std::string null_or(const std::string& id) {
  if (id.empty()) return "null";
  std::string b;
  json::append_string(b, id);
  return b;
}

simdjson::dom::parser& parser() {
  static thread_local simdjson::dom::parser p;
  if (p.max_depth() != 65) {
    // On failure the parser keeps its defaults, and parse() reports the error.
    const simdjson::error_code e = p.allocate(4096, 65);
    (void)e;
  }
  return p;
}

}  // namespace

RealtimeSettings default_realtime_settings(const AppState& state, const std::string& model) {
  RealtimeSettings s;
  s.model = model;
  s.vad = state.settings.s("realtime.turn_detection") == "server_vad";
  s.vad_options.threshold = state.settings.f("realtime.vad_threshold");
  s.vad_options.prefix_padding_ms = static_cast<int>(state.settings.i("realtime.vad_prefix_padding_ms"));
  s.vad_options.silence_duration_ms = static_cast<int>(state.settings.i("realtime.vad_silence_ms"));
  return s;
}

std::variant<RealtimeSettings, ApiError> merge_realtime_settings(const AppState& state,
                                                                 const RealtimeSettings& current,
                                                                 std::string_view session_json,
                                                                 bool format_locked) {
  RealtimeSettings s = current;
  simdjson::padded_string padded(session_json);
  element root;
  if (parser().parse(padded).get(root)) return err("invalid_json", "'session' is not valid JSON.", "session");
  object o;
  if (root.get(o)) return bad_type("session", "an object");
  element v;
  if (!o["type"].get(v) && !v.is_null()) {
    std::string_view t;
    if (v.get(t)) return bad_type("session.type", "a string");
    if (t == "realtime") {
      return err("unsupported_value",
                 "Only transcription sessions are supported: the model cannot hold a spoken conversation.",
                 "session.type");
    }
    if (t != "transcription")
      return err("invalid_value", "'session.type' must be transcription.", "session.type");
  }
  // GA shape: session.audio.input.{format, transcription, turn_detection, noise_reduction}.
  if (!o["audio"].get(v) && !v.is_null()) {
    object audio;
    if (v.get(audio)) return bad_type("session.audio", "an object");
    element in;
    if (!audio["input"].get(in) && !in.is_null()) {
      object input;
      if (in.get(input)) return bad_type("session.audio.input", "an object");
      element x;
      if (!input["format"].get(x) && !x.is_null()) {
        if (auto e = parse_format(x, "session.audio.input.format", s.format)) return *e;
      }
      if (!input["transcription"].get(x)) {
        if (auto e = parse_transcription(state, x, "session.audio.input.transcription", s)) return *e;
      }
      if (!input["turn_detection"].get(x)) {
        if (auto e = parse_turn_detection(state, x, "session.audio.input.turn_detection", s)) return *e;
      }
      if (!input["noise_reduction"].get(x)) s.noise_reduction = raw_json(x);
    }
  }
  // Beta (flat) shape; either update event may carry either shape.
  if (!o["input_audio_format"].get(v) && !v.is_null()) {
    if (auto e = parse_beta_format(v, "session.input_audio_format", s.format)) return *e;
  }
  if (!o["input_audio_transcription"].get(v)) {
    if (auto e = parse_transcription(state, v, "session.input_audio_transcription", s)) return *e;
  }
  if (!o["turn_detection"].get(v)) {
    if (auto e = parse_turn_detection(state, v, "session.turn_detection", s)) return *e;
  }
  if (!o["input_audio_noise_reduction"].get(v)) s.noise_reduction = raw_json(v);
  if (!o["include"].get(v)) {
    if (auto e = parse_include(v, "session.include", s)) return *e;
  }
  if (format_locked && !(s.format == current.format)) {
    return err("invalid_value", "The input audio format cannot change after audio was appended.",
               "session.audio.input.format");
  }
  // §3.3: prompt and keywords within the context budget.
  if (s.prompt != current.prompt || s.keywords != current.keywords || s.language != current.language) {
    const std::string hint = state.settings.b("asr.language_hint") && s.language ? *s.language : "";
    const std::string context = compose_context(s.prompt, s.keywords, "", hint);
    const std::int64_t budget = state.settings.i("asr.max_context_tokens");
    if (!context.empty() && state.tokenizer) {
      auto ids = state.tokenizer->encode(context, false);
      if (!ids.is_ok() || static_cast<std::int64_t>(ids->size()) > budget) {
        return err(
            "invalid_value",
            "The prompt and keywords exceed the context budget of " + std::to_string(budget) + " tokens.",
            "session.audio.input.transcription.prompt");
      }
    }
  }
  return s;
}

RealtimeSession::RealtimeSession(const Api& api, RealtimeHandshake handshake,
                                 std::shared_ptr<RealtimeTransport> transport)
    : api_(api), state_(api.state()), hs_(std::move(handshake)), transport_(std::move(transport)) {
  id_ = new_id("sess_");
  settings_ = default_realtime_settings(state_, hs_.model);
  decoder_.set_format(settings_.format);
  vad_.configure(settings_.vad_options, settings_.format.rate);
}

RealtimeSession::~RealtimeSession() {
  if (inflight_id_) state_.unregister_inflight(inflight_id_);
  if (gauge_counted_) state_.metrics.realtime_sessions->Decrement();
}

std::string RealtimeSession::new_id(std::string_view prefix) const {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id(prefix);
  const std::uint64_t x = rng();
  for (int k = 0; k < 16; ++k) id += hex[(x >> (4 * k)) & 15];
  return id;
}

std::int64_t RealtimeSession::ms(std::int64_t sample) const {
  return static_cast<std::int64_t>(
      std::llround(static_cast<double>(sample) * 1000.0 / settings_.format.rate));
}

std::string RealtimeSession::session_json() const {
  const auto& s = settings_;
  std::string b;
  if (hs_.beta) {
    b = "{\"object\":\"realtime.transcription_session\",\"id\":";
    json::append_string(b, id_);
    b += ",\"input_audio_format\":";
    const char* fmt = s.format.encoding == AudioEncoding::kPcmu   ? "g711_ulaw"
                      : s.format.encoding == AudioEncoding::kPcma ? "g711_alaw"
                                                                  : "pcm16";
    json::append_string(b, fmt);
    if (s.format.encoding == AudioEncoding::kPcm16 && s.format.rate != 24000) {
      b += ",\"input_audio_rate\":" + std::to_string(s.format.rate);  // extension: pcm16 at another rate
    }
    b += ",\"input_audio_transcription\":";
    append_transcription(b, s);
    b += ",\"turn_detection\":";
    append_vad(b, s);
    b += ",\"input_audio_noise_reduction\":" + s.noise_reduction;
  } else {
    b = "{\"object\":\"realtime.session\",\"type\":\"transcription\",\"id\":";
    json::append_string(b, id_);
    b += ",\"audio\":{\"input\":{\"format\":";
    if (s.format.encoding == AudioEncoding::kPcm16) {
      b += "{\"type\":\"audio/pcm\",\"rate\":" + std::to_string(s.format.rate) + "}";
    } else {
      b += s.format.encoding == AudioEncoding::kPcmu ? "{\"type\":\"audio/pcmu\"}"
                                                     : "{\"type\":\"audio/pcma\"}";
    }
    b += ",\"noise_reduction\":" + s.noise_reduction + ",\"transcription\":";
    append_transcription(b, s);
    b += ",\"turn_detection\":";
    append_vad(b, s);
    b += "}}";
  }
  b += s.logprobs ? ",\"include\":[\"item.input_audio_transcription.logprobs\"]}" : ",\"include\":[]}";
  return b;
}

void RealtimeSession::send(std::string type, std::string body) {
  if (closed_) return;
  std::string out = "{\"type\":";
  json::append_string(out, type);
  out += ",\"event_id\":";
  json::append_string(out, new_id("event_"));
  out += body;
  out += "}";
  transport_->send_text(std::move(out));
}

void RealtimeSession::send_error(const ApiError& e, const std::optional<std::string>& client_event_id) {
  std::string b = ",\"error\":{\"type\":";
  json::append_string(b, error_type(e.status, e.code));
  b += ",\"code\":";
  json::append_string(b, e.code);
  b += ",\"message\":";
  json::append_string(b, e.message);
  b += ",\"param\":" + (e.param ? null_or(*e.param) : std::string("null"));
  b += ",\"event_id\":" + (client_event_id ? null_or(*client_event_id) : std::string("null")) + "}";
  state_.metrics.errors->Add({{"endpoint", "realtime"}, {"code", e.code}}).Increment();
  send("error", std::move(b));
}

void RealtimeSession::close(int code, std::string reason) {
  if (closed_) return;
  transport_->close(code, std::move(reason));
  on_closed();
}

void RealtimeSession::start() {
  state_.metrics.realtime_sessions->Increment();
  gauge_counted_ = true;
  std::weak_ptr<RealtimeSession> weak = shared_from_this();
  auto transport = transport_;
  inflight_id_ = state_.register_inflight([weak, transport] {
    transport->post([weak] {
      if (auto s = weak.lock()) s->shutdown();
    });
  });
  send(hs_.beta ? "transcription_session.created" : "session.created", ",\"session\":" + session_json());
  transport_->after(state_.settings.f("realtime.max_session_s"), [weak] {
    auto s = weak.lock();
    if (!s || s->closed_) return;
    s->send_error(
        err("session_expired", "The session reached its maximum duration (realtime.max_session_s)."),
        std::nullopt);
    s->close(1008, "session expired");
  });
  arm_idle_timer(state_.settings.f("realtime.idle_timeout_s"));
  if (state_.refusing.load()) drain();
}

void RealtimeSession::arm_idle_timer(double seconds) {
  std::weak_ptr<RealtimeSession> weak = shared_from_this();
  transport_->after(seconds, [weak] {
    auto s = weak.lock();
    if (!s || s->closed_) return;
    const double limit = s->state_.settings.f("realtime.idle_timeout_s");
    const double idle =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - s->last_data_).count();
    // A client waiting for its items is not idle.
    if (idle >= limit * 0.999 && !s->current_ && s->queue_.empty()) {
      s->send_error(err("idle_timeout", "No client message for " + json::format_double(limit) + " s."),
                    std::nullopt);
      s->close(1008, "idle timeout");
      return;
    }
    s->arm_idle_timer(std::max(0.05, limit - idle));
  });
}

void RealtimeSession::on_text(std::string_view message) {
  if (closed_) return;
  last_data_ = std::chrono::steady_clock::now();
  simdjson::padded_string padded(message);
  element root;
  object o;
  if (parser().parse(padded).get(root) || root.get(o)) {
    send_error(err("invalid_json", "The message is not a JSON object."), std::nullopt);
    return;
  }
  std::optional<std::string> event_id;
  element v;
  if (!o["event_id"].get(v)) {
    std::string_view id;
    if (!v.get(id)) event_id = std::string(id.substr(0, 64));
  }
  std::string_view type;
  if (o["type"].get(v)) {
    send_error(err("missing_required_parameter", "The event has no 'type'.", "type"), event_id);
    return;
  }
  if (v.get(type)) {
    send_error(bad_type("type", "a string"), event_id);
    return;
  }
  const bool known = type == "session.update" || type == "transcription_session.update" ||
                     type == "input_audio_buffer.append" || type == "input_audio_buffer.commit" ||
                     type == "input_audio_buffer.clear" || type == "session.finish";
  if (!known) {
    send_error(err("unknown_event", "Unknown event type '" + echo(type) + "'.", "type"), event_id);
    return;
  }
  if (finishing_) {
    send_error(err("session_finishing", "The session is finishing; no more events are accepted."), event_id);
    return;
  }
  if (type == "session.update" || type == "transcription_session.update") {
    element sv;
    if (o["session"].get(sv)) {
      send_error(err("missing_required_parameter", "'session' is required.", "session"), event_id);
      return;
    }
    auto merged = merge_realtime_settings(state_, settings_, simdjson::minify(sv), appended_);
    if (auto* e = std::get_if<ApiError>(&merged)) {
      send_error(*e, event_id);
      return;
    }
    const RealtimeSettings before = settings_;
    settings_ = std::get<RealtimeSettings>(std::move(merged));
    decoder_.set_format(settings_.format);
    if (settings_.vad != before.vad || !(settings_.format == before.format) ||
        settings_.vad_options.threshold != before.vad_options.threshold ||
        settings_.vad_options.silence_duration_ms != before.vad_options.silence_duration_ms ||
        settings_.vad_options.prefix_padding_ms != before.vad_options.prefix_padding_ms) {
      vad_.configure(settings_.vad_options, settings_.format.rate);
      vad_.reset();
      pending_item_id_.clear();
    }
    send(hs_.beta ? "transcription_session.updated" : "session.updated", ",\"session\":" + session_json());
    return;
  }
  if (type == "input_audio_buffer.append") {
    element a;
    if (o["audio"].get(a)) {
      send_error(err("missing_required_parameter", "'audio' is required.", "audio"), event_id);
      return;
    }
    std::string_view b64;
    if (a.get(b64)) {
      send_error(bad_type("audio", "a base64 string"), event_id);
      return;
    }
    if (b64.size() / 4 * 3 > kMaxAppendBytes + 3) {
      send_error(err("invalid_value", "'audio' may hold at most 15 MiB per append.", "audio"), event_id);
      return;
    }
    auto bytes = base64_decode(b64);
    if (!bytes) {
      send_error(err("invalid_value", "'audio' is not valid base64.", "audio"), event_id);
      return;
    }
    append_bytes(*bytes, event_id);
    return;
  }
  if (type == "input_audio_buffer.commit") {
    commit("client", total_samples_, event_id);
    return;
  }
  if (type == "input_audio_buffer.clear") {
    buffer_.clear();
    buffer_start_ = total_samples_;
    decoder_.clear();
    vad_.reset();
    pending_item_id_.clear();
    note_buffer();
    send("input_audio_buffer.cleared", "");
    return;
  }
  // session.finish
  finishing_ = true;
  const auto min_samples = settings_.format.rate / 10;
  if (static_cast<std::int64_t>(buffer_.size()) >= min_samples)
    commit("finish", total_samples_, std::nullopt);
  check_finish();
}

void RealtimeSession::on_binary(std::string_view message) {
  if (closed_) return;
  last_data_ = std::chrono::steady_clock::now();
  if (finishing_) {
    send_error(err("session_finishing", "The session is finishing; no more audio is accepted."),
               std::nullopt);
    return;
  }
  append_bytes(message, std::nullopt);
}

void RealtimeSession::append_bytes(std::string_view bytes, const std::optional<std::string>& event_id) {
  if (state_.refusing.load() || draining_) {
    send_error(
        err("shutting_down", "The server is shutting down; no more audio is accepted.", std::nullopt, 503),
        event_id);
    return;
  }
  std::vector<float> samples;
  decoder_.append(bytes, samples);
  appended_ = true;
  if (samples.empty()) return;
  const double rate = settings_.format.rate;
  if (!settings_.vad) {
    const auto max_buffer = static_cast<std::int64_t>(state_.settings.f("realtime.max_buffer_s") * rate);
    if (static_cast<std::int64_t>(buffer_.size() + samples.size()) > max_buffer) {
      send_error(
          err("buffer_full",
              "The uncommitted audio would exceed realtime.max_buffer_s; commit or clear the buffer first.",
              "audio"),
          event_id);
      return;
    }
  }
  const std::int64_t first = total_samples_;
  buffer_.insert(buffer_.end(), samples.begin(), samples.end());
  total_samples_ += static_cast<std::int64_t>(samples.size());
  const auto max_item = static_cast<std::int64_t>(state_.settings.f("realtime.max_item_s") * rate);
  if (settings_.vad) {
    const auto prefix =
        static_cast<std::int64_t>(settings_.vad_options.prefix_padding_ms) * settings_.format.rate / 1000;
    for (const auto& ev : vad_.feed(samples.data(), samples.size(), first)) {
      if (ev.kind == VoiceActivityDetector::Event::Kind::kStarted) {
        pending_item_id_ = new_id("item_");
        speech_start_ = std::max(buffer_start_, ev.sample - prefix);
        std::string b = ",\"audio_start_ms\":" + std::to_string(ms(speech_start_)) + ",\"item_id\":";
        json::append_string(b, pending_item_id_);
        send("input_audio_buffer.speech_started", std::move(b));
      } else {
        std::string b = ",\"audio_end_ms\":" + std::to_string(ms(ev.sample)) + ",\"item_id\":";
        json::append_string(b, pending_item_id_);
        send("input_audio_buffer.speech_stopped", std::move(b));
        // Audio before the item's start (silence beyond the prefix padding) is not part of it.
        if (speech_start_ > buffer_start_) {
          buffer_.erase(buffer_.begin(), buffer_.begin() + (speech_start_ - buffer_start_));
          buffer_start_ = speech_start_;
        }
        commit("vad", ev.sample, std::nullopt);
        pending_item_id_.clear();
      }
    }
    if (vad_.in_speech()) {
      if (speech_start_ > buffer_start_) {
        buffer_.erase(buffer_.begin(), buffer_.begin() + (speech_start_ - buffer_start_));
        buffer_start_ = speech_start_;
      }
      while (total_samples_ - buffer_start_ >= max_item) {
        commit("max_duration", buffer_start_ + max_item, std::nullopt);
        // The turn goes on in a new item (its speech_stopped names that one).
        pending_item_id_ = new_id("item_");
        speech_start_ = buffer_start_;
      }
    } else {
      trim_idle_buffer();
    }
    maybe_interim();
  } else {
    while (total_samples_ - buffer_start_ >= max_item)
      commit("max_duration", buffer_start_ + max_item, std::nullopt);
  }
  note_buffer();
}

void RealtimeSession::maybe_interim() {
  const std::int64_t interval_ms = state_.settings.i("realtime.interim_interval_ms");
  if (interval_ms <= 0 || !settings_.vad || !vad_.in_speech() || pending_item_id_.empty()) return;
  if (closed_ || draining_ || shutdown_ || finishing_ || interim_busy_) return;
  // Items are transcribed one at a time in commit order, and nothing of the pending item may come
  // before the committed ones' completed/failed: no interim while any of them is outstanding.
  if (current_ || !queue_.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_interim_ < std::chrono::milliseconds(interval_ms)) return;
  const std::int64_t from = std::max(speech_start_, buffer_start_);
  const std::int64_t n = buffer_start_ + static_cast<std::int64_t>(buffer_.size()) - from;
  if (n < settings_.format.rate / 10) return;
  // Lowest priority: skipped while anything waits in the engine's queue.
  if (state_.engine->load().waiting > 0) return;
  last_interim_ = now;
  interim_busy_ = true;
  const std::uint64_t seq = interim_seq_;
  const std::string item_id = pending_item_id_;
  const std::int64_t end_sample = from + n;
  audio::DecodedAudio decoded;
  decoded.samples.assign(buffer_.begin() + (from - buffer_start_), buffer_.end());
  decoded.sample_rate = settings_.format.rate;
  decoded.channels = 1;
  std::weak_ptr<RealtimeSession> weak = shared_from_this();
  auto transport = transport_;
  const audio::PrepareOptions popt = state_.prepare;
  auto input = std::make_shared<audio::DecodedAudio>(std::move(decoded));
  state_.run_blocking([weak, transport, input, popt, seq, item_id, end_sample] {
    auto prepared =
        std::make_shared<Result<audio::PreparedAudio>>(audio::prepare_decoded(std::move(*input), popt));
    transport->post([weak, prepared, seq, item_id, end_sample] {
      auto s = weak.lock();
      if (!s) return;
      if (s->closed_ || seq != s->interim_seq_ || !prepared->is_ok()) {
        s->interim_busy_ = false;
        return;
      }
      s->start_interim(seq, item_id, end_sample, std::move(**prepared));
    });
  });
}

void RealtimeSession::start_interim(std::uint64_t seq, const std::string& item_id, std::int64_t end_sample,
                                    audio::PreparedAudio audio) {
  Request req = transcription_request(item_id + "/interim", std::move(audio));
  req.priority = -1;  // after every HTTP request and committed item
  std::weak_ptr<RealtimeSession> weak = shared_from_this();
  auto transport = transport_;
  auto sink = [weak, transport, seq, item_id, end_sample](RequestEvent&& ev) {
    if (ev.type != RequestEvent::Type::kDone && ev.type != RequestEvent::Type::kError) return;
    auto shared = std::make_shared<RequestEvent>(std::move(ev));
    transport->post([weak, shared, seq, item_id, end_sample] {
      if (auto s = weak.lock()) s->on_interim_event(seq, item_id, end_sample, *shared);
    });
  };
  auto id = state_.engine->submit(std::move(req), std::move(sink));
  if (!id.is_ok()) {  // a full queue: interim results are best effort
    interim_busy_ = false;
    return;
  }
  interim_engine_id_ = *id;
}

void RealtimeSession::on_interim_event(std::uint64_t seq, const std::string& item_id, std::int64_t end_sample,
                                       const RequestEvent& ev) {
  interim_busy_ = false;
  interim_engine_id_ = 0;
  if (ev.type != RequestEvent::Type::kDone || closed_ || seq != interim_seq_ || item_id != pending_item_id_)
    return;
  std::string b = ",\"item_id\":";
  json::append_string(b, item_id);
  b += ",\"content_index\":0,\"transcript\":";
  json::append_string(b, ev.transcript.text);
  b += ",\"audio_end_ms\":" + std::to_string(ms(end_sample));
  send("conversation.item.input_audio_transcription.interim", std::move(b));
}

void RealtimeSession::cancel_interim() {
  ++interim_seq_;  // whatever is in flight is now stale
  if (interim_engine_id_ != 0) state_.engine->cancel(interim_engine_id_);
}

void RealtimeSession::trim_idle_buffer() {
  // Outside speech only the prefix padding (plus one VAD frame) can become part of an item.
  const auto keep =
      static_cast<std::int64_t>(settings_.vad_options.prefix_padding_ms + 40) * settings_.format.rate / 1000;
  const std::int64_t cut = total_samples_ - keep;
  if (cut > buffer_start_) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + (cut - buffer_start_));
    buffer_start_ = cut;
  }
}

void RealtimeSession::note_buffer() {
  const double now = static_cast<double>(buffer_.size()) / settings_.format.rate;
  state_.metrics.realtime_buffered_audio->Increment(now - reported_buffer_s_);
  reported_buffer_s_ = now;
}

void RealtimeSession::commit(std::string_view reason, std::int64_t end_sample,
                             const std::optional<std::string>& event_id) {
  const std::int64_t n =
      std::min<std::int64_t>(end_sample - buffer_start_, static_cast<std::int64_t>(buffer_.size()));
  if (n < settings_.format.rate / 10) {
    if (reason == "client") {
      send_error(
          err("input_audio_buffer_commit_empty",
              "Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but "
              "buffer only has " +
                  std::to_string(ms(std::max<std::int64_t>(n, 0))) + "ms of audio.",
              std::nullopt),
          event_id);
    }
    return;
  }
  // §12.1: no interim event for an item after its committed event.
  cancel_interim();
  auto item = std::make_shared<Item>();
  item->id = !pending_item_id_.empty() && reason != "client" ? pending_item_id_ : new_id("item_");
  if (reason == "client" && !pending_item_id_.empty()) {
    item->id = pending_item_id_;
    vad_.reset();
  }
  pending_item_id_.clear();
  item->previous_id = last_item_id_;
  item->start_sample = buffer_start_;
  item->end_sample = buffer_start_ + n;
  item->samples.assign(buffer_.begin(), buffer_.begin() + n);
  buffer_.erase(buffer_.begin(), buffer_.begin() + n);
  buffer_start_ += n;
  last_item_id_ = item->id;
  note_buffer();
  std::string b = ",\"item_id\":";
  json::append_string(b, item->id);
  b += ",\"previous_item_id\":" + null_or(item->previous_id) +
       ",\"audio_start_ms\":" + std::to_string(ms(item->start_sample)) +
       ",\"audio_end_ms\":" + std::to_string(ms(item->end_sample)) + ",\"reason\":";
  json::append_string(b, reason);
  send("input_audio_buffer.committed", std::move(b));
  std::string c = ",\"previous_item_id\":" + null_or(item->previous_id) + ",\"item\":" + item_json(item->id);
  send(hs_.beta ? "conversation.item.created" : "conversation.item.added", std::move(c));
  queue_.push_back(std::move(item));
  ++pending_items_;
  state_.realtime_items_pending.fetch_add(1);
  pump();
}

void RealtimeSession::pump() {
  if (closed_ || current_ || queue_.empty()) return;
  current_ = std::move(queue_.front());
  queue_.pop_front();
  current_submitted_ = false;
  current_text_.clear();
  current_segments_ = 0;
  auto item = current_;
  std::weak_ptr<RealtimeSession> weak = shared_from_this();
  auto transport = transport_;
  const audio::PrepareOptions popt = state_.prepare;
  const int rate = settings_.format.rate;
  // Resampling to 24 kHz and loudness normalisation run on the blocking pool, never on an I/O thread.
  state_.run_blocking([weak, transport, item, popt, rate] {
    audio::DecodedAudio decoded;
    decoded.samples = std::move(item->samples);
    decoded.sample_rate = rate;
    decoded.channels = 1;
    auto prepared =
        std::make_shared<Result<audio::PreparedAudio>>(audio::prepare_decoded(std::move(decoded), popt));
    transport->post([weak, item, prepared] {
      auto s = weak.lock();
      if (!s || s->closed_ || s->current_ != item) return;
      if (!prepared->is_ok()) {
        s->item_failed(err("invalid_audio", "The item's audio could not be prepared: " +
                                                prepared->status().message().substr(0, 200)));
        return;
      }
      s->start_item(std::move(**prepared));
    });
  });
}

// What an item's transcription and an interim one share: the session's prompt, keywords and
// language hint, greedy decoding, the scripted ids of the test hooks.
Request RealtimeSession::transcription_request(const std::string& suffix, audio::PreparedAudio audio) const {
  Request req;
  req.kind = Request::Kind::kTranscription;
  req.request_id = id_ + "/" + suffix;
  req.audio.push_back(std::move(audio));
  const std::string hint =
      state_.settings.b("asr.language_hint") && settings_.language ? *settings_.language : "";
  req.context = compose_context(settings_.prompt, settings_.keywords, "", hint);
  req.sampling.temperature = 0.0f;
  req.sampling.max_new_tokens = static_cast<std::int32_t>(state_.settings.i("asr.max_new_tokens"));
  req.forced_ids = state_.script_ids;
  req.repetition_detection = state_.settings.b("asr.repetition_detection");
  req.arrival = std::chrono::steady_clock::now();
  return req;
}

void RealtimeSession::start_item(audio::PreparedAudio audio) {
  if (shutdown_) {
    item_failed(err("shutting_down", "The server is shutting down.", std::nullopt, 503));
    return;
  }
  const double seconds = static_cast<double>(audio.samples) / state_.prepare.sample_rate;
  state_.metrics.audio_input_seconds->Add({{"endpoint", "realtime"}}).Increment(seconds);
  Request req = transcription_request(current_->id, std::move(audio));
  req.sampling.logprobs = settings_.logprobs;
  req.stream = true;
  req.priority = 1;  // §13.1: WebSocket items before queued HTTP work
  req.repetition_retries = static_cast<int>(state_.settings.i("asr.repetition_retries"));
  req.queue_deadline = req.arrival + std::chrono::microseconds(static_cast<std::int64_t>(
                                         state_.settings.f("limits.max_queue_wait_s") * 1e6));
  std::weak_ptr<RealtimeSession> weak = shared_from_this();
  auto transport = transport_;
  AppState* st = &state_;
  auto item = current_;
  auto sink = [weak, transport, st, item](RequestEvent&& ev) {
    st->note_engine_event();
    auto shared = std::make_shared<RequestEvent>(std::move(ev));
    transport->post([weak, shared, item] {
      auto s = weak.lock();
      if (s && s->current_ == item) s->on_engine_event(*shared);
    });
  };
  auto id = state_.engine->submit(std::move(req), std::move(sink));
  if (!id.is_ok()) {
    if (id.status().code() == StatusCode::kResourceExhausted) {
      state_.metrics.rejected->Add({{"reason", "queue_full"}}).Increment();
      item_failed(err("server_overloaded", "The server is overloaded; the item was not transcribed.",
                      std::nullopt, 503));
    } else {
      item_failed(err("invalid_value", "The item was refused: " + id.status().message().substr(0, 200)));
    }
    return;
  }
  engine_id_ = *id;
  current_submitted_ = true;
  current_started_ = std::chrono::steady_clock::now();
  state_.track_tokens(engine_id_, "realtime");
  state_.engine_requests_in_flight.fetch_add(1);
  state_.note_engine_event();
}

void RealtimeSession::on_engine_event(const RequestEvent& ev) {
  const std::string& item_id = current_->id;
  std::string head = ",\"item_id\":";
  json::append_string(head, item_id);
  head += ",\"content_index\":0";
  switch (ev.type) {
    case RequestEvent::Type::kStarted:
      return;
    case RequestEvent::Type::kTextDelta: {
      if (ev.text.empty()) return;
      current_text_ += ev.text;
      std::string b = head + ",\"delta\":";
      json::append_string(b, ev.text);
      if (settings_.logprobs) {
        b += ",\"logprobs\":";
        append_logprobs(b, ev.logprobs);
      }
      send("conversation.item.input_audio_transcription.delta", std::move(b));
      return;
    }
    case RequestEvent::Type::kSegment: {
      const std::size_t index = current_segments_++;
      if (!ev.segment) return;
      const double offset = static_cast<double>(current_->start_sample) / settings_.format.rate;
      std::string b = head + ",\"id\":\"" + segment_id(index) + "\",\"start\":";
      json::append_double(b, ev.segment->start);
      b += ",\"end\":";
      json::append_double(b, ev.segment->end);
      b += ",\"speaker\":";
      json::append_string(b, ev.segment->speaker);
      b += ",\"text\":";
      json::append_string(b, ev.segment->text);
      b += ",\"session_start\":";
      json::append_double(b, std::round((offset + ev.segment->start) * 1000.0) / 1000.0);
      b += ",\"session_end\":";
      json::append_double(b, std::round((offset + ev.segment->end) * 1000.0) / 1000.0);
      send("conversation.item.input_audio_transcription.segment", std::move(b));
      return;
    }
    case RequestEvent::Type::kDone: {
      current_submitted_ = false;
      state_.engine_requests_in_flight.fetch_sub(1);
      state_.finish_tokens(engine_id_, ev.usage.output_tokens);
      const FinishReason fr =
          ev.finish_reason != FinishReason::kNone ? ev.finish_reason : ev.transcript.finish_reason;
      state_.metrics.requests
          ->Add({{"endpoint", "realtime"}, {"finish_reason", std::string(finish_reason_name(fr))}})
          .Increment();
      state_.note_request_seconds(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - current_started_).count());
      // §12.1: the deltas concatenate to the transcript; the engine's text is what they spelled.
      const std::string& transcript = ev.transcript.text.empty() ? current_text_ : ev.transcript.text;
      std::string b = head + ",\"transcript\":";
      json::append_string(b, transcript);
      if (settings_.logprobs) {
        b += ",\"logprobs\":";
        append_logprobs(b, ev.transcript.logprobs);
      }
      const std::int64_t input = ev.usage.audio_tokens + ev.usage.text_tokens;
      b += ",\"usage\":{\"type\":\"tokens\",\"input_tokens\":" + std::to_string(input) +
           ",\"output_tokens\":" + std::to_string(ev.usage.output_tokens) +
           ",\"total_tokens\":" + std::to_string(input + ev.usage.output_tokens) +
           ",\"input_token_details\":{\"audio_tokens\":" + std::to_string(ev.usage.audio_tokens) +
           ",\"text_tokens\":" + std::to_string(ev.usage.text_tokens) + "}},\"finish_reason\":";
      json::append_string(b, finish_reason_name(fr));
      send("conversation.item.input_audio_transcription.completed", std::move(b));
      state_.metrics.realtime_items->Add({{"outcome", "completed"}}).Increment();
      item_finished();
      return;
    }
    case RequestEvent::Type::kError: {
      current_submitted_ = false;
      state_.engine_requests_in_flight.fetch_sub(1);
      state_.finish_tokens(engine_id_, 0);
      if (shutdown_ || ev.cause == ErrorCause::kShutdown) {
        item_failed(err("shutting_down", "The server is shutting down.", std::nullopt, 503));
      } else if (ev.cause == ErrorCause::kCapacity || ev.cause == ErrorCause::kQueueTimeout) {
        item_failed(err("server_overloaded", "The server is overloaded; the item was not transcribed.",
                        std::nullopt, 503));
      } else if (ev.cause == ErrorCause::kInvalid) {
        item_failed(err("invalid_value", ev.error.message().substr(0, 200)));
      } else {
        item_failed(
            err("engine_error", "The engine failed while transcribing this item.", std::nullopt, 500));
      }
      return;
    }
  }
}

void RealtimeSession::item_failed(const ApiError& e) {
  if (!current_) return;
  std::string b = ",\"item_id\":";
  json::append_string(b, current_->id);
  b += ",\"content_index\":0,\"error\":" + error_object_compact(e);
  state_.metrics.errors->Add({{"endpoint", "realtime"}, {"code", e.code}}).Increment();
  send("conversation.item.input_audio_transcription.failed", std::move(b));
  state_.metrics.realtime_items->Add({{"outcome", "failed"}}).Increment();
  item_finished();
}

void RealtimeSession::item_finished() {
  current_.reset();
  --pending_items_;
  state_.realtime_items_pending.fetch_sub(1);
  ++items_done_;
  pump();
  check_finish();
}

void RealtimeSession::check_finish() {
  if (closed_ || current_ || !queue_.empty()) return;
  if (finishing_) {
    send(hs_.beta ? "transcription_session.finished" : "session.finished",
         ",\"items\":" + std::to_string(items_done_));
    close(1000, "");
    return;
  }
  if (draining_ || shutdown_) close(1001, "server shutting down");
}

void RealtimeSession::on_closed() {
  if (closed_) return;
  closed_ = true;
  if (current_submitted_) {
    // The client is gone (or the session was closed): its in-flight item is cancelled, and
    // accounted for now, since the session may be gone when the engine confirms.
    state_.engine->cancel(engine_id_);
    state_.metrics.cancellations->Add({{"reason", "client_disconnect"}}).Increment();
    state_.engine_requests_in_flight.fetch_sub(1);
    state_.finish_tokens(engine_id_, 0);
    current_submitted_ = false;
  }
  cancel_interim();
  current_.reset();
  queue_.clear();
  state_.realtime_items_pending.fetch_sub(pending_items_);
  pending_items_ = 0;
  buffer_.clear();
  note_buffer();
  if (inflight_id_) {
    state_.unregister_inflight(inflight_id_);
    inflight_id_ = 0;
  }
  hs_.session_slot.reset();
  hs_.key_slot.reset();
}

void RealtimeSession::on_connection_ended() {
  on_closed();
  if (!gauge_counted_) return;
  gauge_counted_ = false;
  state_.metrics.realtime_sessions->Decrement();
}

void RealtimeSession::drain() {
  if (closed_) return;
  draining_ = true;
  check_finish();
}

void RealtimeSession::shutdown() {
  if (closed_) return;
  shutdown_ = true;
  draining_ = true;
  // Items not yet transcribed fail now; the one in flight fails when the engine confirms.
  while (!queue_.empty()) {
    auto item = queue_.front();
    queue_.pop_front();
    std::string b = ",\"item_id\":";
    json::append_string(b, item->id);
    b += ",\"content_index\":0,\"error\":" +
         error_object_compact(err("shutting_down", "The server is shutting down.", std::nullopt, 503));
    send("conversation.item.input_audio_transcription.failed", std::move(b));
    state_.metrics.realtime_items->Add({{"outcome", "failed"}}).Increment();
    ++items_done_;
    --pending_items_;
    state_.realtime_items_pending.fetch_sub(1);
  }
  if (current_submitted_) {
    state_.engine->cancel(engine_id_);
    state_.metrics.cancellations->Add({{"reason", "shutdown"}}).Increment();
    return;
  }
  if (current_) {
    item_failed(err("shutting_down", "The server is shutting down.", std::nullopt, 503));
    return;
  }
  check_finish();
}

}  // namespace vv::api
