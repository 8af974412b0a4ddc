// The API without sockets: precheck() on request heads, handle() on parsed bodies through a
// recording Exchange, with the scripted FakeEngine behind it.
#include "service/api/api.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

#include "service/api/fake_engine.h"
#include "service/api/handlers.h"
#include "service/api/sha256.h"
#include "tests/support/test_paths.h"

namespace vv::api {
namespace {

const char* kKey = "sk-unit-0123456789";

// A recording Exchange: posted work runs on the test thread in run_until_done().
class RecordingExchange : public Exchange {
 public:
  void post(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(fn));
    cv_.notify_all();
  }
  void after(double, std::function<void()>) override {}
  void respond(http::HttpResponse r) override {
    response = std::move(r);
    done = true;
  }
  void begin_stream(http::HttpResponse head) override { stream_head = std::move(head); }
  void write(std::string data) override { stream += data; }
  void end_stream() override { done = true; }
  void on_disconnect(std::function<void()> fn) override { disconnect = std::move(fn); }
  bool disconnected() const override { return false; }

  bool run_until_done(std::chrono::seconds limit = std::chrono::seconds(20)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done) {
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

  std::optional<http::HttpResponse> response;
  std::optional<http::HttpResponse> stream_head;
  std::string stream;
  bool done = false;
  std::function<void()> disconnect;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
};

// 1 s of a 440 Hz tone, 16 kHz mono s16 WAV.
std::string tone_wav(double seconds = 1.0) {
  const int rate = 16000;
  const auto n = static_cast<std::uint32_t>(seconds * rate);
  std::string w = "RIFF";
  auto u32 = [&](std::uint32_t v) { w.append(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [&](std::uint16_t v) { w.append(reinterpret_cast<const char*>(&v), 2); };
  u32(36 + n * 2);
  w += "WAVEfmt ";
  u32(16);
  u16(1);
  u16(1);
  u32(rate);
  u32(rate * 2);
  u16(2);
  u16(16);
  w += "data";
  u32(n * 2);
  for (std::uint32_t i = 0; i < n; ++i) u16(static_cast<std::uint16_t>(static_cast<std::int16_t>(8000 * std::sin(i * 0.1727))));
  return w;
}

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override { make(); }

  void make(std::vector<std::pair<std::string, std::string>> overrides = {}) {
    config::Settings s;
    EXPECT_EQ(s.set_raw("auth.api_keys", kKey, "flag --api-key"), "");
    for (auto& [k, v] : overrides) EXPECT_EQ(s.set_raw(k, v, "test"), "") << k;
    engine_.reset();
    state_.reset();
    metrics_ = std::make_unique<metrics::ServiceMetrics>(metrics::BuildInfo{"0.1.0", std::string(40, 'a'), "float32", "none"});
    state_ = std::make_unique<AppState>(s, *metrics_);
    state_->key_digests = {sha256(kKey)};
    if (!tokenizer_) {
      auto tok = Tokenizer::load_file(test::tokenizer_path());
      ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
      tokenizer_ = std::shared_ptr<const Tokenizer>(std::move(tok).value());
    }
    state_->tokenizer = tokenizer_;
    FakeEngineOptions fo;
    fo.max_running = s.i("engine.max_running_requests");
    fo.max_waiting = s.i("engine.max_waiting_requests");
    engine_ = std::make_shared<FakeEngine>(*tokenizer_, fo);
    state_->engine = engine_;
    state_->run_blocking = [](std::function<void()> fn) { fn(); };
    state_->readiness = Readiness::kReady;
    api_ = std::make_unique<Api>(*state_);
  }

  http::HttpRequestHead head(std::string method, std::string target, bool auth = true) {
    http::HttpRequestHead h;
    h.method = std::move(method);
    h.target = std::move(target);
    if (auth) h.headers.emplace_back("authorization", std::string("Bearer ") + kKey);
    return h;
  }

  // A multipart POST through precheck + handle; returns the exchange after the response.
  std::shared_ptr<RecordingExchange> transcribe(std::vector<http::FormPart> parts,
                                                const std::string& path = "/v1/audio/transcriptions") {
    auto h = head("POST", path);
    h.headers.emplace_back("content-type", "multipart/form-data; boundary=x");
    Precheck p = api_->precheck(h);
    EXPECT_FALSE(p.response.has_value()) << (p.response ? p.response->body : "");
    auto ex = std::make_shared<RecordingExchange>();
    api_->handle(p.info, std::move(parts), "", ex);
    EXPECT_TRUE(ex->run_until_done());
    return ex;
  }

  static http::FormPart field(std::string name, std::string value) {
    http::FormPart f;
    f.name = std::move(name);
    f.data = std::move(value);
    return f;
  }
  static http::FormPart file(std::string data) { return field("file", std::move(data)); }

  std::unique_ptr<metrics::ServiceMetrics> metrics_;
  std::unique_ptr<AppState> state_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<FakeEngine> engine_;
  std::unique_ptr<Api> api_;
};

std::string code_of(const http::HttpResponse& r) {
  const auto at = r.body.find("\"code\": \"");
  return at == std::string::npos ? "" : r.body.substr(at + 9, r.body.find('"', at + 9) - at - 9);
}

TEST_F(ApiTest, UnknownRouteAndWrongMethod) {
  auto p = api_->precheck(head("POST", "/v1/nope"));
  ASSERT_TRUE(p.response);
  EXPECT_EQ(p.response->status, 404);
  EXPECT_EQ(code_of(*p.response), "unknown_url");
  p = api_->precheck(head("GET", "/v1/audio/transcriptions"));
  EXPECT_EQ(p.response->status, 405);
  EXPECT_EQ(*p.response->header("Allow"), "POST");
  EXPECT_EQ(code_of(*p.response), "method_not_allowed");
}

TEST_F(ApiTest, AuthMissingWrongAndAlternateHeaders) {
  auto p = api_->precheck(head("GET", "/v1/models", false));
  EXPECT_EQ(p.response->status, 401);
  EXPECT_EQ(code_of(*p.response), "missing_api_key");
  EXPECT_EQ(*p.response->header("WWW-Authenticate"), "Bearer");
  auto h = head("GET", "/v1/models", false);
  h.headers.emplace_back("authorization", "Bearer sk-wrong-key-abcdef");
  p = api_->precheck(h);
  EXPECT_EQ(code_of(*p.response), "invalid_api_key");
  EXPECT_EQ(p.response->body.find("wrong-key"), std::string::npos);  // masked
  EXPECT_NE(p.response->body.find("sk-***ef"), std::string::npos);
  for (const char* name : {"api-key", "x-api-key"}) {
    auto a = head("GET", "/v1/models", false);
    a.headers.emplace_back(name, kKey);
    EXPECT_EQ(api_->precheck(a).response->status, 200) << name;
  }
  auto lower = head("GET", "/v1/models", false);
  lower.headers.emplace_back("authorization", std::string("bearer   ") + kKey);
  EXPECT_EQ(api_->precheck(lower).response->status, 200);
}

TEST_F(ApiTest, ProbesNeedNoKeyAndReflectReadiness) {
  EXPECT_EQ(api_->precheck(head("GET", "/health", false)).response->status, 200);
  EXPECT_EQ(api_->precheck(head("GET", "/ready", false)).response->body, "{\"status\":\"ready\",\"model\":\"vibevoice-asr\"}");
  state_->readiness = Readiness::kLoading;
  state_->load_progress = 0.5;
  auto r = api_->precheck(head("GET", "/ready", false)).response;
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "{\"status\":\"loading\",\"progress\":0.5}");
  auto t = api_->precheck(head("POST", "/v1/audio/transcriptions")).response;
  EXPECT_EQ(t->status, 503);
  EXPECT_EQ(code_of(*t), "model_not_ready");
  EXPECT_EQ(*t->header("Retry-After"), "10");
  // Translations in reject mode answer 400 whatever the readiness.
  auto tr = api_->precheck(head("POST", "/v1/audio/translations")).response;
  EXPECT_EQ(tr->status, 400);
  EXPECT_EQ(code_of(*tr), "translation_unsupported");
}

TEST_F(ApiTest, RefusalOrderFromTheHead) {
  // Wrong key with an oversized body: 401 first.
  auto h = head("POST", "/v1/audio/transcriptions", false);
  h.headers.emplace_back("authorization", "Bearer nope-nope-nope");
  h.headers.emplace_back("content-type", "text/plain");
  h.content_length = 1ull << 40;
  EXPECT_EQ(api_->precheck(h).response->status, 401);
  // Valid key, wrong type, oversized: 415.
  auto v = head("POST", "/v1/audio/transcriptions");
  v.headers.emplace_back("content-type", "text/plain");
  v.content_length = 1ull << 40;
  EXPECT_EQ(api_->precheck(v).response->status, 415);
  auto nb = head("POST", "/v1/audio/transcriptions");
  nb.headers.emplace_back("content-type", "multipart/form-data");
  EXPECT_EQ(code_of(*api_->precheck(nb).response), "invalid_multipart");
  auto big = head("POST", "/v1/audio/transcriptions");
  big.headers.emplace_back("content-type", "multipart/form-data; boundary=b");
  big.content_length = 1ull << 40;
  auto r = api_->precheck(big).response;
  EXPECT_EQ(r->status, 413);
  EXPECT_TRUE(r->close);
  auto gz = head("POST", "/v1/audio/transcriptions");
  gz.headers.emplace_back("content-type", "multipart/form-data; boundary=b");
  gz.headers.emplace_back("content-encoding", "gzip");
  EXPECT_EQ(api_->precheck(gz).response->status, 415);
}

TEST_F(ApiTest, CorsPreflightAndOffByDefault) {
  auto h = head("OPTIONS", "/v1/audio/transcriptions", false);
  h.headers.emplace_back("origin", "https://a.example");
  h.headers.emplace_back("access-control-request-method", "POST");
  auto r = api_->precheck(h).response;
  EXPECT_EQ(r->status, 204);
  EXPECT_FALSE(r->header("Access-Control-Allow-Origin"));
  make({{"cors.allowed_origins", "https://a.example"}});
  h.headers.emplace_back("access-control-request-headers", "authorization, x-stainless-os");
  auto p = api_->precheck(h);
  EXPECT_EQ(p.response->status, 204);
  EXPECT_EQ(*p.response->header("Access-Control-Allow-Headers"), "authorization, x-stainless-os");
  bool origin = false;
  for (auto& [k, v] : p.info->response_headers) origin |= k == "Access-Control-Allow-Origin" && v == "https://a.example";
  EXPECT_TRUE(origin);
}

TEST_F(ApiTest, ModelsListAndAliases) {
  auto r = api_->precheck(head("GET", "/v1/models")).response;
  EXPECT_NE(r->body.find("\"id\": \"vibevoice-asr\""), std::string::npos);
  EXPECT_EQ(r->body.find("whisper-1"), std::string::npos);
  auto a = api_->precheck(head("GET", "/v1/models/whisper-1")).response;
  EXPECT_EQ(a->status, 200);
  EXPECT_NE(a->body.find("\"id\": \"whisper-1\""), std::string::npos);
  EXPECT_EQ(api_->precheck(head("GET", "/v1/models/nope")).response->status, 404);
  EXPECT_EQ(api_->precheck(head("GET", "/models")).response->status, 200);  // unprefixed
}

TEST_F(ApiTest, TranscriptionJsonHasExactlyTextAndUsage) {
  auto ex = transcribe({file(tone_wav(1.5)), field("model", "whisper-1")});
  ASSERT_TRUE(ex->response);
  EXPECT_EQ(ex->response->status, 200) << ex->response->body;
  EXPECT_EQ(ex->response->body, "{\"text\": \"fake transcript\", \"usage\": {\"type\": \"duration\", \"seconds\": 2}}");
  EXPECT_EQ(*ex->response->header("x-vibevoice-audio-duration"), "1.500");
  EXPECT_EQ(*ex->response->header("x-vibevoice-finish-reason"), "stop");
}

TEST_F(ApiTest, TranscriptionValidationOrder) {
  auto ex = transcribe({file(tone_wav()), field("response_format", "xml"), field("temperature", "9")});
  EXPECT_EQ(ex->response->status, 400);
  EXPECT_NE(ex->response->body.find("\"param\": \"response_format\""), std::string::npos);
  ex = transcribe({field("model", "x")});
  EXPECT_EQ(code_of(*ex->response), "missing_required_parameter");
  ex = transcribe({file(tone_wav()), file(tone_wav())});
  EXPECT_EQ(code_of(*ex->response), "duplicate_parameter");
  ex = transcribe({file(tone_wav()), field("temperature", "abc")});
  EXPECT_EQ(code_of(*ex->response), "invalid_type");
  ex = transcribe({file(tone_wav()), field("temperature", "NaN")});
  EXPECT_EQ(code_of(*ex->response), "invalid_value");
  ex = transcribe({file(tone_wav()), field("language", "english")});
  EXPECT_EQ(code_of(*ex->response), "invalid_value");
  ex = transcribe({file(tone_wav()), field("language", "\xC3\x28")});
  EXPECT_NE(ex->response->body.find("\"param\": \"language\""), std::string::npos);
  ex = transcribe({file(tone_wav()), field("known_speaker_names[]", "alice")});
  EXPECT_EQ(code_of(*ex->response), "unsupported_parameter");
  ex = transcribe({file(tone_wav()), field("chunking_strategy[type]", "server_vad"), field("chunking_strategy[threshold]", "7")});
  EXPECT_EQ(code_of(*ex->response), "invalid_value");
  ex = transcribe({file(tone_wav()), field("model", "no-such-model")});
  EXPECT_EQ(ex->response->status, 404);
}

TEST_F(ApiTest, AudioChecks) {
  EXPECT_EQ(code_of(*transcribe({file("")})->response), "empty_file");
  std::string png_bytes("\x89PNG\r\n\x1a\n", 8);
  png_bytes.append(100, 'x');  // (not operator+: gcc 12 -O3 warns -Warray-bounds inside it, a known false positive)
  auto png = transcribe({file(png_bytes)});
  EXPECT_EQ(code_of(*png->response), "invalid_file_format");
  auto path = transcribe({file("./a.mp3")});
  EXPECT_NE(path->response->body.find("file=@"), std::string::npos);
  EXPECT_EQ(code_of(*transcribe({file(tone_wav(0.05))})->response), "audio_too_short");
  // A WAV cut in the middle of its data is transcribed up to the cut (§2.6).
  const std::string whole = tone_wav(1.0);
  auto cut = transcribe({file(whole.substr(0, 44 + 16000))});
  EXPECT_EQ(cut->response->status, 200) << cut->response->body;
  EXPECT_EQ(*cut->response->header("x-vibevoice-audio-duration"), "0.500");
}

TEST_F(ApiTest, StreamDeltasConcatenateToDoneText) {
  auto ex = transcribe({file(tone_wav()), field("stream", "true"), field("response_format", "diarized_json")});
  ASSERT_TRUE(ex->stream_head);
  EXPECT_EQ(*ex->stream_head->header("Content-Type"), "text/event-stream");
  std::string deltas;
  std::size_t pos = 0;
  int segments = 0;
  while ((pos = ex->stream.find("\"delta\":\"", pos)) != std::string::npos) {
    pos += 9;
    deltas += ex->stream.substr(pos, ex->stream.find('"', pos) - pos);
  }
  for (std::size_t p = 0; (p = ex->stream.find("transcript.text.segment", p)) != std::string::npos; ++p) ++segments;
  EXPECT_EQ(deltas, "fake transcript");
  EXPECT_EQ(segments, 1);
  EXPECT_NE(ex->stream.find("\"type\":\"transcript.text.done\",\"text\":\"fake transcript\""), std::string::npos);
  EXPECT_EQ(ex->stream.substr(ex->stream.size() - 14), "data: [DONE]\n\n");
}

TEST_F(ApiTest, ChatCompletionAndErrors) {
  auto run = [&](const std::string& body) {
    auto h = head("POST", "/v1/chat/completions");
    h.headers.emplace_back("content-type", "application/json");
    Precheck p = api_->precheck(h);
    EXPECT_FALSE(p.response);
    auto ex = std::make_shared<RecordingExchange>();
    api_->handle(p.info, {}, body, ex);
    EXPECT_TRUE(ex->run_until_done());
    return ex;
  };
  auto ok = run(R"({"model":"whisper-1","messages":[{"role":"user","content":"Say hi"}],"foo":1})");
  ASSERT_TRUE(ok->response);
  EXPECT_EQ(ok->response->status, 200) << ok->response->body;
  EXPECT_NE(ok->response->body.find("\"object\": \"chat.completion\""), std::string::npos);
  EXPECT_NE(ok->response->body.find("\"model\": \"whisper-1\""), std::string::npos);
  EXPECT_EQ(code_of(*run("{\"messages\": [")->response), "invalid_json");
  EXPECT_EQ(code_of(*run("[]")->response), "invalid_json");
  EXPECT_EQ(code_of(*run(R"({"messages":[]})")->response), "invalid_value");
  EXPECT_EQ(code_of(*run(R"({"messages":[{"role":"user","content":"x"}],"n":2})")->response), "unsupported_value");
  EXPECT_EQ(code_of(*run(R"({"messages":[{"role":"user","content":"x"}],"tools":[]})")->response), "unsupported_parameter");
  std::string deep(100, '[');
  EXPECT_EQ(code_of(*run("{\"messages\":" + deep + std::string(100, ']') + "}")->response), "invalid_json");
  auto five = run(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":5})");
  EXPECT_NE(five->response->body.find("\"finish_reason\": \"length\""), std::string::npos);
  EXPECT_NE(five->response->body.find("\"completion_tokens\": 5"), std::string::npos);
}

TEST(Sniff, ContainersFromMagicBytes) {
  EXPECT_EQ(sniff_container(std::string("RIFF\0\0\0\0WAVEfmt ", 16)), "wav");
  EXPECT_EQ(sniff_container("fLaC...."), "flac");
  EXPECT_EQ(sniff_container("ID3\x03...."), "mp3");
  EXPECT_EQ(sniff_container("OggS...."), "ogg");
  EXPECT_EQ(sniff_container(std::string("\x1a\x45\xdf\xa3....", 8)), "webm");
  EXPECT_EQ(sniff_container(std::string("\0\0\0\x20" "ftypM4A ", 12)), "mp4");
  EXPECT_EQ(sniff_container("#!AMR\n"), "amr");
  EXPECT_EQ(sniff_container("hello world"), "");
}

TEST(Sha256, KnownVectors) {
  auto hex = [](const Digest& d) {
    std::string s;
    char b[3];
    for (auto x : d) {
      std::snprintf(b, sizeof b, "%02x", x);
      s += b;
    }
    return s;
  };
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256(std::string(1000, 'a'))).substr(0, 16), "41edece42d63e8d9");
}

}  // namespace
}  // namespace vv::api
