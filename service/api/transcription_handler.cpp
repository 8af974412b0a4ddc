// POST /v1/audio/transcriptions and /v1/audio/translations (API.md §3–§5).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <regex>

#include "engine/audio/resampler.h"
#include "engine/text/prompt_builder.h"
#include "engine/text/utf8.h"
#include "engine/transcript/json_responses.h"
#include "engine/transcript/json_text.h"
#include "engine/transcript/response_format.h"
#include "engine/transcript/segment_repetition.h"
#include "engine/transcript/stream_events.h"
#include "engine/transcript/utf8_text.h"
#include "service/api/audio_intake.h"
#include "service/api/generation_call.h"
#include "service/api/handlers.h"
#include "service/api/language_tag.h"
#include "service/http/ascii_text.h"

namespace vv::api {
namespace {

using http::lower;

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(',', start);
    if (end == std::string_view::npos) end = s.size();
    std::string item = trim(s.substr(start, end - start));
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

// The form's fields by name ("[]" stripped), in arrival order; the file parts aside.
struct Form {
  std::map<std::string, std::vector<std::string>> fields;
  std::map<std::string, std::vector<std::string>> nested;  // chunking_strategy[type] → key "type"
  std::vector<http::FormPart*> files;
};

Form collect(std::vector<http::FormPart>& parts) {
  Form f;
  for (auto& p : parts) {
    if (p.name == "file") {
      f.files.push_back(&p);
      continue;
    }
    std::string name = p.name;
    if (name.size() > 2 && name.compare(name.size() - 2, 2, "[]") == 0) name.resize(name.size() - 2);
    const auto br = name.find('[');
    if (br != std::string::npos && name.back() == ']' && name.compare(0, br, "chunking_strategy") == 0) {
      f.nested[name.substr(br + 1, name.size() - br - 2)].push_back(p.data);
      continue;
    }
    f.fields[name].push_back(p.data);
  }
  return f;
}

struct Validated {
  std::string model;
  ResponseFormat format = ResponseFormat::kJson;
  bool stream = false;
  std::optional<std::string> language;
  double temperature = 0;
  bool word = false, segment = true;
  bool logprobs = false;
  std::vector<std::string> keywords;
  std::string hotwords, prompt;
  bool speaker_labels = true;
  std::string context;
};

class FieldReader {
 public:
  explicit FieldReader(Form& f) : f_(f) {}
  // A scalar: nullopt when absent or empty; error on duplicates or invalid UTF-8.
  std::optional<ApiError> scalar(const std::string& name, std::optional<std::string>& out) {
    auto it = f_.fields.find(name);
    if (it == f_.fields.end()) return std::nullopt;
    if (it->second.size() > 1) {
      return bad_request("duplicate_parameter", "The parameter '" + name + "' was given more than once.",
                         name);
    }
    if (text_utf8::first_invalid(it->second[0])) {
      return invalid_value(name, "The parameter '" + name + "' is not valid UTF-8.");
    }
    if (!it->second[0].empty()) out = it->second[0];
    return std::nullopt;
  }
  std::optional<ApiError> list(const std::string& name, bool split, std::vector<std::string>& out) {
    auto it = f_.fields.find(name);
    if (it == f_.fields.end()) return std::nullopt;
    for (const auto& v : it->second) {
      if (text_utf8::first_invalid(v))
        return invalid_value(name, "The parameter '" + name + "' is not valid UTF-8.");
      if (split) {
        for (auto& s : split_commas(v)) out.push_back(s);
      } else if (!v.empty()) {
        out.push_back(v);
      }
    }
    return std::nullopt;
  }
  std::optional<ApiError> boolean(const std::string& name, bool& out) {
    std::optional<std::string> v;
    if (auto e = scalar(name, v)) return e;
    if (!v) return std::nullopt;
    const std::string l = lower(*v);
    if (l == "true" || l == "1") {
      out = true;
    } else if (l == "false" || l == "0") {
      out = false;
    } else {
      return bad_request("invalid_type",
                         "The parameter '" + name + "' must be a boolean, got '" + echo(*v) + "'.", name);
    }
    return std::nullopt;
  }

 private:
  Form& f_;
};

std::optional<ApiError> parse_number(const std::string& name, const std::string& v, double& out) {
  static const std::regex num(R"(^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$)");
  const std::string l = lower(trim(v));
  if (l == "nan" || l == "+nan" || l == "-nan" || l == "inf" || l == "+inf" || l == "-inf" ||
      l == "infinity" || l == "-infinity" || l == "+infinity") {
    return invalid_value(name, "The parameter '" + name + "' must be a finite number.");
  }
  if (!std::regex_match(v, num)) {
    return bad_request("invalid_type",
                       "The parameter '" + name + "' must be a number, got '" + echo(v) + "'.", name);
  }
  out = std::strtod(v.c_str(), nullptr);
  if (!std::isfinite(out))
    return invalid_value(name, "The parameter '" + name + "' must be a finite number.");
  return std::nullopt;
}

std::optional<ApiError> check_chunking(Form& form, FieldReader& rd) {
  std::map<std::string, std::string> obj;
  std::optional<std::string> whole;
  if (auto e = rd.scalar("chunking_strategy", whole)) return e;
  const std::string param = "chunking_strategy";
  if (whole) {
    const std::string t = trim(*whole);
    if (t == "auto") return std::nullopt;
    // A JSON object string: accept a flat object of strings/numbers (shape checked below).
    static const std::regex member(R"re("([A-Za-z_]+)"\s*:\s*("([^"\\]*)"|[-+0-9.eE]+|null|true|false))re");
    if (t.empty() || t.front() != '{' || t.back() != '}') {
      return invalid_value(param, "chunking_strategy must be 'auto' or an object with type 'server_vad'.");
    }
    for (std::sregex_iterator it(t.begin(), t.end(), member), end; it != end; ++it) {
      obj[(*it)[1]] = (*it)[3].matched ? (*it)[3].str() : (*it)[2].str();
    }
  }
  for (auto& [k, v] : form.nested) {
    if (v.size() > 1)
      return bad_request("duplicate_parameter",
                         "The parameter 'chunking_strategy[" + k + "]' was given more than once.", param);
    obj[k] = v[0];
  }
  if (!whole && form.nested.empty()) return std::nullopt;
  auto type = obj.find("type");
  if (type == obj.end() || type->second != "server_vad") {
    return invalid_value(param, "chunking_strategy must be 'auto' or an object with type 'server_vad'.");
  }
  if (auto it = obj.find("threshold"); it != obj.end()) {
    double x = 0;
    if (parse_number(param, it->second, x) || x < 0 || x > 1) {
      return invalid_value(param, "chunking_strategy.threshold must be a number between 0 and 1.");
    }
  }
  for (const char* k : {"prefix_padding_ms", "silence_duration_ms"}) {
    if (auto it = obj.find(k); it != obj.end()) {
      double x = 0;
      if (parse_number(param, it->second, x) || x < 0 || x > 10000 || x != std::floor(x)) {
        return invalid_value(
            param, std::string("chunking_strategy.") + k + " must be an integer between 0 and 10000.");
      }
    }
  }
  return std::nullopt;
}

std::variant<Validated, ApiError> validate(const AppState& state, Form& form, bool translation) {
  const auto& s = state.settings;
  Validated v;
  v.speaker_labels = s.b("asr.subtitle_speaker_labels");
  FieldReader rd(form);
  if (form.files.empty())
    return bad_request("missing_required_parameter", "The 'file' field is required.", "file");
  if (form.files.size() > 1) {
    return bad_request("duplicate_parameter", "The parameter 'file' was given more than once.", "file");
  }
  std::optional<std::string> model;
  if (auto e = rd.scalar("model", model)) return *e;
  const auto& names = s.list("model.served_names");
  const auto& aliases = s.list("model.aliases");
  if (model && std::find(names.begin(), names.end(), *model) == names.end() &&
      std::find(aliases.begin(), aliases.end(), *model) == aliases.end()) {
    ApiError e;
    e.status = 404;
    e.code = "model_not_found";
    e.message = "The model '" + echo(*model) + "' does not exist.";
    e.param = "model";
    return e;
  }
  v.model = model ? *model : names.front();
  std::optional<std::string> fmt;
  if (auto e = rd.scalar("response_format", fmt)) return *e;
  if (fmt) {
    auto f = parse_response_format(*fmt);
    if (!f || (translation && *f == ResponseFormat::kDiarizedJson)) {
      return invalid_value("response_format",
                           std::string("Unsupported value: 'response_format' must be one of json, text, srt, "
                                       "verbose_json, vtt") +
                               (translation ? "." : ", diarized_json."));
    }
    v.format = *f;
  }
  if (auto e = rd.boolean("stream", v.stream)) return *e;
  std::optional<std::string> lang;
  if (!translation) {
    if (auto e = rd.scalar("language", lang)) return *e;
    if (lang) {
      if (!valid_language(*lang)) {
        return invalid_value("language", "Invalid language '" + echo(*lang) +
                                             "': use an ISO-639-1/-3 code such as 'en' or 'zh-Hant'.");
      }
      v.language = normalise_language(*lang);
    }
    std::vector<std::string> langs;
    if (auto e = rd.list("languages", true, langs)) return *e;
    if (langs.size() > 8) return invalid_value("languages", "At most 8 languages may be given.");
    for (const auto& l : langs) {
      if (!valid_language(l)) return invalid_value("languages", "Invalid language '" + echo(l) + "'.");
    }
    if (!v.language && !langs.empty()) v.language = normalise_language(langs.front());
  }
  std::optional<std::string> temp;
  if (auto e = rd.scalar("temperature", temp)) return *e;
  if (temp) {
    if (auto e = parse_number("temperature", *temp, v.temperature)) return *e;
    if (v.temperature < 0 || v.temperature > 1) {
      return invalid_value("temperature", "temperature must be between 0 and 1.");
    }
  }
  if (!translation) {
    std::vector<std::string> gran;
    if (auto e = rd.list("timestamp_granularities", true, gran)) return *e;
    if (!gran.empty()) {
      v.segment = v.word = false;
      for (const auto& g : gran) {
        if (g == "segment") {
          v.segment = true;
        } else if (g == "word") {
          v.word = true;
        } else {
          return invalid_value(
              "timestamp_granularities",
              "timestamp_granularities must contain only 'segment' and 'word', got '" + echo(g) + "'.");
        }
      }
      if (v.word && s.s("asr.word_timestamps") == "reject") {
        return bad_request("unsupported_value", "Word timestamps are not supported by this server.",
                           "timestamp_granularities");
      }
    }
    std::vector<std::string> include;
    if (auto e = rd.list("include", true, include)) return *e;
    for (const auto& i : include) {
      if (i != "logprobs")
        return invalid_value("include", "include must contain only 'logprobs', got '" + echo(i) + "'.");
      v.logprobs = true;
    }
    if (auto e = check_chunking(form, rd)) return *e;
    for (const char* f : {"known_speaker_names", "known_speaker_references"}) {
      if (form.fields.count(f)) {
        return bad_request(
            "unsupported_parameter",
            std::string(f) + " is not supported: the model cannot match voices to reference clips.", f);
      }
    }
    if (auto e = rd.list("keywords", false, v.keywords)) return *e;
    std::optional<std::string> hot;
    if (auto e = rd.scalar("hotwords", hot)) return *e;
    if (hot) v.hotwords = *hot;
    std::vector<std::string> terms = v.keywords;
    for (auto& t : split_commas(v.hotwords)) terms.push_back(t);
    if (terms.size() > 256) return invalid_value("keywords", "At most 256 keywords may be given.");
    for (const auto& t : terms) {
      if (t.size() > 200) return invalid_value("keywords", "Each keyword must be at most 200 bytes.");
    }
  }
  std::optional<std::string> prompt;
  if (auto e = rd.scalar("prompt", prompt)) return *e;
  if (prompt) v.prompt = *prompt;
  const std::string hint = s.b("asr.language_hint") && v.language ? *v.language : "";
  v.context = compose_context(v.prompt, v.keywords, v.hotwords, hint);
  const std::int64_t budget = s.i("asr.max_context_tokens");
  if (!v.context.empty() && state.tokenizer) {
    auto ids = state.tokenizer->encode(v.context, false);
    if (!ids.is_ok() || static_cast<std::int64_t>(ids->size()) > budget) {
      const std::string terms_only = compose_context("", v.keywords, v.hotwords);
      auto tids = state.tokenizer->encode(terms_only, false);
      const bool terms_over = tids.is_ok() && static_cast<std::int64_t>(tids->size()) > budget;
      return invalid_value(
          terms_over ? "keywords" : "prompt",
          "The prompt and keywords exceed the context budget of " + std::to_string(budget) + " tokens.");
    }
  }
  if (!translation) {
    if (auto e = rd.boolean("speaker_labels", v.speaker_labels)) return *e;
  }
  return v;
}

// §3.7 rule (a) on a finished transcript whose loop the engine did not cut: four identical
// normalised segments → keep the first of the run, finish "repetition". Only for non-streaming
// answers (a stream's deltas are already out, and done.text must equal them).
void cut_segment_loop(Transcript& t) {
  if (t.finish_reason == FinishReason::kRepetition) return;
  SegmentRepetitionDetector detector;
  for (std::size_t i = 0; i < t.segments.size(); ++i) {
    const auto first = detector.add(t.segments[i].text);
    if (!first) continue;
    t.segments.resize(*first + 1);
    std::string text;
    for (const auto& seg : t.segments) {
      if (!text.empty() && !utf8::is_cjk(utf8::last_cp(text)) && !utf8::is_cjk(utf8::first_cp(seg.text)))
        text += ' ';
      text += seg.text;
    }
    t.text = std::move(text);
    t.finish_reason = FinishReason::kRepetition;
    return;
  }
}

std::string fixed3(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

class TranscriptionCall : public GenerationCall {
 public:
  TranscriptionCall(const Api& api, std::shared_ptr<RequestInfo> info, std::shared_ptr<Exchange> ex,
                    Validated v, bool translation, double seconds)
      : GenerationCall(api, std::move(info), std::move(ex), v.stream),
        v_(std::move(v)),
        translation_(translation) {
    audio_seconds_ = seconds;
  }

 protected:
  http::HttpResponse stream_head() override {
    auto r = GenerationCall::stream_head();
    if (translation_) r.set("x-vibevoice-translation", "not-performed");
    return r;
  }
  void on_delta(const RequestEvent& ev) override {
    if (!stream_ || ev.text.empty()) return;
    const bool seg = streams_segment_events(v_.format);
    write_frame(write_delta_event(ev.text, seg ? std::optional<std::size_t>(segments_seen_) : std::nullopt,
                                  v_.logprobs ? &ev.logprobs : nullptr));
  }
  void on_segment(const RequestEvent& ev) override {
    ++segments_seen_;
    if (!stream_ || !streams_segment_events(v_.format) || !ev.segment) return;
    write_frame(write_segment_event(*ev.segment, ev.segment_index));
  }
  void adjust_done(RequestEvent& ev) override {
    if (ev.finish_reason != FinishReason::kNone) ev.transcript.finish_reason = ev.finish_reason;
    if (stream_ || !state_.settings.b("asr.repetition_detection")) return;
    cut_segment_loop(ev.transcript);
    if (ev.transcript.finish_reason == FinishReason::kRepetition &&
        ev.finish_reason != FinishReason::kRepetition) {
      ev.finish_reason = FinishReason::kRepetition;
      state_.metrics.repetition_recoveries->Add({{"outcome", "gave_up"}}).Increment();
    }
  }
  void on_done(const RequestEvent& ev) override {
    Transcript t = ev.transcript;
    t.language = v_.language;
    t.finish_reason = ev.finish_reason == FinishReason::kNone ? t.finish_reason : ev.finish_reason;
    if (t.parse_failed) state_.metrics.parse_failures->Increment();
    if (stream_) {
      write_frame(write_done_event(t, ev.usage, v_.logprobs));
      finish_stream_ok();
      return;
    }
    WriterOptions wo;
    wo.speaker_labels = v_.speaker_labels;
    wo.include_logprobs = v_.logprobs;
    wo.segment_granularity = v_.segment;
    wo.word_granularity = v_.word;
    http::HttpResponse r;
    r.body = write_response(t, v_.format, wo);
    if (translation_ && v_.format == ResponseFormat::kVerboseJson) {
      const auto at = r.body.find("\"task\": \"transcribe\"");
      if (at != std::string::npos) r.body.replace(at, 20, "\"task\": \"translate\"");
    }
    r.set("Content-Type", std::string(content_type(v_.format)));
    r.set("x-vibevoice-audio-duration", fixed3(t.duration));
    r.set("x-vibevoice-finish-reason", std::string(finish_reason_name(t.finish_reason)));
    if (v_.format == ResponseFormat::kVerboseJson && v_.word)
      r.set("x-vibevoice-word-timestamps", "interpolated");
    if (translation_) r.set("x-vibevoice-translation", "not-performed");
    exchange_->respond(std::move(r));
  }
  std::string error_frame(const ApiError& e) override {
    return "{\"type\":\"error\",\"error\":" + error_object(e) + "}";
  }

 private:
  Validated v_;
  bool translation_;
  std::size_t segments_seen_ = 0;
};

}  // namespace

std::optional<ApiError> check_transcription_form(const AppState& state, std::vector<http::FormPart>& parts,
                                                 bool translation) {
  Form form = collect(parts);
  auto checked = validate(state, form, translation);
  if (auto* e = std::get_if<ApiError>(&checked)) return *e;
  return std::nullopt;
}

void handle_transcription(const Api& api, std::shared_ptr<RequestInfo> info,
                          std::vector<http::FormPart> parts, std::shared_ptr<Exchange> exchange,
                          bool translation) {
  AppState& state = api.state();
  Form form = collect(parts);
  auto checked = validate(state, form, translation);
  if (auto* e = std::get_if<ApiError>(&checked)) {
    exchange->respond(api.fail(info.get(), *e));
    return;
  }
  Validated v = std::get<Validated>(std::move(checked));
  auto file = std::make_shared<std::string>(std::move(form.files.front()->data));
  parts.clear();
  AudioLimits limits{state.settings.f("asr.min_audio_seconds"), state.settings.f("asr.max_audio_seconds")};
  const audio::PrepareOptions popt = state.prepare;
  const Api* api_ptr = &api;
  auto vv = std::make_shared<Validated>(std::move(v));
  state.run_blocking([api_ptr, info, exchange, file, limits, popt, vv, translation] {
    const auto t0 = std::chrono::steady_clock::now();
    auto result = intake_audio(*file, popt, limits, "file");
    AppState& st = api_ptr->state();
    st.metrics.audio_decode_duration->Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const auto* ok = std::get_if<audio::PreparedAudio>(&result);
    const int source_rate = ok ? ok->source_rate : 0;
    auto shared = std::make_shared<std::variant<audio::PreparedAudio, ApiError>>(std::move(result));
    exchange->post([api_ptr, info, exchange, shared, vv, translation] {
      AppState& st = api_ptr->state();
      if (auto* e = std::get_if<ApiError>(shared.get())) {
        exchange->respond(api_ptr->fail(info.get(), *e));
        return;
      }
      auto& audio = std::get<audio::PreparedAudio>(*shared);
      const double seconds = static_cast<double>(audio.samples) / st.prepare.sample_rate;
      st.metrics.audio_input_seconds->Add({{"endpoint", info->endpoint}}).Increment(seconds);
      static const prometheus::Histogram::BucketBoundaries kAudioSeconds{0.5, 1,   2,   5,    10,   30,  60,
                                                                         120, 300, 600, 1200, 1800, 3600};
      st.metrics.audio_duration->Add({{"endpoint", info->endpoint}}, kAudioSeconds).Observe(seconds);
      Request req;
      req.kind = Request::Kind::kTranscription;
      req.audio.push_back(std::move(audio));
      req.context = vv->context;
      req.sampling.temperature = static_cast<float>(vv->temperature);
      req.sampling.max_new_tokens = static_cast<std::int32_t>(st.settings.i("asr.max_new_tokens"));
      req.sampling.logprobs = vv->logprobs || vv->format == ResponseFormat::kVerboseJson;
      req.forced_ids = st.script_ids;
      auto call = std::make_shared<TranscriptionCall>(*api_ptr, info, exchange, *vv, translation, seconds);
      call->start(std::move(req));
    });
    // The audio is handed on: this thread's next upload finds its soxr object made (the filter
    // design is ~10 % of resampling a short clip), outside any request's wait.
    audio::prepare_resampler(source_rate, popt.sample_rate);
  });
}

}  // namespace vv::api
