// The realtime session logic without sockets (API.md §11–§12): audio helpers, the VAD, session
// updates, and a whole session against the scripted FakeEngine through a recording transport.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "service/api/fake_engine.h"
#include "service/api/realtime_audio.h"
#include "service/api/realtime_session.h"
#include "service/api/sha256.h"
#include "tests/support/test_paths.h"

namespace vv::api {
namespace {

TEST(RealtimeAudio, Base64) {
  EXPECT_EQ(*base64_decode("aGVsbG8="), "hello");
  EXPECT_EQ(*base64_decode("aGVsbG8"), "hello");
  EXPECT_EQ(*base64_decode(""), "");
  EXPECT_FALSE(base64_decode("aGV*bG8="));
  EXPECT_FALSE(base64_decode("a"));
}

TEST(RealtimeAudio, Pcm16CarriesAnOddByte) {
  SampleDecoder d;
  d.set_format({AudioEncoding::kPcm16, 16000});
  std::vector<float> out;
  d.append(std::string("\x00", 1), out);
  EXPECT_TRUE(out.empty());
  d.append(std::string("\x40\xff\x7f\x00", 4), out);  // 0x4000, 0x7fff, then a carried 0x00
  ASSERT_EQ(out.size(), 2u);
  EXPECT_FLOAT_EQ(out[0], 0.5f);
  EXPECT_FLOAT_EQ(out[1], 32767.0f / 32768.0f);
  d.append(std::string("\x80", 1), out);  // completes 0x8000
  ASSERT_EQ(out.size(), 3u);
  EXPECT_FLOAT_EQ(out[2], -1.0f);
}

TEST(RealtimeAudio, G711) {
  EXPECT_FLOAT_EQ(mulaw_to_float(0xFF), 0.0f);
  EXPECT_FLOAT_EQ(mulaw_to_float(0x80), 32124.0f / 32768.0f);
  EXPECT_FLOAT_EQ(mulaw_to_float(0x00), -32124.0f / 32768.0f);
  EXPECT_FLOAT_EQ(alaw_to_float(0xD5), 8.0f / 32768.0f);
  EXPECT_FLOAT_EQ(alaw_to_float(0x55), -8.0f / 32768.0f);
  EXPECT_FLOAT_EQ(alaw_to_float(0xAA), 32256.0f / 32768.0f);
}

std::vector<float> tone(double seconds, int rate, double dbfs) {
  const double amp = std::pow(10.0, dbfs / 20.0) * std::sqrt(2.0);
  std::vector<float> x(static_cast<std::size_t>(seconds * rate));
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(amp * std::sin(i * 2 * M_PI * 440 / rate));
  return x;
}

TEST(RealtimeAudio, VadStartsAndStops) {
  const int rate = 16000;
  VoiceActivityDetector vad;
  vad.configure({0.5, 300, 500}, rate);
  std::vector<float> x(rate, 0.0f);
  auto t = tone(1.0, rate, -20);
  x.insert(x.end(), t.begin(), t.end());
  x.resize(x.size() + rate, 0.0f);
  // Fed in uneven pieces: frames span calls.
  std::vector<VoiceActivityDetector::Event> events;
  std::int64_t pos = 0;
  for (std::size_t n : {1000u, 7777u, 30000u, 9223u}) {
    auto e = vad.feed(x.data() + pos, n, pos);
    events.insert(events.end(), e.begin(), e.end());
    pos += static_cast<std::int64_t>(n);
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, VoiceActivityDetector::Event::Kind::kStarted);
  EXPECT_EQ(events[0].sample, 16000);
  EXPECT_EQ(events[1].kind, VoiceActivityDetector::Event::Kind::kStopped);
  EXPECT_EQ(events[1].sample, 32000 + 8000);
  EXPECT_FALSE(vad.in_speech());
  // Below the threshold's level (-35 dBFS at 0.5) nothing starts.
  VoiceActivityDetector quiet;
  quiet.configure({0.5, 300, 500}, rate);
  auto soft = tone(1.0, rate, -45);
  EXPECT_TRUE(quiet.feed(soft.data(), soft.size(), 0).empty());
}

// Posted work runs on the test thread in run_until().
class RecordingTransport : public RealtimeTransport {
 public:
  void post(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(fn));
    cv_.notify_all();
  }
  void after(double, std::function<void()>) override {}
  void send_text(std::string json) override {
    if (!closed_) sent.push_back(std::move(json));
  }
  void close(int code, std::string) override {
    if (!closed_) close_code = code;
    closed_ = true;
  }
  bool closed() const override { return closed_; }

  bool run_until(const std::function<bool()>& done) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done()) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!cv_.wait_until(lock, end, [&] { return !queue_.empty(); })) return false;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
    return true;
  }

  std::vector<std::string> sent;
  int close_code = 0;

 private:
  bool closed_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
};

std::string type_of(const std::string& json) {
  simdjson::dom::parser p;
  simdjson::padded_string s(json);
  std::string_view t;
  if (p.parse(s)["type"].get(t)) return "";
  return std::string(t);
}

std::string field(const std::string& json, const char* a, const char* b = nullptr) {
  simdjson::dom::parser p;
  simdjson::padded_string s(json);
  simdjson::dom::element e;
  if (p.parse(s)[a].get(e)) return "<absent>";
  if (b && e[b].get(e)) return "<absent>";
  std::string_view sv;
  if (!e.get(sv)) return std::string(sv);
  return simdjson::minify(e);
}

class RealtimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config::Settings s;
    metrics_ = std::make_unique<metrics::ServiceMetrics>(
        metrics::BuildInfo{"0.1.0", std::string(40, 'a'), "float32", "none"});
    state_ = std::make_unique<AppState>(s, *metrics_);
    auto tok = Tokenizer::load_file(test::tokenizer_path());
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    tokenizer_ = std::shared_ptr<const Tokenizer>(std::move(tok).value());
    state_->tokenizer = tokenizer_;
    engine_ = std::make_shared<FakeEngine>(*tokenizer_, FakeEngineOptions{});
    state_->engine = engine_;
    state_->run_blocking = [](std::function<void()> fn) { fn(); };
    state_->readiness = Readiness::kReady;
    api_ = std::make_unique<Api>(*state_);
  }
  void TearDown() override {
    session_.reset();
    engine_.reset();
  }

  void open(bool beta = false) {
    transport_ = std::make_shared<RecordingTransport>();
    RealtimeHandshake hs;
    hs.beta = beta;
    hs.model = "vibevoice-asr";
    session_ = std::make_shared<RealtimeSession>(*api_, hs, transport_);
    session_->start();
  }
  std::vector<std::string> types() const {
    std::vector<std::string> t;
    for (const auto& s : transport_->sent) t.push_back(type_of(s));
    return t;
  }
  std::string last() const { return transport_->sent.empty() ? "" : transport_->sent.back(); }

  std::unique_ptr<metrics::ServiceMetrics> metrics_;
  std::unique_ptr<AppState> state_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<FakeEngine> engine_;
  std::unique_ptr<Api> api_;
  std::shared_ptr<RecordingTransport> transport_;
  std::shared_ptr<RealtimeSession> session_;
};

TEST_F(RealtimeTest, MergeSettings) {
  const RealtimeSettings base = default_realtime_settings(*state_, "vibevoice-asr");
  EXPECT_TRUE(base.vad);
  EXPECT_EQ(base.vad_options.silence_duration_ms, 500);
  auto r = merge_realtime_settings(
      *state_, base,
      R"({"type":"transcription","audio":{"input":{"format":{"type":"audio/pcm","rate":16000},
                                       "turn_detection":null,"transcription":{"language":"EN-us","keywords":["Qwen"]}}}})",
      false);
  ASSERT_TRUE(std::holds_alternative<RealtimeSettings>(r));
  auto s = std::get<RealtimeSettings>(r);
  EXPECT_EQ(s.format.rate, 16000);
  EXPECT_FALSE(s.vad);
  EXPECT_EQ(*s.language, "en-us");
  EXPECT_EQ(s.keywords, std::vector<std::string>{"Qwen"});
  auto code_param = [&](const char* json, bool locked = false) {
    auto m = merge_realtime_settings(*state_, base, json, locked);
    if (auto* e = std::get_if<ApiError>(&m)) return e->code + " " + e->param.value_or("null");
    return std::string("ok");
  };
  EXPECT_EQ(code_param(R"({"audio":{"input":{"format":{"type":"audio/pcm","rate":11025}}}})"),
            "invalid_value session.audio.input.format.rate");
  EXPECT_EQ(code_param(R"({"audio":{"input":{"format":{"type":"audio/pcm","rate":16000}}}})", true),
            "invalid_value session.audio.input.format");
  EXPECT_EQ(code_param(R"({"audio":{"input":{"format":{"type":"audio/pcm","rate":24000}}}})", true), "ok");
  EXPECT_EQ(code_param(R"({"type":"realtime"})"), "unsupported_value session.type");
  EXPECT_EQ(code_param(R"({"input_audio_transcription":{"model":"nope"}})"),
            "model_not_found session.input_audio_transcription.model");
  EXPECT_EQ(code_param(R"({"turn_detection":{"type":"server_vad","silence_duration_ms":50}})"),
            "invalid_value session.turn_detection.silence_duration_ms");
  EXPECT_EQ(code_param(R"({"turn_detection":{"type":"server_vad","threshold":"high"}})"),
            "invalid_type session.turn_detection.threshold");
  EXPECT_EQ(code_param(R"({"include":["logprobs"]})"), "invalid_value session.include");
  auto sem = merge_realtime_settings(
      *state_, base, R"({"turn_detection":{"type":"semantic_vad","eagerness":"low"}})", false);
  EXPECT_EQ(std::get<RealtimeSettings>(sem).vad_options.silence_duration_ms, 1000);
  auto beta = merge_realtime_settings(*state_, base, R"({"input_audio_format":"g711_alaw"})", false);
  EXPECT_EQ(std::get<RealtimeSettings>(beta).format.encoding, AudioEncoding::kPcma);
  EXPECT_EQ(std::get<RealtimeSettings>(beta).format.rate, 8000);
}

TEST_F(RealtimeTest, ManualCommitTranscribesInOrder) {
  open();
  ASSERT_EQ(types(), std::vector<std::string>{"session.created"});
  EXPECT_EQ(field(last(), "session", "type"), "transcription");
  session_->on_text(
      R"({"type":"session.update","session":{"audio":{"input":{"format":{"type":"audio/pcm","rate":16000},"turn_detection":null}}}})");
  EXPECT_EQ(type_of(last()), "session.updated");
  auto t = tone(1.0, 16000, -20);
  std::string pcm;
  for (float x : t) {
    const auto v = static_cast<std::int16_t>(x * 32767);
    pcm.append(reinterpret_cast<const char*>(&v), 2);
  }
  session_->on_binary(pcm);
  session_->on_text(R"({"type":"input_audio_buffer.commit"})");
  session_->on_binary(pcm.substr(0, 3200));
  session_->on_text(R"({"type":"input_audio_buffer.commit","event_id":"c2"})");  // 100 ms: enough
  ASSERT_TRUE(transport_->run_until([&] {
    int done = 0;
    for (const auto& ty : types()) done += ty == "conversation.item.input_audio_transcription.completed";
    return done == 2;
  }));
  std::vector<std::string> committed, completed;
  std::map<std::string, std::string> deltas;
  for (const auto& m : transport_->sent) {
    const auto ty = type_of(m);
    if (ty == "input_audio_buffer.committed") committed.push_back(m);
    if (ty == "conversation.item.input_audio_transcription.completed") completed.push_back(m);
    if (ty == "conversation.item.input_audio_transcription.delta")
      deltas[field(m, "item_id")] += field(m, "delta");
  }
  ASSERT_EQ(committed.size(), 2u);
  EXPECT_EQ(field(committed[0], "audio_end_ms"), "1000");
  EXPECT_EQ(field(committed[0], "previous_item_id"), "null");
  EXPECT_EQ(field(committed[1], "audio_start_ms"), "1000");
  EXPECT_EQ(field(committed[1], "audio_end_ms"), "1100");
  EXPECT_EQ(field(committed[1], "previous_item_id"), field(committed[0], "item_id"));
  ASSERT_EQ(completed.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string id = field(committed[i], "item_id");
    EXPECT_EQ(field(completed[i], "item_id"), id);  // in commit order
    EXPECT_EQ(field(completed[i], "transcript"), deltas[id]);
    EXPECT_FALSE(deltas[id].empty());
  }
  // Too short: an error, the buffer kept.
  session_->on_binary(pcm.substr(0, 1600));
  session_->on_text(R"({"type":"input_audio_buffer.commit","event_id":"x"})");
  EXPECT_EQ(field(last(), "error", "code"), "input_audio_buffer_commit_empty");
  EXPECT_EQ(field(last(), "error", "event_id"), "x");
  session_->on_binary(pcm.substr(0, 3200));  // 50 + 100 ms: session.finish commits them
  session_->on_text(R"({"type":"session.finish"})");
  EXPECT_EQ(field(transport_->sent[transport_->sent.size() - 2], "audio_start_ms"), "1100");
  EXPECT_EQ(field(transport_->sent[transport_->sent.size() - 2], "audio_end_ms"), "1250");
  EXPECT_EQ(field(transport_->sent[transport_->sent.size() - 2], "reason"), "finish");
  ASSERT_TRUE(transport_->run_until([&] { return transport_->close_code != 0; }));
  EXPECT_EQ(type_of(last()), "session.finished");
  EXPECT_EQ(field(last(), "items"), "3");
  EXPECT_EQ(transport_->close_code, 1000);
}

TEST_F(RealtimeTest, ClientEventErrors) {
  open(true);
  EXPECT_EQ(type_of(last()), "transcription_session.created");
  session_->on_text("{");
  EXPECT_EQ(field(last(), "error", "code"), "invalid_json");
  session_->on_text("[1]");
  EXPECT_EQ(field(last(), "error", "code"), "invalid_json");
  session_->on_text(R"({"type":"response.create","event_id":"e1"})");
  EXPECT_EQ(field(last(), "error", "code"), "unknown_event");
  EXPECT_EQ(field(last(), "error", "event_id"), "e1");
  session_->on_text(R"({"type":"input_audio_buffer.append"})");
  EXPECT_EQ(field(last(), "error", "code"), "missing_required_parameter");
  session_->on_text(R"({"type":"input_audio_buffer.append","audio":"@@@"})");
  EXPECT_EQ(field(last(), "error", "param"), "audio");
  session_->on_text(R"({"type":"session.update","session":{"input_audio_format":"pcm16"}})");
  EXPECT_EQ(type_of(last()), "transcription_session.updated");
  session_->on_text(R"({"type":"input_audio_buffer.append","audio":"AAAA"})");
  session_->on_text(R"({"type":"session.update","session":{"input_audio_format":"g711_ulaw"}})");
  EXPECT_EQ(field(last(), "error", "code"), "invalid_value");
  session_->on_text(R"({"type":"input_audio_buffer.clear"})");
  EXPECT_EQ(type_of(last()), "input_audio_buffer.cleared");
  EXPECT_EQ(transport_->close_code, 0);
}

TEST_F(RealtimeTest, ServerVadCommitsTurns) {
  open();
  session_->on_text(
      R"({"type":"session.update","session":{"audio":{"input":{"format":{"type":"audio/pcm","rate":16000}}}}})");
  std::vector<float> x(16000, 0.0f);
  auto t = tone(1.0, 16000, -20);
  x.insert(x.end(), t.begin(), t.end());
  x.resize(x.size() + 16000, 0.0f);
  std::string pcm;
  for (float v : x) {
    const auto s = static_cast<std::int16_t>(v * 32767);
    pcm.append(reinterpret_cast<const char*>(&s), 2);
  }
  session_->on_binary(pcm);
  std::string started, stopped, committed;
  for (const auto& m : transport_->sent) {
    const auto ty = type_of(m);
    if (ty == "input_audio_buffer.speech_started") started = m;
    if (ty == "input_audio_buffer.speech_stopped") stopped = m;
    if (ty == "input_audio_buffer.committed") committed = m;
  }
  ASSERT_FALSE(committed.empty());
  EXPECT_EQ(field(started, "audio_start_ms"), "700");  // speech at 1000 ms − 300 ms padding
  EXPECT_EQ(field(stopped, "audio_end_ms"), "2500");   // 500 ms of silence confirmed
  EXPECT_EQ(field(committed, "audio_start_ms"), "700");
  EXPECT_EQ(field(committed, "audio_end_ms"), "2500");
  EXPECT_EQ(field(committed, "reason"), "vad");
  EXPECT_EQ(field(committed, "item_id"), field(started, "item_id"));
  ASSERT_TRUE(transport_->run_until(
      [&] { return type_of(last()) == "conversation.item.input_audio_transcription.completed"; }));
}

TEST_F(RealtimeTest, HandshakeChecksInOrder) {
  config::Settings s;
  ASSERT_EQ(s.set_raw("auth.api_keys", "sk-rt-key-0123", "test"), "");
  ASSERT_EQ(s.set_raw("realtime.max_sessions", "1", "test"), "");
  ASSERT_EQ(s.set_raw("cors.allowed_origins", "https://a.example", "test"), "");
  AppState st(s, *metrics_);
  st.key_digests = {sha256("sk-rt-key-0123")};
  st.engine = engine_;
  st.readiness = Readiness::kReady;
  Api api(st);
  auto head = [](std::string target, std::vector<std::pair<std::string, std::string>> h) {
    http::HttpRequestHead r;
    r.method = "GET";
    r.target = std::move(target);
    for (auto& kv : h) r.headers.push_back(kv);
    return r;
  };
  auto status = [&](const http::HttpRequestHead& h) {
    Precheck p = api.precheck(h);
    return p.response ? p.response->status : (p.realtime ? 101 : 0);
  };
  // No Upgrade: 426 even before authentication.
  EXPECT_EQ(status(head("/v1/realtime", {})), 426);
  const std::pair<std::string, std::string> up{"upgrade", "websocket"};
  EXPECT_EQ(status(head("/v1/realtime", {up})), 401);
  EXPECT_EQ(status(head("/v1/realtime",
                        {up, {"sec-websocket-protocol", "realtime, openai-insecure-api-key.wrong"}})),
            401);
  EXPECT_EQ(status(head("/v1/realtime?api_key=sk-rt-key-0123", {up})), 401);  // query keys are off by default
  const std::pair<std::string, std::string> key{"sec-websocket-protocol",
                                                "realtime, openai-insecure-api-key.sk-rt-key-0123"};
  EXPECT_EQ(status(head("/v1/realtime", {up, key, {"origin", "https://b.example"}})), 403);
  EXPECT_EQ(status(head("/v1/realtime?intent=conversation", {up, key})), 400);
  EXPECT_EQ(status(head("/v1/realtime?model=nope", {up, key})), 404);
  Precheck ok =
      api.precheck(head("/v1/realtime?intent=transcription&model=whisper-1",
                        {up, key, {"openai-beta", "realtime=v1"}, {"origin", "https://a.example"}}));
  ASSERT_TRUE(ok.realtime);
  EXPECT_EQ(ok.realtime->subprotocol, "realtime");
  EXPECT_TRUE(ok.realtime->beta);
  EXPECT_EQ(ok.realtime->model, "whisper-1");
  // The one session slot is held by `ok`: the next handshake is refused with 503 and Retry-After.
  Precheck full = api.precheck(head("/v1/realtime", {up, key}));
  ASSERT_TRUE(full.response);
  EXPECT_EQ(full.response->status, 503);
  EXPECT_TRUE(full.response->header("Retry-After"));
  ok.realtime.reset();
  EXPECT_EQ(status(head("/v1/realtime", {up, key})), 101);
  st.refusing = true;
  EXPECT_EQ(status(head("/v1/realtime", {up, key})), 503);
}

}  // namespace
}  // namespace vv::api
