#include "config/settings.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <toml++/toml.h>

namespace vv::config {
namespace {

using T = SettingType;
constexpr double kU32 = 4294967296.0;

// API.md §14.3, plus the extension model.tokenizer. Defaults are spelled as a flag would be.
const SettingDef kTable[] = {
    {"http.host", T::kString, "0.0.0.0", 0, 0, "", "Address to bind: an IP literal or a hostname"},
    {"http.port", T::kInt, "8000", 0, 65535, "", "TCP port (0 = an ephemeral port, for tests)"},
    {"http.max_connections", T::kInt, "1024", 1, 1000000, "", "Open client connections above this get 503"},
    {"http.max_header_bytes", T::kInt, "16384", 1024, 1048576, "", "Header block limit (431)"},
    {"http.max_uri_bytes", T::kInt, "8192", 256, 65536, "", "Request target limit (414)"},
    {"http.header_timeout_s", T::kFloat, "10", 0.1, 600, "",
     "Seconds for a request's header block to arrive"},
    {"http.body_idle_timeout_s", T::kFloat, "30", 0.1, 3600, "", "Seconds without a body byte before 408"},
    {"http.body_timeout_s", T::kFloat, "600", 1, 86400, "", "Total upload time before 408"},
    {"http.keepalive_timeout_s", T::kFloat, "75", 0, 3600, "",
     "Idle keep-alive connections close after this (0 = no keep-alive)"},
    {"http.max_body_bytes", T::kInt, "268435456", 1024, kU32, "", "Body limit of the audio routes (413)"},
    {"http.max_json_body_bytes", T::kInt, "67108864", 1024, kU32, "", "Body limit of the JSON routes (413)"},
    {"http.max_multipart_parts", T::kInt, "128", 4, 10000, "", "Most parts in one multipart body"},
    {"http.max_form_field_bytes", T::kInt, "65536", 1024, 16777216, "", "Largest non-file form field"},
    {"http.discard_body_bytes", T::kInt, "1048576", 0, 1073741824, "",
     "A refused request's remaining body up to this is read and discarded (keep-alive kept)"},
    {"http.lingering_close_s", T::kFloat, "2", 0, 30, "",
     "Seconds to keep discarding a refused large body before closing"},
    {"http.unprefixed_routes", T::kBool, "true", 0, 0, "", "Also serve every /v1/X route at /X"},
    {"http.threads", T::kInt, "0", 0, 256, "", "HTTP I/O threads (0 = number of cores, at most 16)"},
    {"cors.allowed_origins", T::kList, "", 0, 0, "",
     "Origins allowed by CORS: \"*\" or scheme://host[:port] (empty = CORS off)"},
    {"cors.max_age_s", T::kInt, "600", 0, 86400, "", "Access-Control-Max-Age of preflight answers"},
    {"auth.api_keys", T::kList, "", 0, 0, "", "API keys (empty with no key file = no authentication)", true},
    {"auth.api_keys_file", T::kPath, "", 0, 0, "", "File with one API key per line (# comments)"},
    {"auth.allow_query_api_key", T::kBool, "false", 0, 0, "", "WebSocket: accept ?api_key="},
    {"auth.max_concurrent_requests_per_key", T::kInt, "0", 0, 100000, "",
     "In-flight requests per key before 429 (0 = off)"},
    {"auth.protect_metrics", T::kBool, "false", 0, 0, "", "Require a key for /metrics"},
    {"model.path", T::kPath, "", 0, 0, "",
     "Model directory: config.json, tokenizer and safetensors weights (required)"},
    {"model.tokenizer", T::kPath, "", 0, 0, "", "tokenizer.json when model.path has none (extension)"},
    {"model.served_names", T::kList, "vibevoice-asr", 0, 0, "", "Names listed in /v1/models"},
    {"model.aliases", T::kList,
     "whisper-1,gpt-4o-transcribe,gpt-4o-mini-transcribe,gpt-4o-mini-transcribe-2025-12-15,gpt-4o-transcribe-"
     "diarize,gpt-transcribe",
     0, 0, "", "Extra accepted model names (not listed)"},
    {"model.owned_by", T::kString, "microsoft", 0, 0, "", "owned_by in /v1/models"},
    {"model.dtype", T::kEnum, "auto", 0, 0, "auto,float32,bfloat16,float16", "Weight/compute dtype"},
    {"model.max_model_len", T::kInt, "65536", 1024, 65536, "", "Context length in tokens"},
    {"model.warmup", T::kBool, "true", 0, 0, "", "Transcribe 1 s of silence before becoming ready"},
    {"model.device", T::kString, "auto", 0, 0, "",
     "auto, cpu, cuda or cuda:N; several comma-separated (cuda:0,cuda:1) or all (every GPU): "
     "engine.split_mode"},
    {"engine.max_running_requests", T::kInt, "64", 1, 1024, "", "Sequences in the running batch"},
    {"engine.max_waiting_requests", T::kInt, "256", 0, 100000, "", "Waiting queue length (503 beyond)"},
    {"engine.gpu_memory_fraction", T::kFloat, "0.90", 0.1, 0.99, "",
     "Share of GPU memory to use when engine.gpu_memory is empty"},
    {"engine.gpu_memory", T::kString, "", 0, 0, "",
     "Device memory cap per device (18GiB, 8G, 20GB, 80%; or one per device: 8G,12G): weights, KV pool, "
     "workspaces and the CUDA context are planned under it, the KV pool takes what remains"},
    {"engine.gpu_layers", T::kInt, "-1", -1, 1024, "",
     "Decoder layers kept on each device; the rest stream from pinned host memory every step (-1 = as many "
     "as the memory cap allows)"},
    {"engine.split_mode", T::kEnum, "auto", 0, 0, "auto,replica,layer",
     "Several devices: replica (a full model per device), layer (layer shards), auto (replicas while each "
     "device holds the whole model)"},
    {"engine.kv_page_tokens", T::kInt, "16", 8, 128, "8,16,32,64,128", "Tokens per KV page"},
    {"engine.max_step_tokens", T::kInt, "8192", 256, 65536, "", "Token budget of one engine step"},
    {"engine.deterministic", T::kBool, "false", 0, 0, "",
     "Batch-invariant GPU arithmetic: a request gives the same bits alone and batched (H200, 7B: "
     "-19% decode throughput at 1 request, -34% at 64, -51% at 128)"},
    {"engine.encoder_segment_s", T::kFloat, "10", 0.5, 60, "",
     "Audio seconds of one request per encoder launch (shorter: quicker cancels and first tokens)"},
    {"engine.encoder_pack_s", T::kFloat, "40", 0, 600, "",
     "Audio seconds per encoder launch over all requests packed into it (0 = one request per launch)"},
    {"engine.stall_timeout_s", T::kFloat, "120", 5, 3600, "",
     "Pending work without a step for this long → /health 503"},
    {"engine.audio_decode_threads", T::kInt, "0", 0, 256, "", "Audio decode pool (0 = min(8, cores))"},
    {"engine.sampling_threads", T::kInt, "0", 0, 256, "",
     "Threads that pick a step's sampled and logprob tokens from host logits side by side (0 = min(8, "
     "cores); 1 = the engine thread)"},
    {"asr.max_audio_seconds", T::kFloat, "3600", 1, 3600, "", "Longest accepted audio"},
    {"asr.min_audio_seconds", T::kFloat, "0.1", 0, 10, "", "Shortest accepted audio"},
    {"asr.max_new_tokens", T::kInt, "32768", 16, 65536, "", "Generated tokens per transcription"},
    {"asr.max_context_tokens", T::kInt, "2048", 0, 8192, "", "Longest prompt/keywords context in tokens"},
    {"asr.repetition_detection", T::kBool, "true", 0, 0, "", "Detect decoding loops"},
    {"asr.repetition_retries", T::kInt, "1", 0, 5, "",
     "Recoveries from a loop before finish_reason=repetition"},
    {"asr.word_timestamps", T::kEnum, "interpolate", 0, 0, "interpolate,reject", "Word timestamps"},
    {"asr.subtitle_speaker_labels", T::kBool, "true", 0, 0, "", "Speaker prefixes in srt/vtt cues"},
    {"asr.language_hint", T::kBool, "false", 0, 0, "", "Append \"Language: <code>\" to the context"},
    {"asr.translations", T::kEnum, "reject", 0, 0, "reject,transcribe", "/v1/audio/translations behaviour"},
    {"stream.keepalive_s", T::kFloat, "15", 1, 300, "", "SSE keep-alive comment interval"},
    {"chat.enabled", T::kBool, "true", 0, 0, "", "Serve /v1/chat/completions"},
    {"chat.default_max_tokens", T::kInt, "4096", 1, 65536, "", "Default completion length"},
    {"realtime.enabled", T::kBool, "true", 0, 0, "", "Serve /v1/realtime"},
    {"realtime.max_sessions", T::kInt, "64", 0, 100000, "", "Open WebSocket sessions"},
    {"realtime.max_session_s", T::kFloat, "3600", 10, 86400, "", "Longest session"},
    {"realtime.idle_timeout_s", T::kFloat, "120", 5, 3600, "", "Session idle timeout"},
    {"realtime.ping_interval_s", T::kFloat, "20", 1, 300, "", "WebSocket ping interval"},
    {"realtime.max_message_bytes", T::kInt, "16777216", 65536, 268435456, "", "Largest WebSocket message"},
    {"realtime.max_buffer_s", T::kFloat, "300", 1, 3600, "", "Uncommitted audio per session"},
    {"realtime.max_item_s", T::kFloat, "120", 1, 3600, "", "Longest item"},
    {"realtime.send_queue_bytes", T::kInt, "4194304", 65536, 1073741824, "", "Per-session send queue"},
    {"realtime.interim_interval_ms", T::kInt, "0", 0, 10000, "",
     "Interim results interval (0 = off, else 200–10000)"},
    {"realtime.turn_detection", T::kEnum, "server_vad", 0, 0, "server_vad,none", "Default turn detection"},
    {"realtime.vad_threshold", T::kFloat, "0.5", 0, 1, "", "VAD threshold"},
    {"realtime.vad_prefix_padding_ms", T::kInt, "300", 0, 2000, "", "VAD prefix padding"},
    {"realtime.vad_silence_ms", T::kInt, "500", 100, 5000, "", "VAD silence to end a turn"},
    {"limits.request_timeout_s", T::kFloat, "600", 1, 86400, "", "Deadline of an HTTP request"},
    {"limits.max_queue_wait_s", T::kFloat, "300", 1, 86400, "",
     "Longest wait in the queue (503 queue_timeout)"},
    {"shutdown.pre_stop_delay_s", T::kFloat, "5", 0, 60, "", "After SIGTERM, keep accepting for this long"},
    {"shutdown.grace_s", T::kFloat, "25", 0, 600, "", "Then let in-flight work finish for this long"},
    {"metrics.enabled", T::kBool, "true", 0, 0, "", "Serve Prometheus metrics"},
    {"metrics.path", T::kString, "/metrics", 0, 0, "", "Path of the metrics endpoint"},
    {"log.level", T::kEnum, "info", 0, 0, "trace,debug,info,warn,error", "Log level"},
    {"log.format", T::kEnum, "json", 0, 0, "json,text", "Log line format"},
    {"log.access", T::kBool, "true", 0, 0, "", "One access-log line per response"},
};

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(',', start);
    if (end == std::string_view::npos) end = s.size();
    std::string item(s.substr(start, end - start));
    auto b = item.find_first_not_of(" \t");
    auto e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

std::string shorten(std::string_view raw) {
  std::string s(raw.substr(0, 64));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return s;
}

bool parse_bool(std::string_view raw, bool& out) {
  const std::string l = lower(raw);
  if (l == "true" || l == "1") return out = true, true;
  if (l == "false" || l == "0") return out = false, true;
  return false;
}

std::string format_number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

std::string check_range(const SettingDef& d, double v) {
  if (d.type == T::kInt && !d.choices.empty()) {
    for (const auto& c : split_commas(d.choices)) {
      if (std::to_string(static_cast<std::int64_t>(v)) == c) return "";
    }
    return "must be one of " + std::string(d.choices) + ", got " + format_number(v);
  }
  if (d.min < d.max && (v < d.min || v > d.max)) {
    return "must be in " + format_number(d.min) + "–" + format_number(d.max) + ", got " + format_number(v);
  }
  return "";
}

}  // namespace

std::span<const SettingDef> setting_table() { return kTable; }

const SettingDef* find_setting(std::string_view key) {
  for (const auto& d : kTable) {
    if (d.key == key) return &d;
  }
  return nullptr;
}

std::string env_name(std::string_view key) {
  std::string r = "VIBEVOICE_";
  for (char c : key) r += c == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return r;
}

std::string flag_name(std::string_view key) {
  std::string r = "--";
  for (char c : key) r += (c == '.' || c == '_') ? '-' : c;
  return r;
}

Settings::Settings() {
  for (const auto& d : kTable) {
    values_.emplace_back();
    sources_.push_back("default");
    // Defaults always parse; set_raw overwrites the placeholder.
    std::string err = set_raw(d.key, d.default_value, "default");
    (void)err;
  }
}

std::size_t Settings::index(std::string_view key) const {
  for (std::size_t i = 0; i < std::size(kTable); ++i) {
    if (kTable[i].key == key) return i;
  }
  std::fprintf(stderr, "internal error: unknown setting %.*s\n", static_cast<int>(key.size()), key.data());
  std::abort();
}

bool Settings::b(std::string_view key) const { return std::get<bool>(values_[index(key)]); }
std::int64_t Settings::i(std::string_view key) const { return std::get<std::int64_t>(values_[index(key)]); }
double Settings::f(std::string_view key) const { return std::get<double>(values_[index(key)]); }
const std::string& Settings::s(std::string_view key) const { return std::get<std::string>(values_[index(key)]); }
const std::vector<std::string>& Settings::list(std::string_view key) const {
  return std::get<std::vector<std::string>>(values_[index(key)]);
}
const std::string& Settings::source(std::string_view key) const { return sources_[index(key)]; }

std::string Settings::set_raw(std::string_view key, std::string_view raw, const std::string& source, bool append) {
  const std::size_t idx = index(key);
  const SettingDef& d = kTable[idx];
  Value v;
  switch (d.type) {
    case T::kBool: {
      bool b = false;
      if (!parse_bool(raw, b)) return "expected true, false, 1 or 0, got '" + shorten(raw) + "'";
      v = b;
      break;
    }
    case T::kInt: {
      std::int64_t n = 0;
      auto r = std::from_chars(raw.data(), raw.data() + raw.size(), n);
      if (raw.empty() || r.ec != std::errc() || r.ptr != raw.data() + raw.size()) {
        return "expected an integer, got '" + shorten(raw) + "'";
      }
      v = n;
      break;
    }
    case T::kFloat: {
      std::string s(raw);
      char* end = nullptr;
      double x = s.empty() ? 0 : std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(x)) {
        return "expected a number, got '" + shorten(raw) + "'";
      }
      v = x;
      break;
    }
    case T::kList: {
      auto items = split_commas(raw);
      if (append && sources_[idx].rfind("flag ", 0) == 0 && source.rfind("flag ", 0) == 0) {
        auto cur = std::get<std::vector<std::string>>(values_[idx]);
        cur.insert(cur.end(), items.begin(), items.end());
        items = std::move(cur);
      }
      v = std::move(items);
      break;
    }
    default: v = std::string(raw); break;
  }
  return set_value(key, std::move(v), source);
}

std::string Settings::set_value(std::string_view key, Value v, const std::string& source) {
  const std::size_t idx = index(key);
  const SettingDef& d = kTable[idx];
  switch (d.type) {
    case T::kBool:
      if (!std::holds_alternative<bool>(v)) return "expected a boolean";
      break;
    case T::kInt: {
      if (std::holds_alternative<double>(v)) {
        double x = std::get<double>(v);
        if (x != std::floor(x)) return "expected an integer, got " + format_number(x);
        v = static_cast<std::int64_t>(x);
      }
      if (!std::holds_alternative<std::int64_t>(v)) return "expected an integer";
      std::string err = check_range(d, static_cast<double>(std::get<std::int64_t>(v)));
      if (!err.empty()) return err;
      break;
    }
    case T::kFloat: {
      if (std::holds_alternative<std::int64_t>(v)) v = static_cast<double>(std::get<std::int64_t>(v));
      if (!std::holds_alternative<double>(v)) return "expected a number";
      std::string err = check_range(d, std::get<double>(v));
      if (!err.empty()) return err;
      break;
    }
    case T::kList:
      if (std::holds_alternative<std::string>(v)) v = split_commas(std::get<std::string>(v));
      if (!std::holds_alternative<std::vector<std::string>>(v)) return "expected a list of strings";
      break;
    case T::kEnum: {
      if (!std::holds_alternative<std::string>(v)) return "expected a string";
      const auto& s = std::get<std::string>(v);
      auto choices = split_commas(d.choices);
      if (std::find(choices.begin(), choices.end(), s) == choices.end()) {
        return "must be one of " + std::string(d.choices) + ", got '" + shorten(s) + "'";
      }
      break;
    }
    case T::kString:
    case T::kPath:
      if (!std::holds_alternative<std::string>(v)) return "expected a string";
      break;
  }
  values_[idx] = std::move(v);
  sources_[idx] = source;
  return "";
}

namespace {

std::string line(std::string_view key, const std::string& reason, const std::string& source) {
  return "config error: " + std::string(key) + ": " + reason + " (from " + source + ")";
}

bool has_weights(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> Settings::validate() const {
  namespace fs = std::filesystem;
  std::vector<std::string> errors;
  auto err = [&](std::string_view key, const std::string& reason) {
    errors.push_back(line(key, reason, source(key)));
  };
  if (s("http.host").empty()) err("http.host", "must not be empty");
  const std::regex name_re(R"(^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$)");
  const auto& served = list("model.served_names");
  if (served.empty()) err("model.served_names", "must not be empty");
  std::set<std::string> seen;
  for (const auto& n : served) {
    if (!std::regex_match(n, name_re)) err("model.served_names", "invalid name '" + shorten(n) + "'");
    if (!seen.insert(n).second) err("model.served_names", "duplicate name '" + shorten(n) + "'");
  }
  for (const auto& a : list("model.aliases")) {
    if (!std::regex_match(a, name_re)) err("model.aliases", "invalid name '" + shorten(a) + "'");
    if (seen.count(a)) err("model.aliases", "alias '" + shorten(a) + "' equals a served name");
  }
  const auto& owned = s("model.owned_by");
  if (owned.empty() || owned.size() > 64) err("model.owned_by", "must be 1–64 characters");
  const std::string& dev = s("model.device");
  if (!std::regex_match(dev, std::regex(R"(^(auto|all|(cpu|cuda|cuda:[0-9]+)(,(cpu|cuda|cuda:[0-9]+))*)$)"))) {
    err("model.device", "must be auto, all, cpu, cuda, cuda:N or a comma-separated list, got '" + shorten(dev) + "'");
  }
  for (const auto& k : list("auth.api_keys")) {
    bool ok = !k.empty() && k.size() <= 256;
    for (char c : k) ok = ok && c > 0x20 && c < 0x7f;
    if (!ok) err("auth.api_keys", "a key must be 1–256 printable ASCII characters without whitespace");
  }
  const std::string& keyfile = s("auth.api_keys_file");
  if (!keyfile.empty()) {
    std::ifstream in(keyfile);
    if (!in) err("auth.api_keys_file", "cannot read '" + keyfile + "'");
  }
  const std::regex origin_re(R"(^[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:]+(:[0-9]{1,5})?$)");
  for (const auto& o : list("cors.allowed_origins")) {
    if (o != "*" && !std::regex_match(o, origin_re)) {
      err("cors.allowed_origins", "'" + shorten(o) + "' is not \"*\" or scheme://host[:port]");
    }
  }
  if (f("asr.min_audio_seconds") >= f("asr.max_audio_seconds")) {
    err("asr.min_audio_seconds", "must be less than asr.max_audio_seconds");
  }
  // Only an explicit realtime.max_item_s is held to the rule; its default follows a lowered
  // asr.max_audio_seconds (readers take the minimum).
  if (source("realtime.max_item_s") != "default" && f("realtime.max_item_s") > f("asr.max_audio_seconds")) {
    err("realtime.max_item_s", "must be at most asr.max_audio_seconds");
  }
  const std::int64_t interim = i("realtime.interim_interval_ms");
  if (interim != 0 && interim < 200) err("realtime.interim_interval_ms", "must be 0 or 200–10000");
  const std::string& mpath = s("metrics.path");
  static const char* kRoutes[] = {"/v1/", "/health", "/healthz", "/livez", "/ready", "/readyz", "/version",
                                  "/audio/", "/chat/", "/models", "/realtime"};
  if (mpath.empty() || mpath[0] != '/' || mpath.size() < 2) {
    err("metrics.path", "must start with '/' and name a path");
  } else {
    for (const char* r : kRoutes) {
      std::string_view rv(r);
      if (mpath == rv || mpath.rfind(rv, 0) == 0 || (rv.back() == '/' && mpath == rv.substr(0, rv.size() - 1))) {
        err("metrics.path", "clashes with the route " + std::string(rv));
        break;
      }
    }
  }
  const std::string& mp = s("model.path");
  if (mp.empty()) {
    err("model.path", "required (--model DIR, or the positional argument)");
  } else if (!fs::is_directory(mp)) {
    err("model.path", "'" + mp + "' is not a directory");
  } else if (!fs::exists(fs::path(mp) / "config.json") || !has_weights(mp)) {
    err("model.path", "'" + mp + "' has no config.json and *.safetensors weights");
  } else {
    const std::string& tok = s("model.tokenizer");
    if (!tok.empty()) {
      if (!fs::is_regular_file(tok)) err("model.tokenizer", "cannot read '" + tok + "'");
    } else if (!fs::exists(fs::path(mp) / "tokenizer.json")) {
      err("model.path", "'" + mp + "' has no tokenizer.json (give --tokenizer FILE)");
    }
  }
  return errors;
}

namespace {

std::string toml_string(std::string_view s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      r += buf;
      continue;
    }
    r += c;
  }
  return r + "\"";
}

}  // namespace

std::string Settings::to_toml() const {
  std::string out;
  std::string section;
  for (std::size_t idx = 0; idx < std::size(kTable); ++idx) {
    const SettingDef& d = kTable[idx];
    const auto dot = d.key.find('.');
    const std::string sec(d.key.substr(0, dot));
    if (sec != section) {
      out += (section.empty() ? "[" : "\n[") + sec + "]\n";
      section = sec;
    }
    out += std::string(d.key.substr(dot + 1)) + " = ";
    const Value& v = values_[idx];
    if (std::holds_alternative<bool>(v)) {
      out += std::get<bool>(v) ? "true" : "false";
    } else if (std::holds_alternative<std::int64_t>(v)) {
      out += std::to_string(std::get<std::int64_t>(v));
    } else if (std::holds_alternative<double>(v)) {
      std::string n = format_number(std::get<double>(v));
      if (n.find_first_of(".e") == std::string::npos) n += ".0";
      out += n;
    } else if (std::holds_alternative<std::string>(v)) {
      out += d.secret && !std::get<std::string>(v).empty() ? "\"***\"" : toml_string(std::get<std::string>(v));
    } else {
      out += "[";
      const auto& l = std::get<std::vector<std::string>>(v);
      for (std::size_t j = 0; j < l.size(); ++j) out += (j ? ", " : "") + (d.secret ? "\"***\"" : toml_string(l[j]));
      out += "]";
    }
    out += "\n";
  }
  return out;
}

namespace {

// TOML → settings. Errors name the dotted key and file:line.
void apply_toml(Settings& s, const std::string& path, std::vector<std::string>& errors) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    std::string what(e.description());
    const std::string where = path + ":" + std::to_string(b.line) + ":" + std::to_string(b.column);
    errors.push_back("config error: " + path + ": TOML syntax error at line " + std::to_string(b.line) + ":" +
                     std::to_string(b.column) + ": " + what + " (from " + where + ")");
    return;
  } catch (const std::exception& e) {
    errors.push_back("config error: " + path + ": cannot read: " + e.what() + " (from --config)");
    return;
  }
  for (auto&& [sec_key, sec_node] : root) {
    const std::string sec(sec_key.str());
    const auto* table = sec_node.as_table();
    const std::string sec_where = path + ":" + std::to_string(sec_node.source().begin.line);
    if (!table) {
      errors.push_back(line(sec, "unknown key (settings are grouped in [section] tables)", sec_where));
      continue;
    }
    for (auto&& [k, node] : *table) {
      const std::string key = sec + "." + std::string(k.str());
      const std::string where = path + ":" + std::to_string(node.source().begin.line);
      const SettingDef* d = find_setting(key);
      if (!d) {
        errors.push_back(line(key, "unknown key", where));
        continue;
      }
      Value v;
      if (auto b = node.value<bool>(); b && node.is_boolean()) {
        v = *b;
      } else if (node.is_integer()) {
        v = *node.value<std::int64_t>();
      } else if (node.is_floating_point()) {
        v = *node.value<double>();
      } else if (node.is_string()) {
        v = *node.value<std::string>();
      } else if (const auto* arr = node.as_array()) {
        std::vector<std::string> items;
        bool ok = true;
        for (auto&& el : *arr) {
          if (!el.is_string()) ok = false;
          else items.push_back(*el.value<std::string>());
        }
        if (!ok) {
          errors.push_back(line(key, "expected a list of strings", where));
          continue;
        }
        v = std::move(items);
      } else {
        errors.push_back(line(key, "unsupported TOML value type", where));
        continue;
      }
      std::string e = s.set_value(key, std::move(v), where);
      if (!e.empty()) errors.push_back(line(key, e, where));
    }
  }
}

struct Alias {
  std::string_view flag;
  std::string_view key;
};
constexpr Alias kAliases[] = {{"--host", "http.host"},
                              {"--port", "http.port"},
                              {"--model", "model.path"},
                              {"--served-model-name", "model.served_names"},
                              {"--api-key", "auth.api_keys"},
                              {"--tokenizer", "model.tokenizer"},
                              // The placement flags spelt as transcribe and bench spell them.
                              {"--device", "model.device"},
                              {"--gpu-memory", "engine.gpu_memory"},
                              {"--gpu-layers", "engine.gpu_layers"},
                              {"--split-mode", "engine.split_mode"},
                              {"--deterministic", "engine.deterministic"}};

const SettingDef* setting_for_flag(std::string_view flag) {
  for (const auto& a : kAliases) {
    if (a.flag == flag) return find_setting(a.key);
  }
  for (const auto& d : kTable) {
    if (flag_name(d.key) == flag) return &d;
  }
  return nullptr;
}

}  // namespace

LoadOutcome load_settings(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  LoadOutcome out;
  // Pass 1: the meta flags and --config (the file is applied before env and flags).
  std::string config_path;
  std::string config_source;
  for (const auto& e : env) {
    if (e.rfind("VIBEVOICE_CONFIG=", 0) == 0) {
      config_path = e.substr(17);
      config_source = "env VIBEVOICE_CONFIG";
    }
  }
  struct FlagValue {
    const SettingDef* def;
    std::string flag;
    std::string value;
  };
  std::vector<FlagValue> flags;
  std::string positional;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out.help = true;
      continue;
    }
    if (a == "--version" || a == "-V") {
      out.version = true;
      continue;
    }
    if (a == "--print-config") {
      out.print_config = true;
      continue;
    }
    if (a == "--check-config") {
      out.check_config = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || a == "--") {
      if (!positional.empty() || a == "--") {
        out.errors.push_back("config error: " + a + ": unexpected argument (from command line)");
      } else {
        positional = a;
      }
      continue;
    }
    std::string name = a, value;
    bool has_value = false;
    if (auto eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    if (name == "--config") {
      if (!has_value) {
        if (i + 1 >= args.size()) {
          out.errors.push_back("config error: --config: needs a file path (from flag --config)");
          continue;
        }
        value = args[++i];
      }
      config_path = value;
      config_source = "flag --config";
      continue;
    }
    const SettingDef* d = setting_for_flag(name);
    if (!d) {
      out.errors.push_back("config error: " + name.substr(2) + ": unknown flag " + name + " (from flag " + name + ")");
      if (!has_value && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) ++i;
      continue;
    }
    if (!has_value) {
      bool b = false;
      if (d->type == SettingType::kBool) {
        std::string next = i + 1 < args.size() ? lower(args[i + 1]) : "";
        if (i + 1 < args.size() && (next == "true" || next == "false" || next == "1" || next == "0")) {
          value = args[++i];
        } else {
          value = "true";
        }
        (void)b;
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        out.errors.push_back(line(d->key, "flag " + name + " needs a value", "flag " + name));
        continue;
      }
    }
    flags.push_back({d, name, value});
  }
  if (!config_path.empty()) {
    std::ifstream probe(config_path);
    if (!probe) {
      out.errors.push_back("config error: " + config_path + ": cannot read the config file (from " + config_source + ")");
    } else {
      apply_toml(out.settings, config_path, out.errors);
    }
  }
  for (const auto& e : env) {
    if (e.rfind("VIBEVOICE_", 0) != 0) continue;
    const auto eq = e.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = e.substr(0, eq);
    const std::string value = e.substr(eq + 1);
    if (name == "VIBEVOICE_CONFIG" || name.rfind("VIBEVOICE_TEST_", 0) == 0 || name == "VIBEVOICE_THREADS") continue;
    const SettingDef* d = nullptr;
    for (const auto& def : kTable) {
      if (env_name(def.key) == name) d = &def;
    }
    if (!d) {
      out.warnings.push_back("config warning: unknown environment variable " + name + " (ignored)");
      continue;
    }
    std::string err = out.settings.set_raw(d->key, value, "env " + name);
    if (!err.empty()) out.errors.push_back(line(d->key, err, "env " + name));
  }
  for (const auto& fv : flags) {
    std::string err = out.settings.set_raw(fv.def->key, fv.value, "flag " + fv.flag, /*append=*/true);
    if (!err.empty()) out.errors.push_back(line(fv.def->key, err, "flag " + fv.flag));
  }
  if (!positional.empty()) {
    std::string err = out.settings.set_raw("model.path", positional, "argument");
    if (!err.empty()) out.errors.push_back(line("model.path", err, "argument"));
  }
  if (!out.help && !out.version) {
    auto v = out.settings.validate();
    out.errors.insert(out.errors.end(), v.begin(), v.end());
  }
  return out;
}

std::string settings_help() {
  std::string h =
      "Usage: vibevoice serve [MODEL_PATH] [--config FILE] [--section-key VALUE ...]\n\n"
      "Serves the OpenAI-compatible API (API.md). Every setting is a TOML key ([section] key = value),\n"
      "a VIBEVOICE_SECTION_KEY variable and a --section-key flag; flags beat variables beat the file.\n"
      "Short forms: --host, --port, --model, --served-model-name, --api-key, --tokenizer, --device,\n"
      "--gpu-memory, --gpu-layers, --split-mode.\n"
      "Other flags: --config FILE, --print-config, --check-config, --version, --help.\n\nSettings:\n";
  static const char* kTypes[] = {"bool", "int", "float", "string", "list", "enum", "path"};
  for (const auto& d : kTable) {
    h += "  " + flag_name(d.key) + " <" + kTypes[static_cast<int>(d.type)] + ">";
    h += "  (default: " + (d.default_value.empty() ? std::string("none") : std::string(d.default_value)) + ")";
    if (!d.choices.empty()) h += " {" + std::string(d.choices) + "}";
    if (d.min < d.max) h += " [" + format_number(d.min) + ", " + format_number(d.max) + "]";
    h += "\n      " + std::string(d.doc) + "\n";
  }
  return h;
}

}  // namespace vv::config
